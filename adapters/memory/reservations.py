"""In-memory launch reservations (twin of adapters/postgres/reservations.py).

Same contract as the PostgreSQL adapter (tests/contract): a reserved GPU is a row keyed by
(node, index), so a second reservation of it is a unique-key Conflict; CPUs and memory are
checked against the node's capacity under the node's row lock."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from adapters.memory.db import Tx
from domain.admission import (
    Reservation,
    mcpu,
)
from domain.errors import Conflict
from domain.fleet import Node, Pool


@dataclass(frozen=True, slots=True)
class GpuRow:
    node: str
    index: int
    attempt_id: str


@dataclass(frozen=True, slots=True)
class UsageRow:
    """A node's reserved CPUs (thousandths) and memory: the counters PostgreSQL CHECKs."""

    node: str
    mcpu: int = 0
    memory_mb: int = 0


class MemoryReservationRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def reserve(self, reservation: Reservation) -> None:
        tx = self._tx
        what = f"reservation of attempt {reservation.attempt_id}"
        if tx.get("attempts", reservation.attempt_id) is None:
            raise Conflict(f"{what}: attempt does not exist", fix="create the attempt first")
        await tx.insert("reservations", reservation, what)
        demand: dict[str, list[int]] = {}
        for a in reservation.assignments:
            d = demand.setdefault(a.node, [0, 0])
            d[0] += a.mcpu
            d[1] += a.memory_mb
        # as UPDATE nodes …: each node's row lock, then its CHECKs
        for name in sorted(demand):
            await tx.lock(("nodes", "pk", name))
            node: Node | None = tx.get("nodes", name)
            pool: Pool | None = tx.get("pools", node.pool) if node else None
            if node is None or pool is None:
                raise Conflict(f"{what}: node {name} does not exist", fix="decide again")
            usage: UsageRow = tx.get("node_usage", name) or UsageRow(name)
            usage = UsageRow(name, usage.mcpu + demand[name][0], usage.memory_mb + demand[name][1])
            if usage.mcpu > mcpu(pool.cpus_per_node) or usage.memory_mb > pool.memory_mb_per_node:
                raise Conflict(
                    f"{what}: node {name} would exceed its CPUs or memory",
                    fix="take a fresh snapshot and decide again",
                )
            tx.write("node_usage", usage)
            for a in reservation.assignments:
                if a.node == name:
                    for i in a.gpus:
                        if not 0 <= i < pool.gpus_per_node:
                            raise Conflict(
                                f"{what}: node {name} has no GPU {i}", fix="decide again"
                            )
                        row = GpuRow(name, i, reservation.attempt_id)
                        await tx.insert("reserved_gpus", row, f"{what}: GPU {name}/{i}")

    async def release(self, attempt_id: str) -> bool:
        tx = self._tx
        await tx.lock(("reservations", "pk", attempt_id))
        found: Reservation | None = tx.get("reservations", attempt_id)
        if found is None:
            return False
        tx.delete("reservations", attempt_id)
        for a in found.assignments:
            await tx.lock(("nodes", "pk", a.node))
            used: UsageRow = tx.get("node_usage", a.node) or UsageRow(a.node)
            tx.write(
                "node_usage", UsageRow(a.node, used.mcpu - a.mcpu, used.memory_mb - a.memory_mb)
            )
            for i in a.gpus:
                tx.delete("reserved_gpus", (a.node, i))
        return True

    async def get(self, attempt_id: str) -> Reservation | None:
        found: Reservation | None = self._tx.get("reservations", attempt_id)
        return found

    async def live(self) -> builtins.list[Reservation]:
        rows: list[Reservation] = self._tx.select("reservations", lambda r: True)
        return sorted(rows, key=lambda r: r.attempt_id)
