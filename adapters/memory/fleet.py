"""In-memory fleet, policy, reservation and scheduling repositories, and the leader lease.

Same contracts as the PostgreSQL adapters (tests/contract): a reserved GPU is a row keyed by
(node, index), so a second reservation of it is a unique-key Conflict; CPUs and memory are
checked against the node's capacity under the node's row lock.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from adapters.memory.db import Tx
from domain.admission import (
    NodeView,
    PendingJob,
    QueueView,
    Reservation,
    Snapshot,
    mcpu,
    queue_order,
)
from domain.auth import User
from domain.errors import Conflict, NotFound
from domain.fleet import Connectivity, Node, Pool, Queue, SchedState, Team, Validation
from domain.lifecycle import JobState
from domain.ports import Start
from domain.requests import Profile


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


def _shape(p: Pool) -> tuple[object, ...]:
    return (p.backend, p.gpus_per_node, mcpu(p.cpus_per_node), p.memory_mb_per_node)


class MemoryFleetRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def put_pool(self, pool: Pool) -> None:
        await self._tx.lock(("pools", "pk", pool.name))
        old: Pool | None = self._tx.get("pools", pool.name)
        if old is not None and _shape(old) != _shape(pool):
            nodes = {n.name for n in await self.nodes() if n.pool == pool.name}
            busy = [
                r.attempt_id
                for r in self._tx.select("reservations", lambda r: True)
                if any(a.node in nodes for a in r.assignments)
            ]
            if busy:
                raise Conflict(
                    f"pool {pool.name} has live reservations ({len(busy)}); its node shape "
                    "and backend cannot change now",
                    fix="cordon its nodes, wait for their jobs to end, then change the pool",
                )
        # ``unavailable`` is the capacity sync's (set_pool_unavailable): put_pool keeps it
        self._tx.write("pools", replace(pool, unavailable=old.unavailable if old else ""))

    async def set_pool_unavailable(self, name: str, reason: str) -> None:
        await self._tx.lock(("pools", "pk", name))
        old: Pool | None = self._tx.get("pools", name)
        if old is None:
            raise NotFound(f"pool {name} does not exist", fix="list the pools with tp fleet ls")
        self._tx.write("pools", replace(old, unavailable=reason))

    async def pools(self) -> builtins.list[Pool]:
        rows: list[Pool] = self._tx.select("pools", lambda p: True)
        return sorted(rows, key=lambda p: p.name)

    async def put_node(self, node: Node) -> None:
        if self._tx.get("pools", node.pool) is None:
            raise NotFound(f"pool {node.pool} does not exist", fix="create the pool first")
        await self._tx.lock(("nodes", "pk", node.name))
        old: Node | None = self._tx.get("nodes", node.name)
        if old is not None and old.pool != node.pool and _reserved_on(self._tx, node.name):
            raise Conflict(
                f"node {node.name} has live reservations; it cannot move to pool {node.pool}",
                fix="drain it and wait for its jobs to end first",
            )
        if old is not None and old.pool == node.pool:  # its check result stays with it
            node = replace(
                node,
                validation=old.validation,
                validation_reason=old.validation_reason,
                validated_at=old.validated_at,
            )
        else:  # new, or moved: its result was about other peers
            node = replace(
                node, validation=Validation.UNCHECKED, validation_reason="", validated_at=None
            )
        self._tx.write("nodes", node)

    async def set_validation(
        self, name: str, validation: Validation, reason: str, at: datetime
    ) -> None:
        await self._tx.lock(("nodes", "pk", name))
        node: Node | None = self._tx.get("nodes", name)
        if node is not None:
            node = replace(node, validation=validation, validation_reason=reason, validated_at=at)
            self._tx.write("nodes", node)

    async def node(self, name: str) -> Node | None:
        found: Node | None = self._tx.get("nodes", name)
        return found

    async def nodes(self) -> builtins.list[Node]:
        rows: list[Node] = self._tx.select("nodes", lambda n: True)
        return sorted(rows, key=lambda n: (n.pool, n.name))

    async def set_node_state(
        self,
        name: str,
        sched: SchedState | None = None,
        connectivity: Connectivity | None = None,
    ) -> Node:
        await self._tx.lock(("nodes", "pk", name))
        node: Node | None = self._tx.get("nodes", name)
        if node is None:
            raise NotFound(f"node {name} does not exist", fix="see `tp fleet ls`")
        node = replace(
            node,
            sched=sched if sched is not None else node.sched,
            connectivity=connectivity if connectivity is not None else node.connectivity,
        )
        self._tx.write("nodes", node)
        return node

    async def put_profile(self, profile: Profile) -> None:
        await self._tx.lock(("profiles", "pk", profile.name))
        self._tx.write("profiles", profile)

    async def profiles(self) -> builtins.list[Profile]:
        rows: list[Profile] = self._tx.select("profiles", lambda p: True)
        return sorted(rows, key=lambda p: p.name)


def _reserved_on(tx: Tx, node: str) -> bool:
    return bool(tx.select("reservations", lambda r: any(a.node == node for a in r.assignments)))


class MemoryPolicyRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def put_user(self, user: User) -> None:
        for team in user.teams:
            if self._tx.get("teams", team) is None:
                raise NotFound(f"team {team} does not exist", fix="create it: tp admin team add")
        await self._tx.lock(("users", "pk", user.name))
        old: User | None = self._tx.get("users", user.name)
        created = old.created_at if old is not None else user.created_at
        self._tx.write(
            "users", replace(user, teams=tuple(sorted(set(user.teams))), created_at=created)
        )

    async def user(self, name: str) -> User | None:
        found: User | None = self._tx.get("users", name)
        return found

    async def users(self) -> builtins.list[User]:
        rows: list[User] = self._tx.select("users", lambda u: True)
        return sorted(rows, key=lambda u: u.name)

    async def put_team(self, team: Team) -> None:
        await self._tx.lock(("teams", "pk", team.name))
        if self._tx.get("teams", team.name) is None:
            self._tx.write("teams", team)

    async def teams(self) -> builtins.list[Team]:
        rows: list[Team] = self._tx.select("teams", lambda t: True)
        return sorted(rows, key=lambda t: t.name)

    async def put_queue(self, queue: Queue) -> None:
        if self._tx.get("teams", queue.team) is None:
            raise NotFound(f"team {queue.team} does not exist", fix="create it: tp admin team add")
        await self._tx.lock(("queues", "pk", queue.name))
        self._tx.write("queues", queue)

    async def queue(self, name: str) -> Queue | None:
        found: Queue | None = self._tx.get("queues", name)
        return found

    async def queues(self) -> builtins.list[Queue]:
        rows: list[Queue] = self._tx.select("queues", lambda q: True)
        return sorted(rows, key=lambda q: q.name)


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


class MemorySchedulingRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def snapshot(self, limit: int) -> Snapshot:
        tx = self._tx
        pools: dict[str, Pool] = {p.name: p for p in tx.select("pools", lambda p: True)}
        live: list[Reservation] = tx.select("reservations", lambda r: True)
        gpus_taken: dict[str, set[int]] = {}
        used: dict[str, list[int]] = {}
        queue_use: dict[str, list[int]] = {}
        for r in live:
            q = queue_use.setdefault(r.queue, [0, 0])
            q[0] += r.gpus
            q[1] += 1
            for a in r.assignments:
                gpus_taken.setdefault(a.node, set()).update(a.gpus)
                u = used.setdefault(a.node, [0, 0])
                u[0] += a.mcpu
                u[1] += a.memory_mb
        views = []
        for n in tx.select("nodes", lambda n: True):
            pool = pools[n.pool]
            u = used.get(n.name, [0, 0])
            taken = gpus_taken.get(n.name, set())
            views.append(
                NodeView(
                    name=n.name,
                    pool=n.pool,
                    free_gpus=tuple(i for i in range(pool.gpus_per_node) if i not in taken),
                    free_mcpu=mcpu(pool.cpus_per_node) - u[0],
                    free_memory_mb=pool.memory_mb_per_node - u[1],
                    why_not=n.why_not,
                )
            )
        views.sort(key=lambda v: v.name)
        queues = {
            q.name: QueueView(q, *queue_use.get(q.name, [0, 0]))
            for q in tx.select("queues", lambda q: True)
        }
        pending: list[PendingJob] = tx.project(
            "jobs",
            lambda j: j.state is JobState.PENDING,
            lambda j: PendingJob(j.id, j.spec.queue, j.created_at, j.spec.roles),
        )
        pending = [replace(p, attempts=self._attempts(p.id)) for p in pending]
        return Snapshot(pools, views, queues, queue_order(pending, queues)[:limit])

    def _attempts(self, job_id: str) -> int:
        n = 0
        while self._tx.find("attempts", "number", (job_id, n + 1)) is not None:
            n += 1
        return n

    async def start(self, starts: Sequence[Start], now: datetime) -> list[str]:
        from adapters.memory.repositories import (  # same transaction, same rules
            MemoryAttemptRepository,
            MemoryJobRepository,
            MemoryMemberRepository,
        )

        jobs = MemoryJobRepository(self._tx)
        attempts = MemoryAttemptRepository(self._tx)
        members = MemoryMemberRepository(self._tx)
        reservations = MemoryReservationRepository(self._tx)
        started = []
        for s in starts:
            job = await jobs.get(s.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            await jobs.update(job.moved(JobState.STARTING, now), JobState.PENDING)
            await attempts.add(s.attempt)
            for m in s.members:
                await members.add(m)
            await reservations.reserve(s.reservation)
            started.append(s.job_id)
        return started


class MemoryLeases:
    """Leader leases shared by the processes of one in-memory "database"."""

    def __init__(self) -> None:
        self.holders: dict[str, object] = {}


class MemoryLeaderLease:
    """``MemoryLeaderLease(leases, name)``: at most one holder per name. ``crash()`` drops it
    as a dead process's session would."""

    def __init__(self, leases: MemoryLeases, name: str = "scheduler") -> None:
        self._leases = leases
        self._name = name

    async def acquire(self) -> bool:
        holder = self._leases.holders.setdefault(self._name, self)
        return holder is self

    async def release(self) -> None:
        if self._leases.holders.get(self._name) is self:
            del self._leases.holders[self._name]

    def crash(self) -> None:
        self._leases.holders.pop(self._name, None)
