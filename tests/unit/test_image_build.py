"""Runtime images made reproducibly: the root file system tar, the `docker save` archive and its
config (the image id), the pip lock. No engine, no root: the engine's side is
tests/integration/test_runtime_images.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from adapters.docker import image_archive, pip_layer
from adapters.docker.images import inputs_key, rootfs_name
from adapters.docker.rootfs import reproducible_tar
from adapters.docker.runtimes import PYTORCH_TRL, RECIPES
from tests.support.archives import member_bytes

pytestmark = pytest.mark.unit


def tree(root: Path, order: list[str], mtime: int) -> Path:
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"contents of {name}\n")
        os.utime(path, (mtime, mtime))
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp" / "scratch").write_text("left behind by the build")
    return root


def test_the_same_files_give_the_same_tar_whatever_their_times_and_order(tmp_path: Path) -> None:
    names = ["usr/bin/tool", "etc/conf", "usr/lib/a.so", "workspace/.keep"]
    a = tree(tmp_path / "a", names, 1_000_000)
    b = tree(tmp_path / "b", list(reversed(names)), 2_000_000_000)
    reproducible_tar(a, tmp_path / "a.tar")
    reproducible_tar(b, tmp_path / "b.tar")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as t:
        members = t.getmembers()
    names_in = [m.name for m in members]
    assert names_in == sorted(names_in)  # sorted, so the order on disk does not count
    assert "./tmp" in names_in and "./tmp/scratch" not in names_in  # kept empty
    assert {m.mtime for m in members} == {1_700_000_000}
    (b / "etc/conf").write_text("changed\n")  # a changed file is a different tar
    reproducible_tar(b, tmp_path / "b.tar")
    assert (tmp_path / "a.tar").read_bytes() != (tmp_path / "b.tar").read_bytes()


def layer(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "layer.tar"
    path.write_bytes(b"x" * 3000)  # not a multiple of 512: the archive pads it
    return path, image_archive.file_digest(path)


def test_the_archive_config_names_the_layer_and_its_id_is_its_sha256(tmp_path: Path) -> None:
    path, digest = layer(tmp_path)
    assert digest == "sha256:" + hashlib.sha256(b"x" * 3000).hexdigest()
    labels = {"tuneplane.runtime": "r", "tuneplane.inputs": "abc"}
    one = image_archive.image_archive(path, digest, "localhost/t/r:1", labels, ["PATH=/bin"])
    swapped = dict(reversed(labels.items()))
    two = image_archive.image_archive(path, digest, "localhost/t/r:1", swapped, ["PATH=/bin"])
    assert one.config == two.config and one.image_id == two.image_id
    assert one.image_id == "sha256:" + hashlib.sha256(one.config).hexdigest()
    config = json.loads(one.config)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [digest]}
    assert config["created"] == image_archive.CREATED and config["config"]["Labels"] == labels
    other = image_archive.image_archive(path, digest, "localhost/t/r:1", {"x": "1"}, ["PATH=/bin"])
    assert other.image_id != one.image_id  # labels are part of the image


def test_the_archive_streams_as_a_tar_docker_load_reads(tmp_path: Path) -> None:
    path, digest = layer(tmp_path)
    archive = image_archive.image_archive(path, digest, "localhost/t/r:1", {}, [])
    sent: list[int] = []
    data = b"".join(image_archive.chunks(archive, sent.append))
    assert sent == [3000] and len(data) % 512 == 0
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        files = {m.name: member_bytes(t, m) for m in t.getmembers() if m.isfile()}
    [manifest] = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == ["localhost/t/r:1"]
    assert files[manifest["Config"]] == archive.config
    assert files[manifest["Layers"][0]] == b"x" * 3000


def test_a_layer_digest_is_kept_beside_it_until_the_file_changes(tmp_path: Path) -> None:
    path, digest = layer(tmp_path)
    assert path.with_name("layer.tar.sha256").read_text().endswith(digest + "\n")
    path.write_bytes(b"y" * 3001)
    assert image_archive.file_digest(path) == "sha256:" + hashlib.sha256(b"y" * 3001).hexdigest()


def test_the_lock_declares_what_the_runtime_contract_says(tmp_path: Path) -> None:
    locked = pip_layer.read_lock(pip_layer.lock_path("pytorch-trl"))
    assert len(locked) > 40 and locked["trl"] == "1.16.0"
    assert {k: locked[k] for k in PYTORCH_TRL.frameworks} == PYTORCH_TRL.frameworks
    bad = tmp_path / "bad.txt"
    bad.write_text("# fine\ntrl>=1.16\n")
    with pytest.raises(pip_layer.LockError, match=r"bad.txt:2: not NAME==VERSION"):
        pip_layer.read_lock(bad)
    with pytest.raises(pip_layer.LockError, match="no lock file"):
        pip_layer.read_lock(tmp_path / "missing.txt")


def test_the_cache_key_follows_the_recipe_and_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = inputs_key("pytorch-trl", RECIPES["pytorch-trl"])
    assert rootfs_name("pytorch-trl", RECIPES["pytorch-trl"]) == f"pytorch-trl-rootfs-{key}.tar"
    lock = pip_layer.lock_path("pytorch-trl").read_text()
    moved = tmp_path / "pytorch-trl.txt"
    moved.write_text(lock + "\n# a comment changes nothing\n")
    monkeypatch.setattr(pip_layer, "LOCKS", tmp_path)
    assert inputs_key("pytorch-trl", RECIPES["pytorch-trl"]) == key
    moved.write_text(lock.replace("trl==1.16.0", "trl==1.16.1"))
    assert inputs_key("pytorch-trl", RECIPES["pytorch-trl"]) != key
    assert inputs_key("python", RECIPES["python"]) != inputs_key("busybox", RECIPES["busybox"])


def test_console_scripts_point_at_the_image_python(tmp_path: Path) -> None:
    scripts = tmp_path / "site" / "bin"
    scripts.mkdir(parents=True)
    (scripts / "torchrun").write_bytes(b"#!/root/.pyenv/versions/3.11.7/bin/python3.11\nimport x\n")
    pip_layer._move_scripts(scripts, tmp_path / "usr/local/bin")
    moved = tmp_path / "usr/local/bin/torchrun"
    assert moved.read_bytes() == b"#!/usr/bin/python3\nimport x\n"
    assert moved.stat().st_mode & 0o111 and not scripts.exists()


def test_a_damaged_digest_file_is_not_believed(tmp_path: Path) -> None:
    path, digest = layer(tmp_path)
    side = path.with_name("layer.tar.sha256")
    stamp = side.read_text().split("\n")[0]
    side.write_text(f"{stamp}\nsha256:12")  # cut short, with the file's own stamp
    assert image_archive.file_digest(path) == digest
    assert side.read_text() == f"{stamp}\n{digest}\n"


def test_a_build_on_another_python_than_the_images_is_refused(tmp_path: Path) -> None:
    (tmp_path / "usr/lib/python3.9").mkdir(parents=True)  # not this interpreter's
    with pytest.raises(pip_layer.LockError, match=r"the image has python3.9 but this build runs"):
        pip_layer.install(tmp_path, pip_layer.lock_path("pytorch-trl"), print)
    assert not (tmp_path / "usr/local").exists()
