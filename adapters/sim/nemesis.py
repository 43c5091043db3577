"""The node-protocol nemesis: faults drawn at random at every step and at every message of the
simulated node fleet, with the safety invariants checked after every step.

It drives the real use cases — the coordinator (``Supervisor`` + ``GangCoordinator``), the node
gateway's ``NodeControl`` and each daemon's ``NodeAgent`` — over the in-memory adapters and the
simulated container runtimes of ``adapters/sim/nodes.py``. What it may do, each drawn from the
seed:

* per step: kill a daemon (kill -9; it restarts at a later step and recovers from its journal),
  lose or corrupt a journal row of a stopped daemon (SQLite quarantines a corrupt row at start-up:
  the row is gone) or its whole journal, start a second daemon with a copy of a node's credential
  (an impostor: its own empty journal, on another machine with its own engine or on the same
  machine with another state directory), declare a node lost (an operator's fence), kill the
  node gateway (at a random commit of its work: every stream dies), kill the coordinator (at a
  random commit of its tick), partition a node (what it sends waits, as TCP retransmits, until
  the partition heals or the gateway cuts the silent stream off and it reconnects), skew the
  gateway's clock against the coordinator's, let a member's process end (any exit code), cancel
  a job, submit one;
* per message, both ways: reset the stream after it, lose it (with its stream: TCP does not lose
  one message and go on), or deliver it twice.

After every step the safety invariants of ``adapters/sim/nemesis_checks.py`` are checked (no
member ended while its container runs, no reservation released while a member runs, no member
started twice, no live session taken over).

``finish`` then heals every fault and checks liveness: every job ends and every reservation is
released. Nodes an impostor held are fenced first, as an operator would after the security event
(the impostor's machine is gone, with whatever it started).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from adapters.memory.journal import MemoryJournal
from adapters.sim.faults import Crash, CrashKind, CrashPlan, CrashPoint, crashing
from adapters.sim.nemesis_checks import NemesisViolation, safety_violations, still_open
from adapters.sim.nemesis_model import Machine, NemesisRates, SkewedClock
from adapters.sim.node_runtime import SimRuntime
from adapters.sim.nodes import SimNode, SimNodeFleet
from application import jobs
from application.context import Context
from application.enrollment import NodeIdentity
from application.node_agent import NodeAgent
from application.node_control import ControlSettings, NodeControl
from application.node_sessions import Caller
from application.reconcile import fence_node
from application.supervisor import Supervisor
from domain.auth import Principal
from domain.errors import TunePlaneError
from domain.lifecycle import JobState


@dataclass
class Nemesis:
    ctx: Context  # the API side: submissions, cancels, the operator
    fleet: SimNodeFleet
    coordinator: Callable[[Context], Supervisor]
    submit: Callable[[], Awaitable[str]]
    owner: Principal
    seed: int
    rates: NemesisRates = field(default_factory=NemesisRates)
    settings: ControlSettings = field(default_factory=ControlSettings)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}/nemesis")
        self.step_no = 0
        self.starts = 0  # daemon processes started
        self.jobs: list[str] = []
        self.violations: list[NemesisViolation] = []
        self.log: list[str] = []
        self.gateway_clock = SkewedClock(self.ctx.clock)
        self.gateway_plan = CrashPlan()
        self.coordinator_plan = CrashPlan()
        self.machines: dict[str, Machine] = {
            name: Machine(node) for name, node in self.fleet.nodes.items()
        }
        self.impostors: dict[str, Machine] = {}
        self.impostor_runtimes: list[SimRuntime] = []
        self.tainted: set[str] = set()  # nodes an impostor held a session of
        self.reserved: set[str] = set()  # attempts seen holding a reservation
        self.supervisor = self._coordinator()
        self._new_gateway()

    # -- the processes ----------------------------------------------------------------------

    def _coordinator(self) -> Supervisor:
        ctx = dataclasses.replace(self.ctx, uow=crashing(self.ctx.uow, self.coordinator_plan))
        return self.coordinator(ctx)

    def _new_gateway(self) -> None:
        ctx = dataclasses.replace(
            self.ctx, clock=self.gateway_clock, uow=crashing(self.ctx.uow, self.gateway_plan)
        )
        self.fleet.control = NodeControl(ctx, "sim-gateway", self.settings)
        for m in self._all():
            m.node.session, m.node.outbox = None, []

    def _all(self) -> list[Machine]:
        return [*self.machines.values(), *self.impostors.values()]

    def _holder(self, name: str) -> Machine | None:
        return next((m for m in self._all() if m.node.name == name and m.node.session), None)

    async def _connect(self, m: Machine) -> None:
        node = m.node
        if node.agent is None:  # a (re)started daemon recovers from its journal first
            node.agent = NodeAgent(node.name, node.journal, node.runtime, self._sender(node))
            self.starts += 1
            m.instance = f"daemon-{self.starts}"
            await node.agent.recover()
        holder = self._holder(node.name)
        address = "10.6.6.6" if m.impostor else "10.0.0.1"
        hello = await node.agent.hello(self.fleet.capacity, address, "sim")
        identity = NodeIdentity(node.name, f"cred-{node.name}")  # a copy is the same credential
        try:
            session = await self.fleet.control.open(identity, hello, Caller(address, m.instance))
        except TunePlaneError as exc:
            who = "impostor" if m.impostor else "daemon"
            self.log.append(f"{self.step_no}: {node.name} {who} refused: {str(exc)[:60]}")
            return
        if holder is not None:  # the gateway ends the older stream (a takeover)
            alive = holder.node.agent is not None and not holder.node.partitioned
            if alive:
                self._violate(
                    "one-session",
                    f"node {node.name}: a session from {address} was opened while the "
                    f"{'impostor' if holder.impostor else 'real daemon'}'s was alive",
                )
            holder.node.session, holder.node.outbox = None, []
        node.seq, node.outbox, node.partitioned = 1, [], False
        node.session = session
        session.last_seq = 1
        m.silent_since = None
        if m.impostor:
            self.tainted.add(node.name)
            self.log.append(f"{self.step_no}: impostor of {node.name} holds its session")
        await node.agent.welcomed(session.epoch, session.installation)

    @staticmethod
    def _sender(node: SimNode) -> Callable[[Any], Awaitable[None]]:
        """A stream queues what the daemon sends; a partition delays it (TCP retransmits), only
        the stream's end loses it."""

        async def send(body: Any) -> None:
            if node.session is None:
                raise ConnectionError(f"node {node.name} is not connected")
            node.seq += 1
            node.outbox.append((node.seq, body))

        return send

    async def _close(self, m: Machine) -> None:
        if m.node.session is not None:
            await self.fleet.control.close(m.node.session)
        m.node.session, m.node.outbox = None, []

    async def _kill_daemon(self, m: Machine, down_steps: int) -> None:
        agent = m.node.agent
        if agent is not None:
            in_flight = agent.in_flight()
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        m.node.agent = None
        await self._close(m)  # the kernel closes a killed process's socket
        m.down_until = self.step_no + down_steps

    # -- one step ---------------------------------------------------------------------------

    async def step(self) -> None:
        self.step_no += 1
        r = self.rates
        rng = self.rng
        if len(self.jobs) < 6 and (not self.jobs or rng.random() < r.submit):
            self.jobs.append(await self.submit())
        if rng.random() < r.daemon_kill:
            m = rng.choice(list(self.machines.values()))
            self.log.append(f"{self.step_no}: kill daemon {m.node.name}")
            await self._kill_daemon(m, rng.randint(0, 4))
        if rng.random() < r.journal_loss:
            await self._lose_journal(rng.choice(list(self.machines.values())))
        if rng.random() < r.impostor:
            await self._impostor(rng.choice(list(self.machines)))
        if rng.random() < r.partition:
            m = rng.choice(self._all())
            if m.node.session is not None and not m.node.partitioned:
                self.log.append(f"{self.step_no}: partition {m.node.name}")
                m.node.partitioned = True
                m.silent_since = self.gateway_clock.now()
        if rng.random() < r.skew:
            self.gateway_clock.offset = timedelta(seconds=rng.randint(-40, 40))
        if rng.random() < r.member_exit:
            self._exit_a_member()
        if rng.random() < r.fence:  # an operator declares a node lost: it never comes back
            name = rng.choice(list(self.machines))
            self.log.append(f"{self.step_no}: operator fences {name}")
            await fence_node(self.ctx, name, f"node {name} declared lost by the nemesis")
        if self.jobs and rng.random() < r.cancel:
            with contextlib.suppress(TunePlaneError):
                await jobs.cancel_job(self.ctx, self.owner, rng.choice(self.jobs))
        if rng.random() < r.engine_outage:
            m = rng.choice(list(self.machines.values()))
            if m.engine_back is None:
                self.log.append(f"{self.step_no}: engine of {m.node.name} stops answering")
                m.node.runtime.down = "the engine does not answer (the nemesis)"
                m.engine_back = self.step_no + rng.randint(1, 4)
        self._engines_come_back()
        await self._tick()
        await self._pump()
        await self._daemons_come_back()
        await self._check()
        self.ctx.clock.advance(seconds=5)  # type: ignore[attr-defined]

    async def _tick(self) -> None:
        if self.rng.random() < self.rates.coordinator_kill:
            kind: CrashKind = self.rng.choice(("before-commit", "after-commit"))
            self.coordinator_plan.arm(CrashPoint(kind, self.rng.randint(1, 6)))
        try:
            await self.supervisor.tick()
        except Crash:
            self.log.append(f"{self.step_no}: coordinator died at {self.coordinator_plan.fired}")
            await self.supervisor.close()
            self.supervisor = self._coordinator()
        finally:
            self.coordinator_plan.disarm()

    async def _lose_journal(self, m: Machine) -> None:
        if m.node.agent is not None:  # a row is found corrupt when the daemon starts
            await self._kill_daemon(m, self.rng.randint(0, 2))
        journal = m.node.journal
        entries = journal.entries()
        if self.rng.random() < 0.2:
            m.node.journal = MemoryJournal()  # the whole journal (a new disk)
            self.log.append(f"{self.step_no}: journal of {m.node.name} lost")
        elif entries:
            lost = self.rng.choice(entries).member_id
            journal.delete(lost)
            self.log.append(f"{self.step_no}: journal row {lost} of {m.node.name} corrupt")

    async def _impostor(self, name: str) -> None:
        if name in self.impostors:  # the impostor goes away (its machine with it)
            m = self.impostors.pop(name)
            await self._kill_daemon(m, 0)
            self.log.append(f"{self.step_no}: impostor of {name} gone")
            return
        node = SimNode(name)
        real = self.machines[name].node
        where = "another machine"
        if self.rng.random() < 0.5:  # a second daemon on the same machine, its own state dir
            node.runtime, where = real.runtime, "the same machine"
        else:  # another engine, with another identity
            node.runtime = SimRuntime(name, real.runtime.refusal, engine=f"engine-{name}-copy")
            self.impostor_runtimes.append(node.runtime)
        m = Machine(node, impostor=True)
        self.impostors[name] = m
        self.log.append(f"{self.step_no}: impostor of {name} starts on {where}")
        await self._connect(m)

    def _exit_a_member(self) -> None:
        running = [(rt, c.order.ref.member_id) for rt in self._runtimes() for c in rt.running()]
        if running:
            rt, member = self.rng.choice(running)
            rt.finish(member, self.rng.choice((0, 0, 0, 1, 137)))

    def _runtimes(self) -> list[SimRuntime]:
        return [m.node.runtime for m in self.machines.values()] + self.impostor_runtimes

    def _engines_come_back(self, now: bool = False) -> None:
        for m in self.machines.values():
            if m.engine_back is not None and (now or self.step_no >= m.engine_back):
                m.node.runtime.down, m.engine_back = None, None

    async def _daemons_come_back(self) -> None:
        for m in self._all():
            if m.node.agent is None and m.impostor:
                continue  # a dead impostor stays dead
            if m.down_until is not None and self.step_no < m.down_until:
                continue
            m.down_until = None
            cut = timedelta(seconds=3 * self.settings.heartbeat.total_seconds())
            if m.node.partitioned and m.silent_since is not None:
                if m.node.session is not None and self.gateway_clock.now() - m.silent_since >= cut:
                    await self._close(m)  # the gateway cuts a silent stream off
                if self.rng.random() < 0.3:
                    m.node.partitioned, m.silent_since = False, None  # the network heals
            if m.node.session is None and not m.node.partitioned and self.rng.random() < 0.7:
                await self._connect(m)

    # -- moving messages, with faults at each -----------------------------------------------

    def _fate(self) -> str:
        x = self.rng.random()
        r = self.rates
        if x < r.drop:
            return "drop"
        if x < r.drop + r.reset:
            return "reset"
        if x < r.drop + r.reset + r.duplicate:
            return "duplicate"
        return "deliver"

    async def _pump(self) -> None:
        control = self.fleet.control
        for m in self._all():
            if m.node.session is not None and m.node.agent and not m.node.partitioned:
                control.heartbeat(m.node.session)
        if self.rng.random() < self.rates.gateway_kill:
            self.gateway_plan.arm(CrashPoint("before-commit", self.rng.randint(1, 8)))
        try:
            await control.flush()
            for _ in range(12):
                if await self._round() == 0:
                    break
        except Crash:
            self.log.append(f"{self.step_no}: gateway died at {self.gateway_plan.fired}")
            self._new_gateway()
        finally:
            self.gateway_plan.disarm()

    async def _round(self) -> int:
        moved = 0
        control = self.fleet.control
        live = [m for m in self._all() if m.node.session is not None and m.node.agent]
        for m in live:
            node = m.node
            assert node.agent is not None
            await node.agent.watch_once()
            await self.fleet.settle(node)
            if node.partitioned:
                continue  # held back until the partition heals or the stream is cut off
            batch, node.outbox = node.outbox, []
            for seq, body in batch:
                if node.session is None:
                    break
                fate = self._fate()
                if fate == "drop":
                    await self._close(m)
                    continue
                why = await control.handle(node.session, seq, body)
                if why is not None:
                    self.fleet.refused.append(why)
                if fate == "duplicate":
                    await control.handle(node.session, seq, body)
                elif fate == "reset":
                    await self._close(m)
                moved += 1
        holders = {m.node.name: m for m in live if m.node.session and not m.node.partitioned}
        sessions = [m.node.session for m in holders.values() if m.node.session is not None]
        todo = await control.commands_due({s.node: s for s in sessions}) if sessions else {}
        for name, items in todo.items():
            m = holders[name]
            for item in items:
                if m.node.session is None or m.node.agent is None:
                    break
                fate = self._fate()
                if fate == "drop":
                    await self._close(m)
                    break
                for _ in range(2 if fate == "duplicate" else 1):
                    moved += 1
                    if item.order is not None:
                        await self.fleet.prepare(m.node, item.order)
                    else:
                        await m.node.agent.on_command(item.command, 0.0)
                if fate == "reset":
                    await self._close(m)
            await self.fleet.settle(m.node)
        return moved

    # -- invariants -------------------------------------------------------------------------

    def _violate(self, invariant: str, detail: str) -> None:
        self.violations.append(NemesisViolation(invariant, self.step_no, detail))

    async def _check(self) -> None:
        found = await safety_violations(
            self.ctx, self.jobs, list(self.machines), self._runtimes(), self.reserved
        )
        for invariant, detail in found:
            self._violate(invariant, detail)

    # -- the end ----------------------------------------------------------------------------

    async def finish(self, max_steps: int = 120) -> None:
        """Heal every fault, let every workload end, and check that every job ends and every
        reservation is released."""
        for name in list(self.impostors):
            await self._kill_daemon(self.impostors.pop(name), 0)
        for name in sorted(self.tainted):  # the operator's answer to the security event
            await fence_node(self.ctx, name, f"node {name}: its credential was copied")
        self.rates = NemesisRates(**{f.name: 0.0 for f in dataclasses.fields(NemesisRates)})
        self.gateway_clock.offset = timedelta(0)
        for m in self.machines.values():
            m.down_until = None
            m.node.partitioned = False
        self._engines_come_back(now=True)
        for _ in range(max_steps):
            await self._cancel_pending()  # the fleet may have shrunk: never placed, never will
            for rt in self._runtimes():
                for c in rt.running():
                    rt.finish(c.order.ref.member_id, 0)
            await self.step()
            if await self._settled():
                break
        unfinished, live = await still_open(self.ctx, self.jobs)
        if unfinished or live:
            self._violate(
                "liveness",
                f"after {max_steps} healed steps: unfinished jobs {unfinished}, "
                f"live reservations {live}",
            )

    async def _cancel_pending(self) -> None:
        async with self.ctx.units.jobs() as uow:
            pending = [
                jid
                for jid in self.jobs
                if (j := await uow.jobs.get(jid)) is not None and j.state is JobState.PENDING
            ]
        for jid in pending:
            with contextlib.suppress(TunePlaneError):
                await jobs.cancel_job(self.ctx, self.owner, jid)

    async def _settled(self) -> bool:
        unfinished, live = await still_open(self.ctx, self.jobs)
        return not unfinished and not live
