"""`tp fleet check POOL`: run the check gang on every connected, schedulable node of a node
pool, then record each node's result (domain/fleet_check.py).

The check is an ordinary job of the operator who asked (its output and state are visible as any
job's), but it does not queue: it is placed directly, one small member per node, on exactly the
nodes it checks, including nodes whose last check failed (the scheduler gives those no work).
Its placement, attempt and reservation are stored in the same transaction as the job, so the
scheduler never sees it pending. When the job ends, ``settle`` (called by the supervisor's
housekeeping and by readers) records the results and marks the nodes.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from application.context import Context
from application.logs import stitch
from application.runtimes import find_runtime
from domain.admission import Assignment, Reservation, mcpu
from domain.auth import Principal, Role
from domain.catalog import Resources
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from domain.fleet import NODE_BACKEND, Connectivity, SchedState, Validation
from domain.fleet_check import (
    CHECK_MEMBER_CPUS,
    CHECK_MEMBER_MEMORY_MB,
    CHECK_TIMEOUT_SECONDS,
    NodeResult,
    PoolCheck,
    check_script,
    judge,
    pool_note,
)
from domain.jobs import Attempt, Job, Member, Submission
from domain.lifecycle import JOB_FINAL, AttemptState, JobState, MemberState
from domain.ports import Start
from domain.requests import RoleSpec
from domain.submission import JobSpec, SubmissionIntent, make_preview, render_command
from domain.unit_of_work import FleetUnit

log = logging.getLogger("tuneplane.fleet")

OUTPUT_GRACE = timedelta(seconds=10)  # after the job ends, for its members' last output
CHECK_METHOD = "custom/custom"


def _require_operator(principal: Principal) -> None:
    if principal.role not in (Role.ADMIN, Role.OPERATOR):
        raise Forbidden(
            f"user {principal.name} has role {principal.role}, which may not check pools",
            fix="ask an operator or an admin",
        )


async def start_check(
    ctx: Context, principal: Principal, pool_name: str, timeout_seconds: int = CHECK_TIMEOUT_SECONDS
) -> PoolCheck:
    """Start a check of ``pool_name``; Conflict if one is running there already."""
    _require_operator(principal)
    if not 5 <= timeout_seconds <= 600:
        raise InvalidInput(
            f"a check's timeout must be 5 to 600 seconds, not {timeout_seconds}",
            fix="pass e.g. --timeout 40",
            field="timeout_seconds",
        )
    async with ctx.units.fleet() as uow:
        pool = next((p for p in await uow.fleet.pools() if p.name == pool_name), None)
        if pool is None:
            raise NotFound(f"no pool {pool_name}", fix="see `tp fleet ls`", field="pool")
        if pool.backend != NODE_BACKEND:
            raise InvalidInput(
                f"pool {pool_name} belongs to backend {pool.backend!r}; checks run on node pools",
                fix="check a pool of backend node",
                field="pool",
            )
        nodes = [
            n.name
            for n in await uow.fleet.nodes()
            if n.pool == pool_name
            and n.connectivity is Connectivity.CONNECTED
            and n.sched is SchedState.SCHEDULABLE
        ]
        running = await uow.checks.latest(pool_name)
    if running is not None and running.finished_at is None:
        raise Conflict(
            f"a check of pool {pool_name} is running already (job {running.job_id})",
            fix="wait for it (`tp fleet check POOL --wait` shows it), or stop that job",
        )
    if len(nodes) < 2:
        raise InvalidInput(
            f"pool {pool_name} has {len(nodes)} connected, schedulable node(s); a check needs "
            "at least 2 (it tests what nodes see of each other)",
            fix="connect more nodes (`tp node ls`), or uncordon them",
            field="pool",
        )
    return await _launch(ctx, principal, pool_name, nodes, timeout_seconds)


async def _launch(
    ctx: Context, principal: Principal, pool: str, nodes: list[str], timeout_seconds: int
) -> PoolCheck:
    method = ctx.catalog.method(CHECK_METHOD)
    runtime = await find_runtime(ctx, method.default_runtime)
    backend = ctx.backend(NODE_BACKEND)
    pin = await backend.pin(runtime)  # a network call: outside any transaction
    params = {"command": check_script(timeout_seconds)}
    per = Resources(cpus=CHECK_MEMBER_CPUS, memory_mb=CHECK_MEMBER_MEMORY_MB)
    role = RoleSpec("check", f"{pool}: one member per node", pool, len(nodes), per)
    now = ctx.clock.now()
    async with ctx.units.fleet() as uow:
        queue = await _queue(uow)
    intent = SubmissionIntent(
        "fleet-check", CHECK_METHOD, (role.profile,), dict(params), queue=queue
    )
    spec = JobSpec(
        experiment=intent.experiment,
        method=method.name,
        params=dict(params),
        command=render_command(method, dict(params)),
        runtime=pin,
        backend=backend.name,
        queue=queue,
        roles=(role,),
        source=None,
        env={},
    )
    preview = make_preview(
        preview_id=ctx.ids.new("pv"),
        owner=principal.name,
        intent=intent,
        spec=spec,
        now=now,
        ttl=ctx.limits.preview_ttl,
    )
    job = Job(ctx.ids.new("job"), preview.id, principal.name, spec, JobState.PENDING, now, now)
    attempt = Attempt(ctx.ids.new("att"), job.id, 1, AttemptState.LAUNCHING, now, now)
    assignments = tuple(
        Assignment(i, role.name, node, (), mcpu(per.cpus), per.memory_mb)
        for i, node in enumerate(nodes)
    )
    members = tuple(
        Member(ctx.ids.new("mem"), attempt.id, i, MemberState.PENDING, now, node=node, role="check")
        for i, node in enumerate(nodes)
    )
    check = PoolCheck(ctx.ids.new("chk"), pool, job.id, tuple(nodes), now)
    async with ctx.units.admission() as uow:
        await uow.previews.add(preview)
        claim = Submission(ctx.ids.new("key"), preview.id, preview.digest, job.id, job.owner, now)
        await uow.submissions.claim(claim)
        await uow.jobs.add(job)
        reservation = Reservation(attempt.id, job.id, queue, assignments, now)
        started = await uow.scheduling.start([Start(job.id, attempt, members, reservation)], now)
        if started != [job.id]:
            raise Conflict(f"the check of pool {pool} could not be placed", fix="try again")
        await uow.checks.add(check)
        await uow.commit()
    log.info("check %s of pool %s: job %s on %s", check.id, pool, job.id, ", ".join(nodes))
    return check


async def _queue(uow: FleetUnit) -> str:
    queues = await uow.policy.queues()
    if not queues:
        raise InvalidInput("there is no queue to account the check to", fix="create a queue")
    named = {q.name: q for q in queues}
    return "default" if "default" in named else sorted(named)[0]


async def latest(ctx: Context, pool: str) -> PoolCheck | None:
    """The pool's last check, its results recorded first if its job has ended."""
    await settle(ctx)
    async with ctx.units.fleet() as uow:
        return await uow.checks.latest(pool)


async def settle(ctx: Context) -> int:
    """Record the results of every check whose job has ended; returns how many."""
    async with ctx.units.fleet() as uow:
        open_checks = await uow.checks.unfinished()
    done = 0
    for check in open_checks:
        done += await _settle(ctx, check)
    return done


async def _settle(ctx: Context, check: PoolCheck) -> int:
    now = ctx.clock.now()
    async with ctx.units.placement() as uow:
        job = await uow.jobs.get(check.job_id)
        if job is not None and job.state not in JOB_FINAL:
            return 0
        attempts = await uow.attempts.for_job(check.job_id) if job is not None else []
        members = await uow.members.for_attempt(attempts[-1].id) if attempts else []
        members.sort(key=lambda m: m.index)
        outputs = []
        for m in members:
            text, _ = stitch(await uow.logs.live(m.id, 0))
            outputs.append(text.decode(errors="replace"))
        ran = [m for m in members if m.exit_code is not None]
        complete = all("TPCHECK done" in o for o in outputs)
        if job is None or not ran or len(members) != len(check.nodes):
            why = job.reason if job is not None else "its job is gone"
            results: list[NodeResult] = []
            note = f"the check did not run: {why}; no node was marked"
        elif job.state is JobState.CANCELLED:
            results, note = [], "the check was stopped before it ended; no node was marked"
        elif not complete and now - job.updated_at < OUTPUT_GRACE:
            return 0  # the last pieces of output may still be on their way
        else:
            finished = [m.state is MemberState.SUCCEEDED for m in members]
            results = judge(check.nodes, outputs, finished)
            note = pool_note(results)
        if not await uow.checks.finish(check.id, results, note, now):
            return 0
        for r in results:
            node = await uow.fleet.node(r.node)
            if node is None or node.pool != check.pool:
                continue  # gone, or moved to another pool meanwhile: the result is not its own
            validation = Validation.PASSED if r.ok else Validation.FAILED
            await uow.fleet.set_validation(r.node, validation, "" if r.ok else r.detail, now)
        await uow.commit()
    failed = [r.node for r in results if not r.ok]
    log.info("check %s of pool %s ended; failed: %s", check.id, check.pool, failed or "none")
    return 1
