"""Contract: checkpoints kept in place (``domain.artifact_ports.CheckpointsInPlace``), on every
implementation (the shared directory's, ``SharedDirCheckpoints``): an attempt's directory made
and listed, its complete checkpoints found and hashed, one verified against its manifest, made
read-only, and everything but the kept ones removed."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.shared_checkpoints import SharedDirCheckpoints
from domain.artifact_ports import CheckpointsInPlace
from domain.checkpoints import Checkpoint
from tests.application.test_checkpoints import write

pytestmark = pytest.mark.contract

IMPLEMENTATIONS: dict[str, Callable[[Path], CheckpointsInPlace]] = {
    "shared-dir": lambda root: SharedDirCheckpoints(root / "checkpoints"),
}


@pytest.mark.parametrize("make", IMPLEMENTATIONS.values(), ids=IMPLEMENTATIONS.keys())
async def test_checkpoints_in_place_are_found_hashed_verified_sealed_and_pruned(
    make: Callable[[Path], CheckpointsInPlace], tmp_path: Path
) -> None:
    storage = make(tmp_path)
    assert await storage.jobs() == [] and await storage.attempts("job-1") == []
    work = await storage.prepare("job-1", 1)
    assert await storage.prepare("job-1", 1) == work  # again: the same, nothing lost
    write(work, "checkpoint-7", {"a/w.bin": b"weights"}, "7")
    write(work, "checkpoint-8", {"w.bin": b"cut short"}, marker=None)
    assert (await storage.jobs(), await storage.attempts("job-1")) == (["job-1"], [1])

    [found] = await storage.complete("job-1", 1)
    assert (found.name, found.step) == ("checkpoint-7", 7)
    manifest = await storage.manifest(found)
    assert not isinstance(manifest, str)
    assert {(f.path, f.size) for f in manifest.files} == {("a/w.bin", 7), ("COMPLETE", 1)}
    where = storage.path("job-1", 1, "checkpoint-7")
    checkpoint = Checkpoint("job-1", 1, "checkpoint-7", 7, manifest, datetime.now(UTC), where)
    await storage.seal("job-1", 1, "checkpoint-7")
    assert await storage.verify(checkpoint) is None
    assert not stat.S_IMODE(os.stat(f"{where}/a/w.bin").st_mode) & 0o222

    await storage.prune("job-1", 1, {"checkpoint-7"})
    assert [f.name for f in await storage.complete("job-1", 1)] == ["checkpoint-7"]
    assert os.listdir(work) == ["checkpoint-7"]  # the one cut short removed
    await storage.prune("job-1", 1, set())  # read-only as it is: removed all the same
    assert await storage.jobs() == [] and await storage.verify(checkpoint) is not None
