"""Admission and placement: a pure function from a snapshot to decisions with reasons.

``decide(snapshot)`` walks the pending jobs in queue order (higher queue priority first, then
FIFO by commit time) and, for each one:

1. checks its queue's quotas (GPUs held at once, jobs holding a reservation at once);
2. tries to place every member of every role on an eligible node (schedulable and connected),
   best fit, taking GPU indices, CPUs and memory from the node's free capacity; a job is placed
   whole or not at all;
3. if it does not fit, *holds* nodes for it: capacity on those nodes that it will need is
   withheld from every job after it in the order. Later jobs may still use what is left
   (backfill), but never what the blocked job needs, so small jobs cannot starve a large one.
   A job that cannot get holds (earlier jobs hold the capacity) simply waits its turn.

Jobs blocked by quota take no holds: they could not start even on an empty cluster.
Every job that is not placed gets a ``Wait`` with a human explanation.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from domain.fleet import Pool, Queue
from domain.pool_state import Need, NodeState, PoolState, dominated, mcpu
from domain.requests import RoleSpec, fits_pool

__all__ = ["mcpu"]  # re-exported: adapters count CPUs in the scheduler's unit


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the scheduler sees it: free capacity = capacity − live reservations."""

    name: str
    pool: str
    free_gpus: tuple[int, ...]  # free GPU indices
    free_mcpu: int
    free_memory_mb: int
    why_not: str = ""  # "" when it may take new work, else e.g. "cordoned", "disconnected"


@dataclass(frozen=True, slots=True)
class QueueView:
    queue: Queue
    gpus_in_use: int = 0
    jobs_in_use: int = 0


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: str
    queue: str
    created_at: datetime
    roles: tuple[RoleSpec, ...]
    attempts: int = 0  # attempts it already had (the next one is number attempts + 1)
    not_before: datetime | None = None  # its retry backoff: not admitted before (decide ignores)

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """What changed among the jobs since a mark (``SchedulingRepository.pending_changes``).

    ``full``: ``pending`` is every pending job (the reader replaces its view); otherwise it is
    the jobs changed since the mark that are pending now, and ``gone`` those that are not (any
    more). ``mark`` is opaque: give it back to the next call."""

    mark: int | None
    full: bool
    pending: tuple[PendingJob, ...]
    gone: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    pools: Mapping[str, Pool]
    nodes: Sequence[NodeView]
    queues: Mapping[str, QueueView]
    pending: Sequence[PendingJob]
    ordered: bool = False  # ``pending`` is in queue order already (decide need not sort it)


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one member runs: its node, GPU indices, thousandths of CPUs and memory."""

    member: int  # index within the job, roles in order
    role: str
    node: str
    gpus: tuple[int, ...]
    mcpu: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: str
    queue: str
    assignments: tuple[Assignment, ...]

    @property
    def gpus(self) -> int:
        return sum(len(a.gpus) for a in self.assignments)


@dataclass(frozen=True, slots=True)
class Reservation:
    """A live launch reservation: the whole envelope of one attempt."""

    attempt_id: str
    job_id: str
    queue: str
    assignments: tuple[Assignment, ...]
    reserved_at: datetime

    @property
    def gpus(self) -> int:
        return sum(len(a.gpus) for a in self.assignments)


class WaitKind(StrEnum):
    QUOTA = "quota"  # the queue's quota is used up
    CAPACITY = "capacity"  # not enough free capacity now
    HELD = "held"  # capacity exists but is held for earlier jobs
    NO_NODES = "no-nodes"  # too few nodes take new work (cordoned, draining, disconnected)
    NEVER = "never"  # cannot fit even on an empty pool, or its queue is closed
    CONFIG = "config"  # its pool or queue no longer exists


@dataclass(frozen=True, slots=True)
class Wait:
    job_id: str
    kind: WaitKind
    text: str
    position: int  # 1-based rank among all pending jobs in this pass


@dataclass(slots=True)
class Decisions:
    placements: list[Placement] = field(default_factory=list)
    waits: dict[str, Wait] = field(default_factory=dict)


def queue_order(pending: Sequence[PendingJob], queues: Mapping[str, QueueView]) -> list[PendingJob]:
    """Higher queue priority first; FIFO (commit time, then id) within a priority."""
    rank = {name: -q.queue.priority for name, q in queues.items()}
    return sorted(pending, key=lambda j: (rank.get(j.queue, 0), j.created_at, j.id))


# -- the decision ---------------------------------------------------------------------------


class _Shape:
    """What a pass works out once per distinct ``roles`` (most jobs ask for one of a few):
    each role's need, the GPUs, why it could never fit the pools, whether the pools have too
    few eligible nodes for it, and whether it is known to wait ``held`` for the rest of the
    pass (it failed on capacity and on holds: both only shrink while a pass goes on)."""

    __slots__ = ("gpus", "missing", "needs", "never", "no_nodes", "roles", "saturated")

    def __init__(self, roles: tuple[RoleSpec, ...], pools: Mapping[str, PoolState]) -> None:
        self.roles = roles
        self.needs = tuple(Need.of(r) for r in roles)
        self.gpus = sum(r.gpus for r in roles)
        self.saturated = False
        self.never = ""
        self.no_nodes = False
        self.missing = next((r.pool for r in roles if r.pool not in pools), "")
        if self.missing:  # waits "config": nothing else is worked out
            return
        for role in roles:
            p = pools[role.pool]
            why = fits_pool(role, p.pool, len(p.nodes))
            if why:
                self.never = f"; {why}, so it can never start: cancel it and ask for less"
                break
        self.no_nodes = any(
            role.members > _fits_empty(pools[role.pool].eligible, pools[role.pool].capacity, need)
            for role, need in zip(roles, self.needs, strict=True)
        )


def decide(snapshot: Snapshot, explain_waits: bool = True) -> Decisions:
    """Decide which pending jobs start now and why the others wait. Pure and deterministic.

    With ``explain_waits`` False the waits carry their kind and position but an empty text:
    the same decisions, cheaper (the scheduler needs no texts; ``tp job why`` does)."""
    steps = decide_steps(snapshot, explain_waits, every=0)
    try:
        next(steps)
    except StopIteration as stop:
        decisions: Decisions = stop.value
        return decisions
    raise AssertionError("decide_steps yielded with every=0")  # pragma: no cover


def decide_steps(
    snapshot: Snapshot, explain_waits: bool = True, every: int = 256
) -> Generator[list[Placement], None, Decisions]:
    """``decide`` in steps: after every ``every`` jobs walked (0: never), yields the placements
    made since the last yield (often none), then returns the same ``Decisions`` as ``decide``.
    Every placement is yielded once, in order, before the return. A placement never changes
    once yielded (later jobs only see what it left), so a caller may store it at once while
    the rest is decided (the scheduler's overlapped store, docs/scheduling.md)."""
    by_pool: dict[str, list[NodeView]] = {}
    for v in snapshot.nodes:
        by_pool.setdefault(v.pool, []).append(v)
    pools = {name: PoolState(pool, by_pool.get(name, [])) for name, pool in snapshot.pools.items()}
    usage = {name: [q.gpus_in_use, q.jobs_in_use] for name, q in snapshot.queues.items()}
    out = Decisions()
    explain = _Explainer(pools, snapshot.queues, usage, explain_waits)
    shapes: dict[tuple[RoleSpec, ...], _Shape] = {}
    by_id: dict[int, _Shape] = {}  # the same, by id(roles): the shape keeps its roles alive
    sent = 0  # placements yielded so far
    jobs = snapshot.pending if snapshot.ordered else queue_order(snapshot.pending, snapshot.queues)
    for position, job in enumerate(jobs, start=1):
        if every and position % every == 0:
            yield out.placements[sent:]
            sent = len(out.placements)
        shape = by_id.get(id(job.roles))
        if shape is None or shape.roles is not job.roles:
            shape = shapes.get(job.roles)
            if shape is None:
                shape = shapes[job.roles] = _Shape(job.roles, pools)
            by_id[id(job.roles)] = shape
        qv = snapshot.queues.get(job.queue)
        if qv is None or shape.missing:
            what = f"pool {shape.missing}" if shape.missing else f"queue {job.queue}"
            text = f"{what} no longer exists; cancel it and submit again"
            out.waits[job.id] = Wait(job.id, WaitKind.CONFIG, text, position)
            continue
        never = _never(shape, qv.queue)
        if never:
            text = explain.need(job) + never if explain_waits else ""
            out.waits[job.id] = Wait(job.id, WaitKind.NEVER, text, position)
            continue
        used = usage[job.queue]
        quota = _quota_block(shape.gpus, qv.queue, used)
        if quota:
            text = explain.need(job) + explain.capacity(job) + quota if explain_waits else ""
            out.waits[job.id] = Wait(job.id, WaitKind.QUOTA, text, position)
            continue
        if shape.saturated:  # fails at once, as _place then _blocked would
            text = explain.need(job) + explain.capacity(job) + explain.quota(job.queue)
            out.waits[job.id] = Wait(job.id, WaitKind.HELD, text if explain_waits else "", position)
            continue
        placed = _place(job, shape, pools)
        if placed is not None:
            out.placements.append(Placement(job.id, job.queue, placed))
            used[0] += shape.gpus
            used[1] += 1
            continue
        text = explain.need(job) + explain.capacity(job) + explain.quota(job.queue)
        kind = _blocked(job, shape, pools)  # takes holds: the text above is from before them
        out.waits[job.id] = Wait(job.id, kind, text, position)
    if every and sent < len(out.placements):
        yield out.placements[sent:]
    return out


def _never(shape: _Shape, queue: Queue) -> str:
    if queue.job_quota == 0:
        return f"; queue {queue.name} is closed (its job quota is 0)"
    if queue.gpu_quota is not None and shape.gpus > queue.gpu_quota:
        return (
            f"; queue {queue.name} allows at most {queue.gpu_quota} GPUs, so it can never start "
            "there: submit it to a queue with a larger quota"
        )
    return shape.never


def _quota_block(job_gpus: int, queue: Queue, used: list[int]) -> str:
    gpus, jobs = used
    if queue.gpu_quota is not None and gpus + job_gpus > queue.gpu_quota:
        return (
            f"; queue {queue.name} (team {queue.team}) quota {gpus}/{queue.gpu_quota} GPUs in "
            f"use, it needs {job_gpus} more"
        )
    if queue.job_quota is not None and jobs + 1 > queue.job_quota:
        return (
            f"; queue {queue.name} (team {queue.team}) quota {jobs}/{queue.job_quota} jobs running"
        )
    return ""


def _place(
    job: PendingJob, shape: _Shape, pools: Mapping[str, PoolState]
) -> tuple[Assignment, ...] | None:
    """Place every member or none (best fit, holds of earlier jobs respected)."""
    for role, need in zip(job.roles, shape.needs, strict=True):
        if dominated(pools[role.pool].no_fit, role.members, need):
            return None
    taken: list[tuple[PoolState, NodeState, Need, Assignment]] = []
    member = 0
    for role, need in zip(job.roles, shape.needs, strict=True):
        state = pools[role.pool]
        for _ in range(role.members):
            node = state.best_fit(need)
            if node is None:
                if not any(s is state for s, *_ in taken):  # failed on untouched capacity
                    state.refuse(state.no_fit, role.members, need)
                for s, n, nd, a in reversed(taken):
                    s.give_back(n, nd, a.gpus)
                return None
            gpus = state.take(node, need)
            a = Assignment(member, role.name, node.view.name, gpus, need.mcpu, need.mem)
            taken.append((state, node, need, a))
            member += 1
    return tuple(a for *_, a in taken)


def _blocked(job: PendingJob, shape: _Shape, pools: Mapping[str, PoolState]) -> WaitKind:
    """The job does not fit now: hold capacity for it if possible; say how it waits."""
    if shape.no_nodes:
        return WaitKind.NO_NODES
    held: list[tuple[PoolState, Need, list[NodeState]]] = []
    for role, need in zip(job.roles, shape.needs, strict=True):
        state = pools[role.pool]
        got = None
        refused = dominated(state.no_hold, role.members, need)
        if not refused:
            got = state.hold(job.id, role.members, need)
        if got is None:
            if not held:  # failed on untouched headroom
                state.refuse(state.no_hold, role.members, need)
                # nothing it needs can come back in this pass: it waits "held" to the end
                shape.saturated = any(
                    dominated(pools[r.pool].no_fit, r.members, n)
                    for r, n in zip(job.roles, shape.needs, strict=True)
                )
            for s, nd, nodes in held:
                for n in nodes:
                    s._adjust_hold(n, nd, -1)
                    n.held_for.remove(job.id)
            return WaitKind.HELD
        held.append((state, need, got))
    return WaitKind.CAPACITY


def _fits_empty(nodes: Sequence[NodeState], capacity: tuple[int, int, int], need: Need) -> int:
    """How many members of ``need`` the given nodes could take if they were empty."""
    g, c, m = capacity
    per = min(
        g // need.gpus if need.gpus else 1 << 30,
        c // need.mcpu if need.mcpu else 1 << 30,
        m // need.mem if need.mem else 1 << 30,
    )
    return len(nodes) * per


class _Explainer:
    """Builds the texts; caches the per-role capacity sentence per pool version."""

    def __init__(
        self,
        pools: Mapping[str, PoolState],
        queues: Mapping[str, QueueView],
        usage: Mapping[str, list[int]],
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.pools = pools
        self.queues = queues
        self.usage = usage
        self._cache: dict[tuple[str, int, int, Need], str] = {}

    def need(self, job: PendingJob) -> str:
        if not self.enabled:
            return ""
        return "needs " + " and ".join(r.describe() for r in job.roles)

    def capacity(self, job: PendingJob) -> str:
        if not self.enabled:
            return ""
        return "".join(self._role(r) for r in job.roles)

    def _role(self, role: RoleSpec) -> str:
        state, need = self.pools[role.pool], Need.of(role)
        key = (role.pool, state.version, role.members, need)
        if key not in self._cache:
            self._cache[key] = _capacity_text(state, need)
        return self._cache[key]

    def quota(self, queue_name: str) -> str:
        if not self.enabled:
            return ""
        q = self.queues[queue_name].queue
        gpus, jobs = self.usage[queue_name]
        parts = []
        if q.gpu_quota is not None:
            parts.append(f"{gpus}/{q.gpu_quota} GPUs")
        if q.job_quota is not None:
            parts.append(f"{jobs}/{q.job_quota} jobs")
        if not parts:
            return ""
        return f"; queue {q.name} (team {q.team}) quota {', '.join(parts)} in use"


def _capacity_text(state: PoolState, need: Need) -> str:
    if state.pool.unavailable:
        return f"; pool {state.pool.name} takes no new work: {state.pool.unavailable}"
    room = held = 0
    for n in state.eligible:
        g, c, m = len(n.free), n.mcpu, n.mem
        if need.fits(g, c, m):
            if need.fits(*n.avail()):
                room += 1
            else:
                held += 1
    total = len(state.nodes)
    out = f"; {room} of {total} node{'s' if total != 1 else ''} in pool {state.pool.name} "
    out += "has room for a member now" if room == 1 else "have room for a member now"
    if held:
        out += f", {held} more held for earlier jobs"
    states: dict[str, int] = {}
    for n in state.nodes:
        if n.view.why_not:
            states[n.view.why_not] = states.get(n.view.why_not, 0) + 1
    if states:
        out += " (" + ", ".join(f"{k} {s}" for s, k in sorted(states.items())) + ")"
    return out
