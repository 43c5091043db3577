"""A coordinator crash at a chosen point, for the simulator and the property tests.

``CrashPlan.arm(CrashPoint("after-commit", 3))`` makes the third commit of the coordinator's
units of work (counted from the arming) raise ``Crash`` right after it committed;
``before-commit`` raises instead of committing (the transaction rolls back); ``after-launch``
raises right after the backend started the n-th member, before the coordinator recorded it.
The caller abandons that coordinator (its stop requests in flight are cancelled, its leader
lease is dropped) and starts a fresh one on the same store and backend: a restart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from domain.artifact_ports import ArtifactRepository, CheckpointRepository
from domain.blob_ports import BlobReferences
from domain.catalog import RuntimePin, RuntimeSpec
from domain.node_ports import (
    EnrollmentRepository,
    LaunchLedger,
    NodeEventRepository,
    NodeLinkRepository,
    OutputScanRepository,
)
from domain.plugin_ports import PluginRepository
from domain.ports import (
    AttemptRepository,
    CheckRepository,
    ExecutionBackend,
    FleetRepository,
    JobRepository,
    LaunchRequest,
    LogRepository,
    MemberRepository,
    Observation,
    PolicyRepository,
    PreviewRepository,
    ReservationRepository,
    SchedulingRepository,
    SubmissionLedger,
    TokenRepository,
)
from domain.runtime_ports import RuntimeRepository
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory

CrashKind = Literal["before-commit", "after-commit", "after-launch"]
CRASH_KINDS: tuple[CrashKind, ...] = ("before-commit", "after-commit", "after-launch")


class Crash(BaseException):
    """The coordinator process dies here. A BaseException, so that no ``except Exception``
    in the code under test can swallow it, as nothing can catch a SIGKILL."""


@dataclass(frozen=True, slots=True)
class CrashPoint:
    kind: CrashKind
    n: int  # the n-th commit or launch after arming, from 1

    def __str__(self) -> str:
        return f"{self.kind} {self.n}"


class CrashPlan:
    """Counts the coordinator's commits and launches and fires the armed crash once."""

    def __init__(self) -> None:
        self.point: CrashPoint | None = None
        self.fired: CrashPoint | None = None
        self.commits = 0
        self.launches = 0

    def arm(self, point: CrashPoint | None) -> None:
        self.point, self.fired, self.commits, self.launches = point, None, 0, 0

    def disarm(self) -> None:
        self.point = None

    def _fire(self) -> None:
        assert self.point is not None
        self.fired, self.point = self.point, None
        raise Crash(str(self.fired))

    def before_commit(self) -> None:
        self.commits += 1
        p = self.point
        if p is not None and p.kind == "before-commit" and self.commits == p.n:
            self._fire()

    def after_commit(self) -> None:
        p = self.point
        if p is not None and p.kind == "after-commit" and self.commits == p.n:
            self._fire()

    def after_launch(self) -> None:
        self.launches += 1
        p = self.point
        if p is not None and p.kind == "after-launch" and self.launches == p.n:
            self._fire()


def crashing(factory: UnitOfWorkFactory, plan: CrashPlan) -> UnitOfWorkFactory:
    """A unit-of-work factory whose commits may crash per ``plan``."""
    return lambda: CrashingUnitOfWork(factory(), plan)


class CrashingUnitOfWork:
    previews: PreviewRepository
    submissions: SubmissionLedger
    jobs: JobRepository
    attempts: AttemptRepository
    members: MemberRepository
    logs: LogRepository
    tokens: TokenRepository
    fleet: FleetRepository
    policy: PolicyRepository
    reservations: ReservationRepository
    scheduling: SchedulingRepository
    enrollment: EnrollmentRepository
    links: NodeLinkRepository
    node_events: NodeEventRepository
    launches: LaunchLedger
    checks: CheckRepository
    artifacts: ArtifactRepository
    checkpoints: CheckpointRepository
    output_scans: OutputScanRepository
    plugins: PluginRepository
    runtimes: RuntimeRepository
    blob_refs: BlobReferences

    def __init__(self, inner: UnitOfWork, plan: CrashPlan) -> None:
        self._inner = inner
        self._plan = plan

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    if not TYPE_CHECKING:  # mypy keeps checking attribute names against the ones above

        def __getattr__(self, name: str) -> Any:
            """The inner unit's repository of that name (read when first used)."""
            if name not in _REPOSITORY_NAMES:
                raise AttributeError(f"{type(self).__name__} has no {name!r}")
            repository = getattr(self.__dict__["_inner"], name)
            setattr(self, name, repository)
            return repository

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._inner.__aexit__(exc_type, exc, tb)

    async def commit(self) -> None:
        self._plan.before_commit()
        await self._inner.commit()
        self._plan.after_commit()


_REPOSITORY_NAMES = frozenset(CrashingUnitOfWork.__annotations__) - {"_inner", "_plan"}


class CrashingBackend:
    """An ExecutionBackend whose launches may crash the caller right after they took effect."""

    def __init__(self, inner: ExecutionBackend, plan: CrashPlan) -> None:
        self.inner = inner
        self.name = inner.name
        self.storage = inner.storage
        self._plan = plan

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        return await self.inner.pin(runtime)

    async def launch(self, request: LaunchRequest) -> str:
        handle = await self.inner.launch(request)
        self._plan.after_launch()
        return handle

    async def observe(self, handle: str) -> Observation:
        return await self.inner.observe(handle)

    async def stop(self, handle: str, grace_seconds: float) -> None:
        await self.inner.stop(handle, grace_seconds)

    def logs(self, handle: str, follow: bool) -> AsyncIterator[bytes]:
        return self.inner.logs(handle, follow)

    async def held(self) -> dict[str, str]:
        return await self.inner.held()

    async def release(self, handle: str) -> None:
        await self.inner.release(handle)
