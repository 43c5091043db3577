"""Source archive packing (entrypoints/cli/archive.py): git's view of the experiment directory,
deterministic bytes, and the refusals (secrets, symlink escapes, size, outside git)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from domain.errors import InvalidInput, TooLarge
from entrypoints.cli import archive
from entrypoints.cli.archive import is_secret, list_files, pack
from tests.support.archives import member_bytes

pytestmark = pytest.mark.unit


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    """A repo with an experiment dir holding tracked, untracked, ignored and deleted files."""
    git(tmp_path, "init", "-q")
    e = tmp_path / "exp"
    (e / "src").mkdir(parents=True)
    (e / "train.sh").write_text("echo hi\n")
    (e / "train.sh").chmod(0o755)
    (e / "src" / "model.py").write_text("x = 1\n")
    (e / "gone.txt").write_text("deleted later\n")
    (e / ".gitignore").write_text("data/\n*.ckpt\n")
    git(tmp_path, "add", "exp")
    (e / "gone.txt").unlink()  # tracked, deleted from the work tree
    (e / "notes.md").write_text("untracked, not ignored\n")
    (e / "data").mkdir()
    (e / "data" / "big.bin").write_bytes(b"\0" * 100)
    (e / "model.ckpt").write_bytes(b"ckpt")
    (tmp_path / "outside.txt").write_text("not in the experiment\n")
    return e


def names(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()


def test_packs_tracked_and_untracked_but_not_ignored_or_deleted(exp: Path) -> None:
    assert list_files(exp) == [".gitignore", "notes.md", "src/model.py", "train.sh"]
    a = pack(exp)
    try:
        assert names(a.path) == [".gitignore", "notes.md", "src/model.py", "train.sh"]
        with tarfile.open(a.path) as tar:
            info = tar.getmember("train.sh")
            assert (info.mtime, info.uid, info.gid, info.mode) == (0, 0, 0, 0o755)
            assert tar.getmember("notes.md").mode == 0o644
            assert member_bytes(tar, "src/model.py") == b"x = 1\n"
        assert a.size == a.path.stat().st_size and a.digest.startswith("sha256:")
    finally:
        a.discard()
    assert not a.path.exists()


def test_same_tree_gives_same_digest_whatever_the_mtimes(exp: Path) -> None:
    first = pack(exp)
    for f in exp.rglob("*"):
        os.utime(f, (1_000_000, 1_000_000))
    second = pack(exp)
    assert (first.digest, first.size) == (second.digest, second.size)
    assert first.path.read_bytes() == second.path.read_bytes()
    (exp / "notes.md").write_text("changed\n")
    third = pack(exp)
    assert third.digest != first.digest
    for a in (first, second, third):
        a.discard()


@pytest.mark.parametrize(
    "name", [".env", ".env.prod", "key.pem", "tls.key", "id_rsa", "id_ed25519", "cert.p12",
             ".netrc", "credentials.json", ".npmrc", ".pypirc", "vault.kdbx"],
)  # fmt: skip
def test_secret_looking_files_are_refused_unless_allowed(exp: Path, name: str) -> None:
    (exp / "src" / name).write_text("s3cret\n")
    with pytest.raises(InvalidInput) as info:
        pack(exp)
    assert f"src/{name}" in info.value.message
    assert "--allow-secret-files" in info.value.fix and ".gitignore" in info.value.fix
    a = pack(exp, allow_secret_files=True)
    assert f"src/{name}" in names(a.path)
    a.discard()


@pytest.mark.parametrize("name", [".ENV", ".Env.Prod", "key.PEM", "ID_RSA", "Credentials.JSON"])
def test_a_secret_in_capitals_is_refused_too(exp: Path, name: str) -> None:
    (exp / "src" / name).write_text("s3cret\n")
    with pytest.raises(InvalidInput) as info:
        pack(exp)
    assert f"src/{name}" in info.value.message
    assert not is_secret(".ENV.EXAMPLE") and not is_secret("ID_RSA.PUB")


def test_ignored_secrets_and_templates_are_fine(exp: Path) -> None:
    (exp / "data" / ".env").write_text("ignored by git\n")
    (exp / ".env.example").write_text("TEMPLATE=1\n")
    assert not is_secret(".env.example") and is_secret("a/b/.env")
    a = pack(exp)
    assert ".env.example" in names(a.path) and "data/.env" not in names(a.path)
    a.discard()


def test_every_secret_is_listed(exp: Path) -> None:
    (exp / ".env").write_text("A=1\n")
    (exp / "server.pem").write_text("x\n")
    with pytest.raises(InvalidInput, match=r"\.env, server\.pem"):
        pack(exp)


def test_outside_git_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "plain").mkdir()
    with pytest.raises(InvalidInput) as info:
        pack(tmp_path / "plain")
    assert "not inside a git repository" in info.value.message
    assert "tp init" in info.value.fix


def test_size_limit_is_checked_before_upload_with_the_actual_size(exp: Path) -> None:
    (exp / "weights.bin").write_bytes(os.urandom(300_000))
    with pytest.raises(TooLarge) as info:
        pack(exp, limit=100_000)
    assert "weights.bin" in info.value.message and "MiB" in info.value.message
    assert ".gitignore" in info.value.fix
    assert archive.MAX_ARCHIVE_BYTES == 64 * 1024 * 1024
    a = pack(exp, limit=400_000)
    assert a.size > 300_000
    a.discard()


def test_final_size_above_limit_names_the_size(exp: Path) -> None:
    with pytest.raises(TooLarge, match=r"is 0\.0 MiB compressed, above the limit"):
        pack(exp, limit=50)


def test_symlinks_inside_are_kept_and_escapes_refused(exp: Path) -> None:
    (exp / "link.sh").symlink_to("train.sh")
    a = pack(exp)
    with tarfile.open(a.path) as tar:
        link = tar.getmember("link.sh")
        assert link.issym() and link.linkname == "train.sh"
    a.discard()
    for target in ("../outside.txt", str(exp.parent / "outside.txt"), "src/../../outside.txt"):
        (exp / "escape").unlink(missing_ok=True)
        (exp / "escape").symlink_to(target)
        with pytest.raises(InvalidInput, match="points outside the experiment"):
            pack(exp)


def test_progress_callbacks_add_up(exp: Path) -> None:
    seen: list[int] = []
    totals: list[int] = []
    a = pack(exp, on_progress=seen.append, on_total=totals.append)
    assert sum(seen) == totals[0] == sum((exp / f).stat().st_size for f in a.files)
    assert sum(len(c) for c in a.chunks()) == a.size
    a.discard()
