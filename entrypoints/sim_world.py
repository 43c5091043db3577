"""The simulator's world: the real application code over the in-memory adapters, a fake clock,
counting ids and a simulated backend (docs/simulator.md). ``entrypoints.sim`` drives it step by
step; tests drive it directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.catalog import default_catalog
from adapters.memory import MemoryLeaderLease, MemoryStore, MemoryUnitOfWork
from adapters.sim import (
    Crash,
    CrashingBackend,
    CrashPlan,
    CrashPoint,
    Inspection,
    MemoryBlobStore,
    SimBackend,
    SimClock,
    Violation,
    inspect,
)
from adapters.sim.clock import CountingIds
from adapters.sim.faults import crashing
from application import jobs as job_cases
from application import reconcile, submissions
from application.context import Context, Limits
from application.scheduler import PassResult, Scheduler
from application.supervisor import Supervisor
from domain.auth import Principal, Role, User
from domain.catalog import RuntimeSpec
from domain.errors import TunePlaneError
from domain.fleet import Connectivity, Node, Queue, Team
from domain.ports import ExecutionBackend, LaunchRequest
from domain.requests import Profile
from domain.retry import RetryPolicy
from domain.submission import SubmissionIntent
from entrypoints.sim_scenario import PoolSpec

SIM_RUNTIME = RuntimeSpec(
    name="sim",
    image="sim/runtime:1",
    python=None,
    process_model="single-process",
    description="the simulator's stand-in runtime (nothing is executed)",
)
OPERATOR = Principal("sim-operator", Role.OPERATOR)


# -- the world: store, clock, backends, the API side and the coordinator -------------------------


class RecordingScheduler(Scheduler):
    """The real scheduler; it only remembers the results of its passes for the trace."""

    def __init__(self, ctx: Context, results: list[PassResult], **kw: Any) -> None:
        super().__init__(ctx, **kw)
        self.results = results

    async def pass_once(self) -> PassResult:
        result = await super().pass_once()
        self.results.append(result)
        return result


@dataclass(frozen=True, slots=True)
class TickOutcome:
    crashed: CrashPoint | None
    passes: list[PassResult]


class World:
    """A control plane on in-memory adapters: the API side (previews, commits, cancels,
    operator decisions) and the coordinator (the supervisor under the leader lease), sharing
    one store, a fake clock and the simulated backends. Also driven by the property tests."""

    def __init__(
        self,
        pools: Sequence[PoolSpec],
        queues: Sequence[Queue],
        profiles: Sequence[Profile] = (),
        *,
        fate: Callable[[LaunchRequest], tuple[float, int] | None] | None = None,
        refusal: Callable[[LaunchRequest], TunePlaneError | None] | None = None,
        snapshot_limit: int = 20_000,
        batch: int = 100,
    ) -> None:
        self.pool_specs = tuple(pools)
        self.queues = tuple(queues)
        self.profiles = tuple(profiles)
        self.store = MemoryStore()
        self.clock = SimClock()
        self.ids = CountingIds()
        self.plan = CrashPlan()
        self.snapshot_limit = snapshot_limit
        self.batch = batch
        names = sorted({p.pool.backend for p in pools})
        self.backends = {n: SimBackend(n, self.clock, fate=fate, refusal=refusal) for n in names}
        catalog = default_catalog((SIM_RUNTIME,))
        blobs = MemoryBlobStore()
        limits = Limits(stop_grace_seconds=0.0, max_log_bytes=4096)
        store = self.store
        self.api = Context(
            uow=lambda: MemoryUnitOfWork(store),
            clock=self.clock,
            ids=self.ids,
            catalog=catalog,
            backends=dict(self.backends),
            blobs=blobs,
            new_secret=lambda: "sim-secret",
            limits=limits,
        )
        wrapped: dict[str, ExecutionBackend] = {
            n: CrashingBackend(b, self.plan) for n, b in self.backends.items()
        }
        self.coordinator = Context(
            uow=crashing(lambda: MemoryUnitOfWork(store), self.plan),
            clock=self.clock,
            ids=self.ids,
            catalog=catalog,
            backends=wrapped,
            blobs=blobs,
            new_secret=lambda: "sim-secret",
            limits=limits,
        )
        self.results: list[PassResult] = []
        self.restarts = 0
        self.retry_keys = 0
        self.owners: dict[str, Principal] = {}
        self.supervisor, self.lease = self._start()

    def _start(self) -> tuple[Supervisor, MemoryLeaderLease]:
        lease = MemoryLeaderLease(self.store.leases)
        # decides each pass whole, then stores it (overlap=0): the crash points count commits,
        # and a pass's batches stay those of the traces before the overlapped store
        scheduler = RecordingScheduler(
            self.coordinator,
            self.results,
            snapshot_limit=self.snapshot_limit,
            batch=self.batch,
            overlap=0,
        )
        return Supervisor(self.coordinator, lease, scheduler=scheduler), lease

    @staticmethod
    def user_of(team: str) -> Principal:
        return Principal(f"{team}-user", Role.MEMBER, (team,))

    async def setup(self) -> None:
        """Write the fleet, the teams, their users and the queues through the repositories."""
        async with self.api.units.fleet() as uow:
            for spec in self.pool_specs:
                await uow.fleet.put_pool(spec.pool)
                for name in spec.node_names():
                    await uow.fleet.put_node(Node(name, spec.pool.name))
            for profile in self.profiles:
                await uow.fleet.put_profile(profile)
            teams = sorted({q.team for q in self.queues})
            for team in teams:
                await uow.policy.put_team(Team(team))
                p = self.user_of(team)
                await uow.policy.put_user(User(p.name, p.role, p.teams, self.clock.now()))
            await uow.policy.put_user(User(OPERATOR.name, OPERATOR.role, (), self.clock.now()))
            for q in self.queues:
                await uow.policy.put_queue(q)
            await uow.commit()

    @property
    def sim_backends(self) -> list[SimBackend]:
        return [self.backends[n] for n in sorted(self.backends)]

    # -- the API side ---------------------------------------------------------------------

    async def submit(
        self, profiles: Sequence[str], queue: str, retry: RetryPolicy | None = None
    ) -> str:
        """Preview and commit a job through the real use cases; returns its id."""
        team = next(q.team for q in self.queues if q.name == queue)
        who = self.user_of(team)
        intent = SubmissionIntent(
            experiment="sim",
            method="custom/custom",
            profiles=tuple(profiles),
            params={"command": "train"},
            runtime=SIM_RUNTIME.name,
            queue=queue,
            retry=retry,
        )
        preview = await submissions.create_preview(self.api, who, intent)
        self.retry_keys += 1
        key = f"sim-retry-key-{self.retry_keys:08d}"
        receipt = await submissions.commit(self.api, who, preview.id, preview.digest, key)
        self.owners[receipt.job_id] = who
        return receipt.job_id

    async def cancel(self, job_id: str) -> str:
        details = await job_cases.cancel_job(self.api, self.owners[job_id], job_id)
        return details.job.state

    async def disconnect(self, node: str) -> bool:
        """The node's control stream drops: its members become unknown. False if it was not
        connected."""
        async with self.api.units.fleet() as uow:
            current = await uow.fleet.node(node)
            if current is None or current.connectivity is not Connectivity.CONNECTED:
                return False
            at = self.api.clock.now()
            await uow.fleet.set_node_state(node, connectivity=Connectivity.DISCONNECTED, at=at)
            await uow.commit()
        for b in self.backends.values():
            b.disconnect(node)
        return True

    async def reconnect(self, node: str) -> bool:
        """Contact is back (never for a node declared lost). False if nothing changed."""
        async with self.api.units.fleet() as uow:
            current = await uow.fleet.node(node)
            if current is None or current.connectivity is not Connectivity.DISCONNECTED:
                return False
            at = self.api.clock.now()
            await uow.fleet.set_node_state(node, connectivity=Connectivity.CONNECTED, at=at)
            await uow.commit()
        for b in self.backends.values():
            b.reconnect(node)
        return True

    async def declare_lost(self, node: str) -> int:
        """An operator declares the node lost (it stays out of contact for good)."""
        for b in self.backends.values():
            b.disconnect(node)
        return await reconcile.declare_node_lost(
            self.api, OPERATOR, node, "declared lost by the simulator"
        )

    # -- the coordinator ------------------------------------------------------------------

    async def restart(self) -> None:
        """The coordinator died: its stop requests in flight die with it, its lease is
        dropped; a fresh one starts on the same store and backends."""
        await self.supervisor.close()
        self.lease.crash()
        self.plan.disarm()
        self.supervisor, self.lease = self._start()
        self.restarts += 1

    async def tick(self, crash: CrashPoint | None = None) -> TickOutcome:
        """One coordinator tick; with ``crash``, the coordinator dies at that point (if the
        tick gets there) and a fresh one is started, which ticks next time."""
        first = len(self.results)
        self.plan.arm(crash)
        fired: CrashPoint | None = None
        try:
            await self.supervisor.tick()
        except Crash:
            fired = self.plan.fired
            await self.restart()
        finally:
            self.plan.disarm()
        for _ in range(3):  # let the stop requests of this tick reach the backend
            await asyncio.sleep(0)
        return TickOutcome(fired, self.results[first:])

    async def check(self, settled: bool = True) -> list[Violation]:
        """Every invariant violated now (empty when all hold)."""
        return (await self.inspect(settled)).violations

    async def inspect(self, settled: bool = True) -> Inspection:
        return await inspect(self.api.uow, self.sim_backends, settled=settled)
