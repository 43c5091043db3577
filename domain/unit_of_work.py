"""Units of work, split by bounded context.

A unit of work is one transaction (``async with ... as uow: ...; await uow.commit()``; leaving
the block without ``commit()`` rolls back). Its repositories are grouped by bounded context, and
every use case opens the narrowest unit it needs (``ctx.units.jobs()``), so that a signature says
which tables a use case can touch and mypy refuses the others:

=============  ==========================================================================
unit           repositories
=============  ==========================================================================
JobsUnit       previews, submissions, jobs, attempts, members, logs (submissions and jobs)
FleetUnit      fleet, policy, tokens, reservations, checks (fleet, policy, reservations)
NodesUnit      enrollment, links, node_events, launches, output_scans (nodes, launches)
ArtifactsUnit  artifacts, plugins, runtimes, blob_refs (plugins and artifacts)
=============  ==========================================================================

Telemetry has no unit: its store (``domain.telemetry_ports.MetricsStore``) keeps its own
transactions, apart from the control plane's tables.

A use case that must change two contexts atomically takes a composed unit, still ONE
transaction (e.g. admission moves jobs to starting and reserves their envelopes together:
``AdmissionUnit``). The compositions are named for what they are for; ``UnitOfWork`` holds every
repository and is what the adapters implement (one class per adapter serves every view).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

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


class Transaction(Protocol):
    """One transaction. Leaving the ``async with`` block without ``commit()`` rolls back; after
    ``commit()`` the unit may go on in a new transaction."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def commit(self) -> None: ...


class JobsUnit(Transaction, Protocol):
    """Submissions and jobs: previews, the commit ledger, jobs, attempts, members, their logs."""

    previews: PreviewRepository
    submissions: SubmissionLedger
    jobs: JobRepository
    attempts: AttemptRepository
    members: MemberRepository
    logs: LogRepository


class FleetUnit(Transaction, Protocol):
    """Fleet, policy and reservations: pools, nodes, profiles, users, teams, queues, API tokens,
    launch reservations and pool checks."""

    fleet: FleetRepository
    policy: PolicyRepository
    tokens: TokenRepository
    reservations: ReservationRepository
    checks: CheckRepository


class NodesUnit(Transaction, Protocol):
    """Nodes and launches (the node backend): enrollment, control links, node events, the
    launch ledger and output scans."""

    enrollment: EnrollmentRepository
    links: NodeLinkRepository
    node_events: NodeEventRepository
    launches: LaunchLedger
    output_scans: OutputScanRepository


class ArtifactsUnit(Transaction, Protocol):
    """Plugins and artifacts: recorded artifacts, published plugins, registered runtimes and the
    references that keep blobs alive."""

    artifacts: ArtifactRepository
    checkpoints: CheckpointRepository
    plugins: PluginRepository
    runtimes: RuntimeRepository
    blob_refs: BlobReferences


class PlacementUnit(JobsUnit, FleetUnit, Protocol):
    """Jobs with their reservations: launching, ending, requeueing, releasing by hand."""


class AdmissionUnit(PlacementUnit, Protocol):
    """Admission: a snapshot of pending jobs and free capacity, and storing placements (jobs
    to starting, attempts, members and reservations in one transaction)."""

    scheduling: SchedulingRepository


class NodeFleetUnit(NodesUnit, FleetUnit, Protocol):
    """A node's record in the fleet with its enrollment, link, events and scans."""


class JobNodesUnit(JobsUnit, NodesUnit, Protocol):
    """A job with its members' launches on nodes (job details)."""


class GangUnit(PlacementUnit, NodesUnit, Protocol):
    """A gang on nodes: its launches, its jobs and reservations, its nodes' links."""


class JobArtifactsUnit(JobsUnit, ArtifactsUnit, Protocol):
    """A job with its artifacts or the plugins it uses."""


class OutcomeUnit(PlacementUnit, ArtifactsUnit, Protocol):
    """A member's outcome: its state, log and artifacts, and its reservation's release."""


class UnitOfWork(AdmissionUnit, NodesUnit, ArtifactsUnit, Protocol):
    """Every repository in one transaction: what an adapter implements (MemoryUnitOfWork,
    PostgresUnitOfWork). Use cases open a narrower view through ``Units``."""


UnitOfWorkFactory = Callable[[], UnitOfWork]


@dataclass(frozen=True, slots=True)
class Units:
    """Opens a unit of work typed as one context (or a named composition). Every method opens
    the same kind of transaction; only what the caller may touch differs."""

    open: UnitOfWorkFactory

    def jobs(self) -> JobsUnit:
        return self.open()

    def fleet(self) -> FleetUnit:
        return self.open()

    def nodes(self) -> NodesUnit:
        return self.open()

    def artifacts(self) -> ArtifactsUnit:
        return self.open()

    def placement(self) -> PlacementUnit:
        return self.open()

    def admission(self) -> AdmissionUnit:
        return self.open()

    def node_fleet(self) -> NodeFleetUnit:
        return self.open()

    def job_nodes(self) -> JobNodesUnit:
        return self.open()

    def gang(self) -> GangUnit:
        return self.open()

    def job_artifacts(self) -> JobArtifactsUnit:
        return self.open()

    def outcome(self) -> OutcomeUnit:
        return self.open()
