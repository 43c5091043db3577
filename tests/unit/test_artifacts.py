"""Artifact manifests: a directory scan lists every file with its size and sha256 (links by
their text, never followed); the digest does not depend on listing order; comparing reports
each changed, missing and added file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from adapters.outputs import scan_directory
from domain.artifacts import ArtifactFile, Manifest, compare

pytestmark = pytest.mark.unit


def test_a_scan_lists_every_file_and_never_follows_a_link(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.pt").write_bytes(b"weights" * 1000)
    (tmp_path / "report.json").write_text('{"acc": 0.9}')
    (tmp_path / "empty").write_bytes(b"")
    os.symlink("/etc/passwd", tmp_path / "link")
    got = scan_directory(tmp_path)
    assert got is not None
    assert [(f.path, f.size) for f in got.files] == [
        ("ckpt/model.pt", 7000), ("empty", 0), ("link", 11), ("report.json", 12),
    ]  # fmt: skip
    assert got.files[0].sha256 == hashlib.sha256(b"weights" * 1000).hexdigest()
    assert got.files[2].sha256 == hashlib.sha256(b"/etc/passwd").hexdigest()
    assert scan_directory(tmp_path / "absent") is None


def test_the_digest_does_not_depend_on_order_and_round_trips() -> None:
    a, b = ArtifactFile("a", 1, "00" * 32), ArtifactFile("b", 2, "11" * 32)
    assert Manifest.of([a, b]).digest == Manifest.of([b, a]).digest
    assert Manifest.from_dict(Manifest.of([b, a]).to_dict()) == Manifest.of([a, b])
    assert Manifest.of([a]).digest != Manifest.of([a, b]).digest


def test_compare_reports_each_file(tmp_path: Path) -> None:
    for name, data in (("keep", b"k"), ("edit", b"before"), ("gone", b"g")):
        (tmp_path / name).write_bytes(data)
    recorded = scan_directory(tmp_path)
    assert recorded is not None and compare(recorded, recorded) == []
    (tmp_path / "edit").write_bytes(b"after!!")
    (tmp_path / "gone").unlink()
    (tmp_path / "new").write_bytes(b"n")
    found = scan_directory(tmp_path)
    assert found is not None
    diffs = {d.path: (d.problem, d.detail) for d in compare(recorded, found)}
    assert set(diffs) == {"edit", "gone", "new"}
    assert diffs["edit"][0] == "changed" and "6 → 7 bytes" in diffs["edit"][1]
    assert diffs["gone"][0] == "missing" and diffs["new"][0] == "added"
    same_size = tmp_path / "keep"
    same_size.write_bytes(b"K")  # one byte changed, same size: the hash shows it
    again = scan_directory(tmp_path)
    assert again is not None
    assert ("keep", "changed") in {(d.path, d.problem) for d in compare(recorded, again)}
