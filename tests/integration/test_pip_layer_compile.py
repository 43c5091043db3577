"""A runtime image's pip layer is byte-compiled at build time (``pip_layer.compile_layer``), so
that no container compiles it again: each .pyc must survive the reproducible tar's fixed mtime,
name the source's path in the image, and come out the same from two builds in two places."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.docker.pip_layer import compile_layer

pytestmark = pytest.mark.integration
SITE = "usr/local/lib/python3.11/dist-packages"


def a_layer(root: Path) -> Path:
    site = root / SITE
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("NAMES = {'a', 'b', 'c'}\n\ndef f():\n    return 1\n")
    (site / "pkg" / "template.py").write_text("print 'python 2'\n")  # does not compile
    return site


def pycs(site: Path) -> dict[str, str]:
    return {
        str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(site.rglob("*.pyc"))
    }


def test_the_layer_is_compiled_once_with_the_image_s_paths_and_the_same_bytes(
    tmp_path: Path,
) -> None:
    said: list[str] = []
    first, second = a_layer(tmp_path / "one"), a_layer(tmp_path / "elsewhere" / "two")
    compile_layer(tmp_path / "one", first, said.append)
    compile_layer(tmp_path / "elsewhere" / "two", second, said.append)

    made = pycs(first)
    assert list(made) == ["pkg/__pycache__/__init__.cpython-311.pyc"]  # not the template
    assert made == pycs(second)  # two places, the same bytes
    assert any("1 files of the layer do not compile" in line for line in said), said
    data = (first / made.popitem()[0]).read_bytes()
    assert int.from_bytes(data[4:8], "little") == 0b11  # checked-hash: no mtime in it
    assert f"/{SITE}/pkg/__init__.py".encode() in data  # the path in the image
    assert str(tmp_path).encode() not in data


def test_a_compiled_module_is_used_after_its_mtime_changed_and_recompiled_once_edited(
    tmp_path: Path,
) -> None:
    site = a_layer(tmp_path)
    compile_layer(tmp_path, site, lambda _: None)
    source = site / "pkg" / "__init__.py"
    os.utime(source, (1_700_000_000, 1_700_000_000))  # what the tar does to every file

    def load() -> str:
        env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run(
            [sys.executable, "-v", "-c", "import pkg; print(pkg.f())"],
            capture_output=True, text=True, env=env, check=True,
        ).stderr  # fmt: skip

    assert f"matches {source}" in load()
    source.write_text(source.read_text().replace("return 1", "return 2"))
    assert f"matches {source}" not in load()  # the hash differs: compiled from the source
