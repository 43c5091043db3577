"""A Context on in-memory adapters, a settable clock and counting ids: the application's tests
and (later) the simulator build use cases this way, without the DI container."""

from __future__ import annotations

import functools
import itertools
from datetime import datetime, timedelta
from pathlib import Path

from adapters.blobs import FilesystemBlobStore
from adapters.catalog import default_catalog
from adapters.docker.runtimes import LOCAL_RUNTIMES
from adapters.memory import MemoryStore, MemoryUnitOfWork
from adapters.memory.backend import MemoryBackend
from application.context import Context, Limits
from domain.auth import Principal, Role, User
from domain.catalog import Catalog
from domain.fleet import Node, Pool, Queue, Team
from tests.unit.builders import T0

ALICE = Principal("alice", Role.MEMBER)
BOB = Principal("bob", Role.MEMBER)
ADMIN = Principal("admin", Role.ADMIN)
VIEWER = Principal("vera", Role.VIEWER)


class FakeClock:
    def __init__(self, now: datetime = T0) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current

    def advance(self, **kwargs: float) -> None:
        self.current += timedelta(**kwargs)


class CountingIds:
    def __init__(self) -> None:
        self._n = itertools.count(1)

    def new(self, kind: str) -> str:
        return f"{kind}-{next(self._n):06d}"


LOCAL_POOL = Pool("local", "local", "local", 0, 4.0, 8192)


def seed_policy_and_fleet(
    store: MemoryStore, pools: tuple[Pool, ...] = (LOCAL_POOL,), nodes: int = 3
) -> None:
    """Team and queue ``default`` with the users above in it; node ``local`` for the local
    pool and ``nodes`` nodes ``<pool>-0…`` for any other; written straight into the store."""
    tx = store.begin()
    tx.write("teams", Team("default"))
    tx.write("queues", Queue("default", "default"))
    for p in (ALICE, BOB, ADMIN, VIEWER):
        tx.write("users", User(p.name, p.role, ("default",)))
    for pool in pools:
        tx.write("pools", pool)
        names = ["local"] if pool.name == "local" else [f"{pool.name}-{i}" for i in range(nodes)]
        for name in names:
            tx.write("nodes", Node(name, pool.name))
    tx.commit()


@functools.cache
def _catalog() -> Catalog:
    """The built-in catalog, read once per test process (it is immutable; reading the recipes
    from disk is most of a small context's cost)."""
    return default_catalog(LOCAL_RUNTIMES)


def memory_context(
    tmp_path: Path,
    backend: MemoryBackend | None = None,
    clock: FakeClock | None = None,
    pools: tuple[Pool, ...] = (LOCAL_POOL,),
    nodes: int = 3,
) -> Context:
    store = MemoryStore()
    seed_policy_and_fleet(store, pools, nodes)
    secrets = itertools.count(1)
    return Context(
        uow=lambda: MemoryUnitOfWork(store),
        clock=clock or FakeClock(),
        ids=CountingIds(),
        catalog=_catalog(),
        backends={"local": backend or MemoryBackend()},
        blobs=FilesystemBlobStore(tmp_path / "blobs"),
        new_secret=lambda: f"secret{next(secrets)}",
        limits=Limits(max_log_bytes=64, stop_grace_seconds=0.1),
    )
