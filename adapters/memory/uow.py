"""MemoryUnitOfWork: one transaction on a MemoryStore."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from adapters.memory.artifacts import (
    MemoryArtifactRepository,
    MemoryCheckpointRepository,
    MemoryOutputScanRepository,
)
from adapters.memory.blob_refs import MemoryBlobReferences
from adapters.memory.checks import MemoryCheckRepository
from adapters.memory.db import Tx
from adapters.memory.fleet import MemoryFleetRepository
from adapters.memory.jobs import MemoryJobRepository
from adapters.memory.launches import MemoryLaunchLedger
from adapters.memory.nodes import (
    MemoryEnrollmentRepository,
    MemoryNodeEventRepository,
    MemoryNodeLinkRepository,
)
from adapters.memory.plugins import MemoryPluginRepository
from adapters.memory.policy import MemoryPolicyRepository, MemoryTokenRepository
from adapters.memory.reservations import MemoryReservationRepository
from adapters.memory.runs import (
    MemoryAttemptRepository,
    MemoryLogRepository,
    MemoryMemberRepository,
)
from adapters.memory.runtimes import MemoryRuntimeRepository
from adapters.memory.scheduling import MemorySchedulingRepository
from adapters.memory.store import MemoryStore
from adapters.memory.submissions import MemoryPreviewRepository, MemorySubmissionLedger
from domain.artifact_ports import ArtifactRepository, CheckpointRepository
from domain.blob_ports import BlobReferences
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
    FleetRepository,
    JobRepository,
    LogRepository,
    MemberRepository,
    PolicyRepository,
    PreviewRepository,
    ReservationRepository,
    SchedulingRepository,
    SubmissionLedger,
    TokenRepository,
)
from domain.runtime_ports import RuntimeRepository


class MemoryUnitOfWork:
    """``async with MemoryUnitOfWork(store) as uow: ...; await uow.commit()``.

    Same contract as PostgresUnitOfWork: writes are invisible to other units until
    ``commit()``; leaving the block without it discards them; after ``commit()`` the unit may
    go on in a new transaction. Row locks and key reservations are held until the transaction
    ends, so concurrent units wait for (or, when claiming jobs, skip) each other's rows.
    """

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

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._tx: Tx | None = None

    async def __aenter__(self) -> Self:
        if self._tx is not None:
            raise RuntimeError("a MemoryUnitOfWork cannot be entered twice")
        self._tx = self._store.begin()
        return self

    if not TYPE_CHECKING:  # mypy keeps checking attribute names against the ones above

        def __getattr__(self, name: str) -> Any:
            """A repository, made on first use in this unit (most units use two or three
            of the twenty-two): only for the names above, once entered."""
            make = _REPOSITORIES.get(name)
            tx = self.__dict__.get("_tx")
            if make is None or tx is None:
                raise AttributeError(f"{type(self).__name__} has no {name!r} (enter it first)")
            repository = make(tx)
            setattr(self, name, repository)
            return repository

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tx is not None:
            self._tx.close()

    async def commit(self) -> None:
        if self._tx is None:
            raise RuntimeError("commit() outside `async with`")
        self._tx.commit()


_REPOSITORIES: dict[str, Callable[[Tx], object]] = {
    "previews": MemoryPreviewRepository,
    "submissions": MemorySubmissionLedger,
    "jobs": MemoryJobRepository,
    "attempts": MemoryAttemptRepository,
    "members": MemoryMemberRepository,
    "logs": MemoryLogRepository,
    "tokens": MemoryTokenRepository,
    "fleet": MemoryFleetRepository,
    "policy": MemoryPolicyRepository,
    "reservations": MemoryReservationRepository,
    "scheduling": MemorySchedulingRepository,
    "enrollment": MemoryEnrollmentRepository,
    "links": MemoryNodeLinkRepository,
    "node_events": MemoryNodeEventRepository,
    "launches": MemoryLaunchLedger,
    "checks": MemoryCheckRepository,
    "artifacts": MemoryArtifactRepository,
    "checkpoints": MemoryCheckpointRepository,
    "output_scans": MemoryOutputScanRepository,
    "plugins": MemoryPluginRepository,
    "runtimes": MemoryRuntimeRepository,
    "blob_refs": MemoryBlobReferences,
}
