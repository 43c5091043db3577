"""MemoryStore: the TunePlane tables on the in-memory database."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from adapters.memory.artifacts import ARTIFACT_TABLES, SCAN_TABLES
from adapters.memory.checks import CHECK_TABLES
from adapters.memory.db import Database, TableDef
from adapters.memory.lease import MemoryLeases
from adapters.memory.node_states import HISTORY_TABLES
from adapters.memory.nodes import NODE_TABLES
from adapters.memory.plugins import PLUGIN_TABLES
from adapters.memory.runtimes import RUNTIME_TABLES


@dataclass(frozen=True, slots=True)
class LogRow:
    attempt_id: str
    member: int
    data: bytes
    truncated: bool


@dataclass(frozen=True, slots=True)
class LivePiece:
    member_id: str
    offset: int
    data: bytes


TABLES = [
    TableDef("previews", pk=lambda p: p.id),
    TableDef(
        "submissions",
        pk=lambda s: (s.owner, s.retry_key),
        uniques={"preview_id": lambda s: s.preview_id, "job_id": lambda s: s.job_id},
        immutable=True,
    ),
    TableDef(
        "jobs",
        pk=lambda j: j.id,
        uniques={"preview_id": lambda j: j.preview_id},
        groups={"state": lambda j: j.state},
    ),
    TableDef("job_events", pk=lambda e: (e.job_id, e.seq), immutable=True),
    TableDef(
        "attempts",
        pk=lambda a: a.id,
        uniques={"number": lambda a: (a.job_id, a.number)},
        immutable=True,
    ),
    TableDef(
        "members",
        pk=lambda m: m.id,
        uniques={"index": lambda m: (m.attempt_id, m.index)},
        immutable=True,
    ),
    TableDef("attempt_logs", pk=lambda r: (r.attempt_id, r.member), immutable=True),
    TableDef("member_logs", pk=lambda r: (r.member_id, r.offset), immutable=True),
    TableDef(
        "api_tokens",
        pk=lambda t: t.id,
        uniques={"token_hash": lambda t: t.token_hash},
        immutable=True,
    ),
    TableDef("users", pk=lambda u: u.name, immutable=True),
    TableDef("teams", pk=lambda t: t.name, immutable=True),
    TableDef("queues", pk=lambda q: q.name, immutable=True),
    TableDef("pools", pk=lambda p: p.name, immutable=True),
    TableDef("nodes", pk=lambda n: n.name, immutable=True),
    TableDef("profiles", pk=lambda p: p.name, immutable=True),
    TableDef("reservations", pk=lambda r: r.attempt_id, immutable=True),
    TableDef("reserved_gpus", pk=lambda g: (g.node, g.index), immutable=True),
    TableDef("node_usage", pk=lambda u: u.node, immutable=True),
    *NODE_TABLES,  # the node backend's (adapters/memory/nodes.py)
    *HISTORY_TABLES,
    *CHECK_TABLES,
    *ARTIFACT_TABLES,
    *SCAN_TABLES,
    *PLUGIN_TABLES,
    *RUNTIME_TABLES,
]


class MemoryStore(Database):
    """All state of the in-memory adapters; share one between the units of work of a process
    (or of a test). ``MemoryUnitOfWork(store)`` opens a transaction on it."""

    def __init__(self) -> None:
        super().__init__(TABLES)
        self.leases = MemoryLeases()
        self.installation = f"inst-{uuid.uuid4().hex}"  # made once, as migration 0015 does
