"""A runtime's package list (docs/runtimes.md, "Contents drift"): the capsule carries it as
``runtime.packages`` only when the runtime has one (specs and capsules without it keep their
digest); the runner's one python3 check names each difference between it and what
importlib.metadata finds (run here with this machine's python3 on made-up dist-info
directories); a contract whose frameworks contradict its package list is refused."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.docker.pip_layer import lock_path, read_lock
from adapters.docker.runtimes import PYTHON_NUMPY, PYTORCH_TRL
from domain import capsule
from domain.catalog import RuntimePin
from domain.errors import InvalidInput
from domain.runtimes import check_runtime, pin_of
from tests.unit.test_capsule import PIN, files

pytestmark = pytest.mark.unit
D1 = "sha256:" + "1" * 64


def dist(site: Path, name: str, version: str | None, *, metadata: bool = True) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    if metadata:
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def check(tmp: Path, listed: str, *sites: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "runtime.packages").write_text(listed)
    cmd = [sys.executable, "-E", "-c", capsule.PACKAGE_CHECK, str(tmp / "runtime.packages")]
    return subprocess.run([*cmd, *map(str, sites)], capture_output=True, text=True, timeout=60)


def test_the_check_names_each_difference_and_passes_the_same_set(tmp_path: Path) -> None:
    one, two = tmp_path / "site-a", tmp_path / "site-b"
    dist(one, "Same_Name", "1.0")  # listed canonically as same-name
    dist(one, "changed", "2.0")
    dist(one, "extra", "0.1")
    dist(one, "twice", "1.0")
    dist(two, "twice", "1.1")
    dist(two, "broken", "9", metadata=False)
    listed = "same-name==1.0\nchanged==2.1\ngone==3.0\ntwice==1.0\n"
    out = check(tmp_path, listed, one, two, one)  # a directory on the path twice counts once
    assert out.returncode == 3, out.stderr
    assert out.stdout.strip().split("; ") == [
        f"an unreadable distribution at {(two / 'broken-9.dist-info').resolve()}",
        "changed is 2.0, the contract pins 2.1",
        "extra 0.1 is not in the contract",
        "gone 3.0 is missing",
        "twice is installed 2 times (1.0, 1.1)",
    ]
    same = check(tmp_path, "same-name==1.0\n", one / ".." / "site-a")
    assert same.returncode == 3 and "same-name" not in same.stdout  # only the others differ
    exact = tmp_path / "exact"
    dist(exact, "Same_Name", "1.0")
    dist(exact, "torch", "2.13.0+cpu")
    passed = check(tmp_path, "same-name==1.0\ntorch==2.13.0+cpu\n", exact)
    assert (passed.returncode, passed.stdout, passed.stderr) == (0, "", "")


def test_many_differences_are_cut_to_twenty_and_a_count(tmp_path: Path) -> None:
    out = check(tmp_path, "".join(f"p{i:02}==1\n" for i in range(25)), tmp_path / "empty")
    parts = out.stdout.strip().split("; ")
    assert out.returncode == 3 and len(parts) == 21
    assert parts[0] == "p00 1 is missing" and parts[-1] == "and 5 more"


def test_the_package_list_ships_only_when_the_runtime_has_one() -> None:
    spec_json, command = b'{"a":1}', ("python3", "train.py")
    digest, tar = capsule.build(spec_json, command, PIN, None)
    assert capsule.PACKAGES not in files(tar) and "packages" not in PIN.to_dict()
    assert RuntimePin(**PIN.to_dict()) == PIN  # type: ignore[arg-type]
    listed = dataclasses.replace(PIN, packages={"zlib-ng": "1.0", "attrs": "25.1.0"})
    with_list, tar = capsule.build(spec_json, command, listed, None)
    got = files(tar)
    assert got[capsule.PACKAGES] == b"attrs==25.1.0\nzlib-ng==1.0\n"  # sorted, one a line
    assert f"  {capsule.PACKAGES}\n" in got["SHA256SUMS"].decode()  # the manifest covers it
    assert with_list != digest and got["runtime.contract"] == capsule.contract(PIN)
    assert listed.to_dict()["packages"] == {"attrs": "25.1.0", "zlib-ng": "1.0"}
    assert RuntimePin(**listed.to_dict()) == listed  # type: ignore[arg-type]
    assert "drifted" in str(capsule.runner_failure(97)) and "(runner exit 97" in str(
        capsule.runner_failure(97)
    )


def test_pytorch_trl_lists_its_whole_lock_and_its_frameworks_agree() -> None:
    pin = pin_of(PYTORCH_TRL, D1)
    assert pin.packages == read_lock(lock_path("pytorch-trl")) and len(pin.packages) > 40
    assert all(pin.packages[name] == v for name, v in pin.frameworks.items())
    assert check_runtime(PYTORCH_TRL, require_digest=False) == PYTORCH_TRL
    assert not pin_of(PYTHON_NUMPY, D1).packages  # no list: the image is not enumerated
    assert "packages" not in PYTHON_NUMPY.content() and "packages" in PYTORCH_TRL.content()


@pytest.mark.parametrize(
    ("change", "message", "field"),
    [
        ({"frameworks": {"trl": "0.9.0"}}, "framework trl 0.9.0 is not in the runtime's package"
         " list (it lists 1.16.0)", "frameworks.trl"),
        ({"frameworks": {"verl": "0.9.1"}}, "(it lacks it)", "frameworks.verl"),
        ({"packages": {"trl": "1.16.0", "bad name": "1"}}, "'bad name' at '1' is not a"
         " distribution name", "packages.bad name"),
        ({"packages": {"trl": "1.16.0\nframework.x=1"}}, "is not a distribution name",
         "packages.trl"),
        ({"python": None, "frameworks": {}}, "lists its Python packages but no Python version",
         "python"),
    ],
)  # fmt: skip
def test_a_package_list_that_cannot_be_kept_or_rendered_is_refused(
    change: dict[str, object], message: str, field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_runtime(dataclasses.replace(PYTORCH_TRL, **change), require_digest=False)  # type: ignore[arg-type]
    assert message in caught.value.message and caught.value.field == field
    assert caught.value.fix
