"""The reservation invariants, checked from the store (through the ports) and from what the
simulated backends really run.

* ``capacity``: on every node, reserved (the live reservations' GPUs, CPUs and memory) plus
  free (as ``SchedulingRepository.snapshot`` reports it) equals the node's capacity, and the
  free and reserved GPU indices partition the node's GPUs.
* ``double-booking``: no GPU index is in two live reservations; no GPU of a node that is not
  fenced (declared lost) is used by two running workloads, and every running workload there
  is covered by its attempt's live reservation, on the node and GPUs it was given.
* ``partial-gang``: a live reservation assigns exactly the job's members, each with its
  role's resources, and every member of its attempt has the node of its assignment.
* ``held-by-live-attempt``: every live reservation belongs to an unfinished attempt of an
  active job with at least one member not final (``settled`` only: right after an operator
  declared a node lost, the members there are final until the next tick releases), every
  active job holds the reservation of its last attempt, and a pending job holds nothing (its
  attempts, if it had any before its retry policy queued it again, are all final).
* ``retries``: a job has at most one unfinished attempt; a new attempt exists only once every
  member of the attempts before it is final; a job never has more attempts than its retry
  policy allows (attempts queued again for no fault of the job aside); an attempt that
  follows one its policy retried was made no sooner than that one's end plus its backoff.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from adapters.sim.backend import SimBackend
from domain.admission import Reservation, mcpu
from domain.fleet import Connectivity
from domain.jobs import Job
from domain.lifecycle import ATTEMPT_FINAL, MEMBER_FINAL, JobState
from domain.retry import REQUEUED
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory

INVARIANTS: dict[str, str] = {
    "capacity": "reserved + free = capacity on every node",
    "double-booking": "no GPU is booked twice, in the store or by running workloads",
    "partial-gang": "a reservation covers its whole gang, and every member its reserved node",
    "held-by-live-attempt": "every reservation is held by a live attempt, or released",
    "retries": "one live attempt per job, made after the last ended and its backoff, in policy",
}
ACTIVE = (JobState.STARTING, JobState.RUNNING, JobState.STOPPING)
SNAPSHOT_LIMIT = 10_000_000


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str  # a key of INVARIANTS
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant} ({INVARIANTS[self.invariant]}): {self.detail}"


@dataclass(frozen=True, slots=True)
class Inspection:
    violations: list[Violation]
    states: dict[str, JobState]  # every pending and active job → its state
    live: list[Reservation]  # by attempt id
    backoff: int = 0  # pending jobs queued again by their retry policy, maybe in their backoff


async def check_invariants(
    uow: UnitOfWorkFactory, backends: Sequence[SimBackend] = (), *, settled: bool = True
) -> list[Violation]:
    """Every violation found now, in a stable order (empty when all hold)."""
    return (await inspect(uow, backends, settled=settled)).violations


async def inspect(
    uow: UnitOfWorkFactory, backends: Sequence[SimBackend] = (), *, settled: bool = True
) -> Inspection:
    """Check every invariant, and say what the store holds (for the simulator's trace)."""
    out: list[Violation] = []
    async with uow() as u:
        pools = {p.name: p for p in await u.fleet.pools()}
        nodes = {n.name: n for n in await u.fleet.nodes()}
        snapshot = await u.scheduling.snapshot(SNAPSHOT_LIMIT)
        live = await u.reservations.live()
        held = {r.attempt_id: r for r in live}
        active: list[Job] = []
        cursor: str | None = None
        while True:
            page = await u.jobs.list(owner=None, states=ACTIVE, limit=1000, cursor=cursor)
            active.extend(page.jobs)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        active.sort(key=lambda j: j.id)

        # capacity and double-booking in the store
        reserved: dict[str, list[int]] = {}  # node → [gpus, mcpu, memory]
        owner: dict[tuple[str, int], str] = {}  # (node, gpu) → attempt
        for r in live:
            for a in r.assignments:
                used = reserved.setdefault(a.node, [0, 0, 0])
                used[0] += len(a.gpus)
                used[1] += a.mcpu
                used[2] += a.memory_mb
                for i in a.gpus:
                    other = owner.setdefault((a.node, i), r.attempt_id)
                    if other != r.attempt_id or a.gpus.count(i) > 1:
                        out.append(
                            Violation(
                                "double-booking",
                                f"GPU {a.node}/{i} is in the reservations of {other} and "
                                f"{r.attempt_id}",
                            )
                        )
        taken_on: dict[str, set[int]] = {}
        for n, i in owner:
            taken_on.setdefault(n, set()).add(i)
        for view in snapshot.nodes:
            pool = pools[view.pool]
            cap = (pool.gpus_per_node, mcpu(pool.cpus_per_node), pool.memory_mb_per_node)
            used = reserved.get(view.name, [0, 0, 0])
            free = (len(view.free_gpus), view.free_mcpu, view.free_memory_mb)
            for what, u_, f_, c_ in zip(
                ("GPUs", "mCPUs", "MiB of memory"), used, free, cap, strict=True
            ):
                if u_ + f_ != c_ or f_ < 0:
                    out.append(
                        Violation(
                            "capacity",
                            f"node {view.name}: {u_} {what} reserved + {f_} free != {c_} capacity",
                        )
                    )
            taken = taken_on.get(view.name, set())
            if taken & set(view.free_gpus) or taken | set(view.free_gpus) != set(range(cap[0])):
                out.append(
                    Violation(
                        "capacity",
                        f"node {view.name}: free GPUs {list(view.free_gpus)} and reserved GPUs "
                        f"{sorted(taken)} do not partition its {cap[0]} GPUs",
                    )
                )
        for node, i in sorted(owner):
            its = pools.get(nodes[node].pool) if node in nodes else None
            if its is None or not 0 <= i < its.gpus_per_node:
                out.append(Violation("double-booking", f"GPU {node}/{i} does not exist"))

        # whole gangs, held by live attempts
        by_id = {j.id: j for j in active}
        for r in live:
            out.extend(await _check_reservation(u, r, by_id.get(r.job_id), settled))
        for job in active:
            attempts = await u.attempts.for_job(job.id)
            if not attempts or attempts[-1].id not in held:
                out.append(
                    Violation(
                        "held-by-live-attempt",
                        f"job {job.id} is {job.state} but its last attempt holds no reservation",
                    )
                )
        holding = {r.job_id for r in live}
        tried: list[str] = []  # pending jobs with attempts before, queued again
        for p in snapshot.pending:
            earlier = await u.attempts.for_job(p.id)
            if any(a.state not in ATTEMPT_FINAL for a in earlier) or p.id in holding:
                out.append(
                    Violation("held-by-live-attempt", f"pending job {p.id} has a live attempt")
                )
            if earlier:
                tried.append(p.id)
        # a job never attempted has nothing the retries check could find (no attempt at all)
        # and no backoff (``not_before`` is set only when a retry policy queues it again)
        pending = [await u.jobs.get(job_id) for job_id in tried]
        for job in [*active, *(j for j in pending if j is not None)]:
            out.extend(await _check_retries(u, job))

    # what really runs
    fenced = {n for n, node in nodes.items() if node.connectivity is Connectivity.LOST}
    using: dict[tuple[str, int], str] = {}
    for backend in backends:
        for handle, request in backend.running():
            given = request.assignment
            if given is None or given.node in fenced:
                continue
            for i in given.gpus:
                other = using.setdefault((given.node, i), handle)
                if other != handle:
                    out.append(
                        Violation(
                            "double-booking",
                            f"GPU {given.node}/{i} is used by running members {other} and {handle}",
                        )
                    )
            theirs = held.get(request.attempt_id)
            mine = {x.member: x for x in theirs.assignments} if theirs else {}
            if mine.get(request.member_index) != given:
                out.append(
                    Violation(
                        "double-booking",
                        f"member {request.member_id} (attempt {request.attempt_id}) runs on "
                        f"{given.node} GPUs {list(given.gpus)} without a live reservation of them",
                    )
                )
    states = {p.id: JobState.PENDING for p in snapshot.pending}
    states.update((j.id, j.state) for j in active)
    backoff = sum(1 for j in pending if j is not None and j.not_before is not None)
    return Inspection(out, states, live, backoff)


async def _check_retries(uow: UnitOfWork, job: Job) -> list[Violation]:
    out: list[Violation] = []
    attempts = await uow.attempts.for_job(job.id)
    live = [a.id for a in attempts if a.state not in ATTEMPT_FINAL]
    if len(live) > 1:
        out.append(Violation("retries", f"job {job.id} has {len(live)} live attempts: {live}"))
    for earlier in attempts[:-1]:
        running = [
            m.id for m in await uow.members.for_attempt(earlier.id) if m.state not in MEMBER_FINAL
        ]
        if running:
            out.append(
                Violation(
                    "retries",
                    f"job {job.id} has attempt {attempts[-1].number} while members {running} of "
                    f"attempt {earlier.number} are not known ended",
                )
            )
    policy = job.spec.retry
    counted = [a for a in attempts if a.end != REQUEUED]
    if len(counted) > policy.max_attempts:
        out.append(
            Violation(
                "retries",
                f"job {job.id} has {len(counted)} attempts; its policy allows "
                f"{policy.max_attempts}",
            )
        )
    for n, (ended, then) in enumerate(itertools.pairwise(counted), start=1):
        due = ended.updated_at + policy.backoff(n)
        if ended.end and then.created_at < due:
            out.append(
                Violation(
                    "retries",
                    f"job {job.id}: attempt {then.number} made at {then.created_at:%H:%M:%S}, "
                    f"before its backoff after attempt {ended.number} ended ({due:%H:%M:%S})",
                )
            )
    return out


async def _check_reservation(
    uow: UnitOfWork, r: Reservation, job: Job | None, settled: bool
) -> list[Violation]:
    out: list[Violation] = []
    attempt = await uow.attempts.get(r.attempt_id)
    if job is None:  # not active: read it to say so
        job = await uow.jobs.get(r.job_id)
    if attempt is None or job is None or attempt.job_id != job.id:
        return [
            Violation(
                "held-by-live-attempt",
                f"reservation of attempt {r.attempt_id} names a missing attempt or job",
            )
        ]
    roles = job.spec.member_roles()
    got = sorted(a.member for a in r.assignments)
    if got != list(range(len(roles))):
        out.append(
            Violation(
                "partial-gang",
                f"reservation of attempt {r.attempt_id} (job {job.id}) assigns members {got}; the "
                f"job has {len(roles)}",
            )
        )
    for a in r.assignments:
        if 0 <= a.member < len(roles):
            role = roles[a.member]
            want = (
                role.name,
                role.resources.gpus,
                mcpu(role.resources.cpus),
                role.resources.memory_mb,
            )
            if (a.role, len(a.gpus), a.mcpu, a.memory_mb) != want:
                out.append(
                    Violation(
                        "partial-gang",
                        f"member {a.member} of attempt {r.attempt_id} is given {len(a.gpus)} GPUs, "
                        f"{a.mcpu} mCPUs, {a.memory_mb} MiB as {a.role}; its role needs {want[1:]}",
                    )
                )
    members = await uow.members.for_attempt(r.attempt_id)
    by_index = {a.member: a for a in r.assignments}
    if len(members) != len(roles):
        out.append(
            Violation(
                "partial-gang",
                f"attempt {r.attempt_id} has {len(members)} members; the job has {len(roles)}",
            )
        )
    for m in members:
        placed = by_index.get(m.index)
        if placed is None or m.node != placed.node:
            out.append(
                Violation(
                    "partial-gang",
                    f"member {m.index} of attempt {r.attempt_id} is on {m.node}, not on its "
                    f"reserved node {placed.node if placed else '(none)'}",
                )
            )
    if attempt.state in ATTEMPT_FINAL or job.state not in ACTIVE:
        out.append(
            Violation(
                "held-by-live-attempt",
                f"attempt {r.attempt_id} is {attempt.state} and job {job.id} is {job.state}, "
                "yet the reservation is held",
            )
        )
    if settled and members and all(m.state in MEMBER_FINAL for m in members):
        out.append(
            Violation(
                "held-by-live-attempt",
                f"every member of attempt {r.attempt_id} is final, yet the reservation is held",
            )
        )
    return out
