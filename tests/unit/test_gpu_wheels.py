"""deploy/gpu/select_wheels.py: of the carried wheels, a GPU machine installs those it lacks and
those it has at a version TunePlane's own wheel does not accept; never one it has that fits."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def _wheel(folder: Path, name: str, metadata: str = "") -> Path:
    path = folder / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        dist = name.rsplit("-", 1)[0]
        zf.writestr(
            f"{name}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\n{metadata}"
        )
    return path


def _select(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "deploy/gpu/select_wheels.py"), str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_it_installs_what_is_missing_or_too_old_and_keeps_what_fits(tmp_path: Path) -> None:
    own = _wheel(
        tmp_path,
        "tuneplane-0.1.0",
        "Requires-Dist: protobuf<100,>=99\nRequires-Dist: packaging>=1\n"
        "Requires-Dist: aiobotocore>=3; extra == 's3'\n",
    )
    too_old_here = _wheel(tmp_path, "protobuf-99.0")  # installed here, but below 99
    fits_here = _wheel(tmp_path, "packaging-1.0")  # installed here at a version >= 1
    missing = _wheel(tmp_path, "surely_not_installed_dist-1.0")
    done = _select(tmp_path)
    assert done.returncode == 0, done.stderr
    chosen = set(done.stdout.split())
    assert chosen == {str(own), str(too_old_here), str(missing)}
    assert str(fits_here) not in chosen
    assert "TunePlane needs <100,>=99: its wheel is used" in done.stderr


def test_a_folder_without_tuneplanes_wheel_is_refused_with_the_fix(tmp_path: Path) -> None:
    _wheel(tmp_path, "packaging-1.0")
    done = _select(tmp_path)
    assert done.returncode == 2
    assert "no tuneplane-*.whl" in done.stderr and "deploy/gpu/wheels.sh" in done.stderr
