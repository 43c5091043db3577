"""MemoryUnitOfWork: one transaction on a MemoryStore."""

from __future__ import annotations

from types import TracebackType
from typing import Self

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
        tx = self._tx = self._store.begin()
        self.previews = MemoryPreviewRepository(tx)
        self.submissions = MemorySubmissionLedger(tx)
        self.jobs = MemoryJobRepository(tx)
        self.attempts = MemoryAttemptRepository(tx)
        self.members = MemoryMemberRepository(tx)
        self.logs = MemoryLogRepository(tx)
        self.tokens = MemoryTokenRepository(tx)
        self.fleet = MemoryFleetRepository(tx)
        self.policy = MemoryPolicyRepository(tx)
        self.reservations = MemoryReservationRepository(tx)
        self.scheduling = MemorySchedulingRepository(tx)
        self.enrollment = MemoryEnrollmentRepository(tx)
        self.links = MemoryNodeLinkRepository(tx)
        self.node_events = MemoryNodeEventRepository(tx)
        self.launches = MemoryLaunchLedger(tx)
        self.checks = MemoryCheckRepository(tx)
        self.artifacts = MemoryArtifactRepository(tx)
        self.checkpoints = MemoryCheckpointRepository(tx)
        self.output_scans = MemoryOutputScanRepository(tx)
        self.plugins = MemoryPluginRepository(tx)
        self.runtimes = MemoryRuntimeRepository(tx)
        self.blob_refs = MemoryBlobReferences(tx)
        return self

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
