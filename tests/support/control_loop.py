"""A control-plane process for fault tests: ``python -m tests.support.control_loop URL NAME``.

It runs the real control loop (leader lease, scheduling pass, supervisor) against PostgreSQL,
with an in-memory backend whose members exit 0 after ``--run-ticks`` observations, and prints
one line per tick it led: ``NAME led N`` (flushed, so a test can tell who leads). Stop it with
SIGTERM, or kill it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import secrets
import tempfile
from pathlib import Path

from adapters.blobs import FilesystemBlobStore
from adapters.catalog import default_catalog
from adapters.docker.runtimes import LOCAL_RUNTIMES
from adapters.memory.backend import MemoryBackend
from adapters.postgres.engine import create_engine
from adapters.postgres.lease import PostgresLeaderLease
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.system import SystemClock
from application.context import Context
from application.supervisor import Supervisor
from domain.ports import Observation


class FinishingBackend(MemoryBackend):
    """Members run for ``ticks`` observations, then exit 0."""

    def __init__(self, ticks: int) -> None:
        super().__init__()
        self.ticks = ticks
        self.seen: dict[str, int] = {}

    async def observe(self, handle: str) -> Observation:
        n = self.seen[handle] = self.seen.get(handle, 0) + 1
        if n >= self.ticks and handle in self.members and self.members[handle].running:
            self.finish(handle, 0)
        return await super().observe(handle)


async def main(url: str, name: str, run_ticks: int, batch: int) -> None:
    engine = create_engine(url, pool_size=4)
    ids = itertools.count()
    ctx = Context(
        uow=lambda: PostgresUnitOfWork(engine),
        clock=SystemClock(),
        ids=type("Ids", (), {"new": lambda self, k: f"{k}-{name}-{next(ids)}"})(),
        catalog=default_catalog(LOCAL_RUNTIMES),
        backends={"local": FinishingBackend(run_ticks)},
        blobs=FilesystemBlobStore(Path(tempfile.mkdtemp()) / "blobs"),
        new_secret=lambda: secrets.token_urlsafe(16),
    )
    sup = Supervisor(ctx, PostgresLeaderLease(url))
    sup.scheduler.batch = batch
    led = 0
    while True:
        if await sup.tick():
            led += 1
            print(f"{name} led {led}", flush=True)
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("name")
    p.add_argument("--run-ticks", type=int, default=2)
    p.add_argument("--batch", type=int, default=20)
    a = p.parse_args()
    asyncio.run(main(a.url, a.name, a.run_ticks, a.batch))
