"""check_local: the spool is refused on network and shared file systems (fake mountinfo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.telemetry.localfs import check_local, is_network, mount_of, unescape
from domain.errors import InvalidInput

pytestmark = pytest.mark.unit

MOUNTINFO = r"""22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:21 / /proc rw,nosuid - proc proc rw
30 22 0:40 / /mnt/shared rw,relatime shared:5 - nfs4 server:/export rw,vers=4.2
31 30 8:2 / /mnt/shared/local rw,relatime - xfs /dev/sdb1 rw
32 22 0:41 / /mnt/my\040data rw,relatime - fuse.sshfs user@host:/data rw
33 22 0:42 / /mnt/my rw,relatime - ext4 /dev/sdc1 rw
34 22 0:43 / /srv/gcs rw - fuse.gcsfuse bucket rw
35 22 0:44 / /srv/lustre rw - lustre 10.0.0.1@tcp:/fs rw
36 22 0:45 / /srv/tmp rw - tmpfs tmpfs rw
37 22 0:46 / /srv/stack rw - ext4 /dev/sdd1 rw
38 37 0:47 / /srv/stack rw - cifs //nas/share rw
39 22 0:48 / /srv/back\134slash rw - ceph 10.0.0.2:/ rw
"""


@pytest.fixture
def mountinfo(tmp_path: Path) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text(MOUNTINFO)
    return path


def test_unescape_reads_the_octal_escapes_of_mountinfo() -> None:
    assert unescape(r"/mnt/my\040data") == "/mnt/my data"
    assert unescape(r"/a\011b\012c\134d") == "/a\tb\nc\\d"
    assert unescape("/plain") == "/plain"
    assert unescape("/not\\09octal\\") == "/not\\09octal\\"  # not three octal digits: kept


@pytest.mark.parametrize(
    ("path", "point", "fstype"),
    [
        ("/home/me/spool", "/", "ext4"),
        ("/mnt/shared", "/mnt/shared", "nfs4"),
        ("/mnt/shared/x/y", "/mnt/shared", "nfs4"),
        ("/mnt/shared/local/spool", "/mnt/shared/local", "xfs"),  # the longest mount point
        ("/mnt/sharedness", "/", "ext4"),  # a prefix of a name is not the mount
        ("/mnt/my data/spool", "/mnt/my data", "fuse.sshfs"),  # \040 in the mount point
        ("/mnt/my/spool", "/mnt/my", "ext4"),
        ("/srv/stack/spool", "/srv/stack", "cifs"),  # mounted on top: the later line wins
        ("/srv/back\\slash/s", "/srv/back\\slash", "ceph"),
    ],
)
def test_mount_of_finds_the_longest_matching_mount_point(
    path: str, point: str, fstype: str
) -> None:
    assert mount_of(path, MOUNTINFO) == (point, fstype)


@pytest.mark.parametrize(
    "fstype",
    ["nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
     "9p", "virtiofs", "afs", "davfs", "fuse", "fuseblk", "fuse.sshfs", "fuse.s3fs",
     "fuse.gcsfuse", "fuse.juicefs"],
)  # fmt: skip
def test_network_and_shared_file_systems_are_named(fstype: str) -> None:
    assert is_network(fstype)


@pytest.mark.parametrize("fstype", ["ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "f2fs"])
def test_local_file_systems_are_not(fstype: str) -> None:
    assert not is_network(fstype)


@pytest.mark.parametrize(
    "path", ["/mnt/shared/spool", "/mnt/my data/a/b/c", "/srv/gcs/spool", "/srv/lustre/x"]
)
def test_a_spool_on_a_network_file_system_is_refused_with_a_fix(path: str, mountinfo: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_local(Path(path), mountinfo)
    assert "network or shared file system" in caught.value.message
    assert "local disk" in caught.value.fix
    assert caught.value.field == "spool"


@pytest.mark.parametrize(
    "path", ["/var/lib/tuneplane/spool", "/mnt/shared/local/spool", "/srv/tmp/s", "/mnt/my/s"]
)
def test_a_spool_on_a_local_file_system_is_accepted(path: str, mountinfo: Path) -> None:
    check_local(Path(path), mountinfo)


def test_a_symlink_is_judged_by_where_it_leads(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    info = tmp_path / "mountinfo"
    info.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22 0:40 / {real} rw - nfs s:/e rw\n")
    with pytest.raises(InvalidInput):
        check_local(link / "spool" / "not" / "made" / "yet", info)
    check_local(tmp_path / "elsewhere", info)


def test_without_mountinfo_nothing_is_refused(tmp_path: Path) -> None:
    check_local(tmp_path / "spool", tmp_path / "no-such-mountinfo")


def test_the_real_mountinfo_of_a_temporary_directory_is_readable(tmp_path: Path) -> None:
    point, fstype = mount_of(str(tmp_path.resolve()), Path("/proc/self/mountinfo").read_text())
    assert point.startswith("/") and fstype
