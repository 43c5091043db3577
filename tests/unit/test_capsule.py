"""The Job Capsule as data: the same job gives the same bytes and digest; the digest is the
manifest's; the manifest covers every file; the command survives shell quoting; the runner's
exit codes read as reasons."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile

import pytest

from domain import capsule
from domain.catalog import RuntimePin
from tests.support.archives import member_bytes

pytestmark = pytest.mark.unit

PIN = RuntimePin("python", "localhost/tuneplane/runtime-python:3.11", "sha256:" + "a" * 64,
                 "3.11", "single-process")  # fmt: skip


def files(tar: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return {
            m.name.removeprefix("tuneplane/capsule/"): member_bytes(t, m) for m in t if m.isfile()
        }


def test_the_same_job_gives_the_same_bytes_and_the_digest_is_the_manifest_s() -> None:
    one = capsule.build(b'{"a":1}', ("python", "train.py"), PIN, b"source-bytes")
    two = capsule.build(b'{"a":1}', ("python", "train.py"), PIN, b"source-bytes")
    assert one == two
    digest, tar = one
    got = files(tar)
    assert set(got) == {"spec.json", "entry.sh", "runtime.contract", "runner.sh",
                        "source.tar.gz", "SHA256SUMS"}  # fmt: skip
    assert digest == "sha256:" + hashlib.sha256(got["SHA256SUMS"]).hexdigest()
    listed = dict(line.split("  ")[::-1] for line in got["SHA256SUMS"].decode().splitlines())
    assert listed == {n: hashlib.sha256(d).hexdigest() for n, d in got.items() if n != "SHA256SUMS"}
    assert b"python=3.11\n" in got["runtime.contract"]


@pytest.mark.parametrize(
    "change",
    [
        {"spec": b'{"a":2}'},
        {"command": ("python", "other.py")},
        {"source": b"source-bytez"},
        {"source": None},
        {"runtime": PIN.__class__(**{**PIN.to_dict(), "python": "3.12"})},  # type: ignore[arg-type]
    ],
)
def test_anything_that_changes_changes_the_digest(change: dict[str, object]) -> None:
    base = {"spec": b'{"a":1}', "command": ("python", "train.py"), "source": b"source-bytes",
            "runtime": PIN}  # fmt: skip
    args = {**base, **change}
    digest, _ = capsule.build(args["spec"], args["command"], args["runtime"], args["source"])  # type: ignore[arg-type]
    assert digest != capsule.build(b'{"a":1}', ("python", "train.py"), PIN, b"source-bytes")[0]


def test_the_command_survives_shell_quoting() -> None:
    argv = ("/bin/sh", "-c", "echo \"it's $HOME\"; echo 'a  b' `x`", "--", "two words", "")
    script = capsule.entry_script(argv).decode().replace("exec ", "printf '<%s>' ", 1)
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout == "".join(f"<{a}>" for a in argv)


def test_runner_exits_read_as_reasons() -> None:
    assert capsule.runner_failure(92) is not None and "changed since the commit" in str(
        capsule.runner_failure(92)
    )
    assert capsule.runner_failure(0) is None and capsule.runner_failure(None) is None
    assert capsule.runner_failure(1) is None
