"""Checkpoint hand-over through the blob store against `cp` (issue 22; not part of the suite).

A 1 GiB checkpoint (four files of 256 MiB of random bytes, marked COMPLETE) left by attempt 1
in its checkpoint directory on the local backend is handed to attempt 2 as TunePlane does it
(``application.checkpoints.for_launch``: every file copied into the filesystem blob store,
hashed and written to disk, the checkpoint recorded with its manifest, attempt 1's directory
removed, then every file's blob proved against its digest (hashed again, or its stamp checked:
docs/checkpoints.md#what-the-hand-over-costs) and linked into attempt 2's resume directory),
against copying
the same directory with `cp -r` (the least any hand-over costs: the bytes written once). Both
with a warm page cache, on the same disk, in the same run, each started after `sync` (nobody
else's dirty pages to write back) and timed twice: until it returns, and until its writes are
on disk (`sync` after it: what survives a crash of the machine); the median of ROUNDS each.

Run: ``.venv/bin/pytest tests/bench/bench_checkpoint_handover.py -m bench -s``
(``BENCH_CHECKPOINT_MIB`` for another size than 1024).
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.checkpoint_dirs import FilesystemCheckpoints
from application.checkpoints import for_launch
from tests.contract.builders import a_job
from tests.support.context import memory_context

pytestmark = pytest.mark.bench
ROUNDS = 3
FILES = 4


def fill(where: Path, mib: int) -> None:
    where.mkdir(parents=True)
    block = os.urandom(1024 * 1024)
    for i in range(FILES):
        with (where / f"shard-{i}.bin").open("wb") as f:
            for j in range(mib // FILES):
                k = i * (mib // FILES) + j  # no two MiB alike, no two files alike
                f.write(block[k:] + block[:k])
    (where / "COMPLETE").write_text("1000\n")


def timed(step: Callable[[], object]) -> tuple[float, float]:
    """(seconds until ``step`` returned, seconds until its writes were on disk)."""
    os.sync()
    t0 = time.perf_counter()
    step()
    returned = time.perf_counter() - t0
    os.sync()
    return returned, time.perf_counter() - t0


async def test_checkpoint_handover_against_cp(tmp_path: Path) -> None:
    mib = int(os.environ.get("BENCH_CHECKPOINT_MIB", "1024"))
    source = tmp_path / "source" / "checkpoint-1000"
    fill(source, mib)
    copies, handovers = [], []
    for r in range(ROUNDS):
        target = tmp_path / f"cp-{r}"
        cp = functools.partial(subprocess.run, ["cp", "-r", str(source), str(target)], check=True)
        copies.append(await asyncio.to_thread(timed, cp))
        shutil.rmtree(target)

        ctx = memory_context(tmp_path / f"round-{r}")  # a blob store of its own each round
        async with ctx.uow() as uow:
            await uow.jobs.add(a_job(id="job-1"))
            await uow.commit()
        storage = FilesystemCheckpoints(tmp_path / f"round-{r}" / "checkpoints")
        first = await for_launch(ctx, storage, "job-1", 1)
        shutil.copytree(source, Path(first.work) / source.name)  # what attempt 1 wrote
        await asyncio.to_thread(os.sync)
        t0 = time.perf_counter()
        await for_launch(ctx, storage, "job-1", 2)
        returned = time.perf_counter() - t0
        await asyncio.to_thread(os.sync)
        handovers.append((returned, time.perf_counter() - t0))
        second = await for_launch(ctx, storage, "job-1", 2)  # placed already: nothing to do
        assert second.resume == "checkpoint-1000"
        placed = Path(second.resume_root) / "checkpoint-1000" / "shard-0.bin"
        assert placed.stat().st_size == (source / "shard-0.bin").stat().st_size
        shutil.rmtree(tmp_path / f"round-{r}")
    print(f"\n{mib} MiB checkpoint ({FILES} files), median of {ROUNDS} (seconds):")
    print(f"{'':32}{'returned':>10}{'on disk':>10}")
    for label, runs in (("cp -r", copies), ("blob store in + out, verified", handovers)):
        back, disk = (statistics.median(x[k] for x in runs) for k in (0, 1))
        print(f"{label:<32}{back:>10.3f}{disk:>10.3f}")
    for k, label in ((0, "returned"), (1, "on disk")):
        ratio = statistics.median(c[k] for c in copies) / statistics.median(h[k] for h in handovers)
        print(f"ratio cp / TunePlane hand-over, {label}: {ratio:.2f} (goal >= 0.5)")
    print(f"rounds: cp {copies}, hand-over {handovers}")
