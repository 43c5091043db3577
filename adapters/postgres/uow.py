"""One unit of work = one connection + one transaction."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from adapters.postgres.artifacts import (
    PostgresArtifactRepository,
    PostgresCheckpointRepository,
    PostgresOutputScanRepository,
)
from adapters.postgres.blob_refs import PostgresBlobReferences
from adapters.postgres.checks import PostgresCheckRepository
from adapters.postgres.errors import translated
from adapters.postgres.fleet import PostgresFleetRepository
from adapters.postgres.jobs import PostgresJobRepository
from adapters.postgres.launches import PostgresLaunchLedger
from adapters.postgres.nodes import (
    PostgresEnrollmentRepository,
    PostgresNodeEventRepository,
    PostgresNodeLinkRepository,
)
from adapters.postgres.plugins import PostgresPluginRepository
from adapters.postgres.policy import PostgresPolicyRepository, PostgresTokenRepository
from adapters.postgres.reservations import PostgresReservationRepository
from adapters.postgres.runs import (
    PostgresAttemptRepository,
    PostgresLogRepository,
    PostgresMemberRepository,
)
from adapters.postgres.runtimes import PostgresRuntimeRepository
from adapters.postgres.scheduling import PostgresSchedulingRepository
from adapters.postgres.submissions import PostgresPreviewRepository, PostgresSubmissionLedger
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


class PostgresUnitOfWork:
    """``async with PostgresUnitOfWork(engine) as uow: ...; await uow.commit()``.

    Leaving the block without ``commit()`` rolls back. After ``commit()`` the unit may go on:
    the next statement opens a new transaction on the same connection. Read committed
    isolation; repositories only run SQL (no network call happens inside the transaction).
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

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None

    async def __aenter__(self) -> Self:
        if self._conn is not None:
            raise RuntimeError("a PostgresUnitOfWork cannot be entered twice")
        with translated("open a database transaction"):
            conn = await self._engine.connect()
            try:
                await conn.begin()
            except BaseException:
                await conn.close()
                raise
        self._conn = conn
        self.previews = PostgresPreviewRepository(conn)
        self.submissions = PostgresSubmissionLedger(conn)
        self.jobs = PostgresJobRepository(conn)
        self.attempts = PostgresAttemptRepository(conn)
        self.members = PostgresMemberRepository(conn)
        self.logs = PostgresLogRepository(conn)
        self.tokens = PostgresTokenRepository(conn)
        self.fleet = PostgresFleetRepository(conn)
        self.policy = PostgresPolicyRepository(conn)
        self.reservations = PostgresReservationRepository(conn)
        self.scheduling = PostgresSchedulingRepository(conn)
        self.enrollment = PostgresEnrollmentRepository(conn)
        self.links = PostgresNodeLinkRepository(conn)
        self.node_events = PostgresNodeEventRepository(conn)
        self.launches = PostgresLaunchLedger(conn)
        self.checks = PostgresCheckRepository(conn)
        self.artifacts = PostgresArtifactRepository(conn)
        self.checkpoints = PostgresCheckpointRepository(conn)
        self.output_scans = PostgresOutputScanRepository(conn)
        self.plugins = PostgresPluginRepository(conn)
        self.runtimes = PostgresRuntimeRepository(conn)
        self.blob_refs = PostgresBlobReferences(conn)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if conn.in_transaction():
                await conn.rollback()
        except Exception:
            if exc is None:  # do not hide the error that ended the block
                with translated("roll back a database transaction"):
                    raise
        finally:
            await conn.close()

    async def commit(self) -> None:
        if self._conn is None:
            raise RuntimeError("commit() outside `async with`")
        with translated("commit a database transaction"):
            await self._conn.commit()
