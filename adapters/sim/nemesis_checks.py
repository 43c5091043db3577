"""The nemesis's safety invariants (``adapters/sim/nemesis.py``), checked after every step
against the control plane's records and what runs on every simulated machine, and its liveness
check once every fault healed.

After every step:

* ``ended-on-proof``: no member is recorded ended while its container runs on any machine,
  unless its node was fenced (an operator's explicit decision);
* ``held-until-known``: no attempt's reservation is released while one of its members still
  runs on any machine (again unless fenced);
* ``launched-once``: no member's container is ever started twice, on any machine;
* ``log-before-end``: no member's exit is recorded (its launch's phase ``exited``) before its
  final log is stored (docs/node-backend.md, "Logs");
* ``one-session``: a node's live session is never taken over: a second session for a node is
  opened only once the first has ended (its stream closed, or cut off for silence): checked
  by the nemesis as it opens each session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from adapters.sim.node_runtime import SimRuntime
from application.context import Context
from domain.lifecycle import JOB_FINAL, MEMBER_FINAL
from domain.node_protocol import Phase

NEMESIS_INVARIANTS: dict[str, str] = {
    "ended-on-proof": "no member is recorded ended while its container runs",
    "held-until-known": "no reservation is released while a member of its attempt runs",
    "launched-once": "no member is started twice",
    "log-before-end": "no member's exit is recorded before its final log is stored",
    "one-session": "a node's live session is never taken over by a second one",
    "liveness": "once every fault healed, every job ends and every reservation is released",
}


@dataclass(frozen=True, slots=True)
class NemesisViolation:
    invariant: str
    step: int
    detail: str

    def __str__(self) -> str:
        return (
            f"step {self.step}: {self.invariant} ({NEMESIS_INVARIANTS[self.invariant]}): "
            f"{self.detail}"
        )


def running_members(runtimes: Iterable[SimRuntime]) -> dict[str, int]:
    """member id → running containers of it, on every machine."""
    out: dict[str, int] = {}
    for rt in runtimes:
        for c in rt.running():
            out[c.order.ref.member_id] = out.get(c.order.ref.member_id, 0) + 1
    return out


async def safety_violations(
    ctx: Context,
    job_ids: Sequence[str],
    nodes: Sequence[str],
    runtimes: Sequence[SimRuntime],
    reserved: set[str],
) -> list[tuple[str, str]]:
    """(invariant, detail) of every safety invariant broken now. ``reserved``: the attempts seen
    holding a reservation so far (this call adds those that hold one now)."""
    found: list[tuple[str, str]] = []
    running = running_members(runtimes)
    async with ctx.units.gang() as uow:
        epochs = {name: await uow.links.epoch(name) for name in nodes}
        for job_id in job_ids:
            for attempt in await uow.attempts.for_job(job_id):
                members = await uow.members.for_attempt(attempt.id)
                live = await uow.reservations.get(attempt.id) is not None
                if live:
                    reserved.add(attempt.id)
                # members placed before their node was declared lost (fenced)
                launches = await uow.launches.members(attempt.id)
                fenced = {ml.member_id for ml in launches if ml.epoch < epochs[ml.node]}
                for ml in launches:
                    if (
                        ml.phase is Phase.EXITED
                        and ml.member_id not in fenced
                        and await uow.logs.get(attempt.id, ml.index) is None
                    ):
                        found.append((
                            "log-before-end",
                            f"member {ml.member_id} (job {job_id}, node {ml.node}) is recorded "
                            "exited without its final log",
                        ))  # fmt: skip
                for mem in members:
                    if mem.id not in running or mem.id in fenced:
                        continue
                    if mem.state in MEMBER_FINAL:
                        found.append((
                            "ended-on-proof",
                            f"member {mem.id} (job {job_id}, node {mem.node}) is recorded "
                            f"{mem.state} ({mem.reason!r}) while its container runs",
                        ))  # fmt: skip
                    if not live and attempt.id in reserved:
                        found.append((
                            "held-until-known",
                            f"attempt {attempt.id} (job {job_id}) released its reservation "
                            f"while member {mem.id} runs on node {mem.node}",
                        ))  # fmt: skip
    machines: dict[str, int] = {}  # member → machines that started it
    for rt in runtimes:
        for member, n in rt.starts.items():
            machines[member] = machines.get(member, 0) + 1
            if n > 1:
                found.append(("launched-once", f"member {member} started {n} times"))
    for member in (m for m, n in machines.items() if n > 1):
        found.append(("launched-once", f"member {member} started on two machines"))
    return found


async def still_open(ctx: Context, job_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """(jobs not ended, with state and reason; attempts whose reservation is live)."""
    async with ctx.units.placement() as uow:
        unfinished = [
            f"{j.id} ({j.state}: {j.reason})"
            for jid in job_ids
            if (j := await uow.jobs.get(jid)) is not None and j.state not in JOB_FINAL
        ]
        live = [r.attempt_id for r in await uow.reservations.live()]
    return unfinished, live
