"""What every use case needs, gathered in one plain value (built by an entrypoint or a test)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from application.instruments import NO_INSTRUMENTS, Instruments
from domain.artifact_ports import CheckpointsInPlace, CheckpointStorage, OutputStorage
from domain.backend_ports import Backend, CapacityReporter, CoordinatedBackend, ExecutionBackend
from domain.blob_ports import BlobStore
from domain.catalog import Catalog
from domain.coordination_ports import NO_SIGNALS, Signals
from domain.errors import InvalidInput, Unavailable
from domain.ports import Clock, Ids
from domain.secret_ports import SecretBox
from domain.telemetry_ports import MetricsStore, TokenSigner
from domain.unit_of_work import UnitOfWorkFactory, Units
from domain.webhook_ports import WebhookSender, WebhookStore
from domain.webhooks import Retry


@dataclass(frozen=True, slots=True)
class Limits:
    preview_ttl: timedelta = timedelta(hours=1)
    max_archive_bytes: int = 64 * 1024 * 1024
    max_archive_unpacked_bytes: int = 1024 * 1024 * 1024  # what a source archive unpacks to
    max_log_bytes: int = 16 * 1024 * 1024
    stop_grace_seconds: float = 10.0
    list_limit_max: int = 500
    # unused blobs younger than this are kept (application/blob_gc.py)
    blob_grace: timedelta = timedelta(days=1)
    max_checkpoint_file_bytes: int = 256 * 1024**3  # one file of a checkpoint, in the blob store
    # running attempts' complete checkpoints are kept in the blob store this often (local)
    checkpoint_harvest: timedelta = timedelta(seconds=15)


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    token_lifetime: timedelta = timedelta(days=30)
    grace: timedelta = timedelta(minutes=10)  # after an attempt ended, its tokens still ship


@dataclass(frozen=True, slots=True)
class Notifications:
    """Webhooks on job state changes (docs/notifications.md): the subscriptions and their
    outbox, the sender, and how deliveries are timed and retried."""

    store: WebhookStore
    sender: WebhookSender
    retry: Retry = field(default_factory=Retry)
    timeout: timedelta = timedelta(seconds=10)  # one send, connection to answer
    poll: timedelta = timedelta(seconds=5)  # the outbox is read this often without a wake-up
    allow_loopback: bool = False  # receivers on this host's loopback may be subscribed
    allow_private: bool = True  # receivers on private networks may be subscribed
    jitter: Callable[[], float] = lambda: 0.5  # a number in [0, 1): spreads retries apart
    batch: int = 32  # rows claimed (and sent at once) per pass
    retention: timedelta = timedelta(days=7)  # delivered and dead rows are kept this long
    secrets: SecretBox | None = None  # seals signing secrets at rest; None: none can be made


NO_CATALOG = Catalog(methods=())  # a process that resolves no submission


@dataclass(frozen=True, slots=True)
class Context:
    uow: UnitOfWorkFactory
    clock: Clock
    ids: Ids
    new_secret: Callable[[], str]
    # what a process that resolves and runs submissions has (the API's; the simulator's)
    catalog: Catalog = NO_CATALOG
    # backends by name, each registered under the port it keeps (domain/backend_ports.py),
    # which is what the use cases dispatch on: here those that run members one by one
    backends: Mapping[str, ExecutionBackend] = field(default_factory=dict)  # none: runs nothing
    blobs: BlobStore | None = None  # None: this process keeps no blobs (`tp up`'s set-up steps)
    limits: Limits = Limits()
    signals: Signals = NO_SIGNALS
    metrics: MetricsStore | None = None  # None: this process serves no metrics
    tokens: TokenSigner | None = None  # None: members get no collector token
    telemetry: TelemetrySettings = TelemetrySettings()
    outputs: OutputStorage | None = None  # None: members' outputs are not kept here
    # None: members get no checkpoint directory from this host (docs/checkpoints.md)
    checkpoints: CheckpointStorage | None = None
    # backends whose members' outputs live in the backend's own storage, which this control
    # plane reads too (Slurm: its shared directory), by backend name
    backend_outputs: Mapping[str, OutputStorage] = field(default_factory=dict)
    # backends whose members keep checkpoints in the backend's own storage, where the next
    # attempt reads them in place and this control plane reads too (Slurm: its shared
    # directory), by backend name (application/checkpoints_in_place.py)
    backend_checkpoints: Mapping[str, CheckpointsInPlace] = field(default_factory=dict)
    # two-phase backends (the node backend): the gang coordinator launches their members
    coordinated: Mapping[str, CoordinatedBackend] = field(default_factory=dict)
    # backends whose own scheduler reports their pools and nodes (Slurm), by backend name
    capacity: Mapping[str, CapacityReporter] = field(default_factory=dict)
    notifications: Notifications | None = None  # None: this process sends no webhooks
    # where use cases report their own measurements (docs/operations.md#metrics); none: kept
    instruments: Instruments = NO_INSTRUMENTS

    @property
    def units(self) -> Units:
        """Open a unit of work typed as the bounded context a use case touches
        (``async with ctx.units.jobs() as uow``); see domain/unit_of_work.py."""
        return Units(self.uow)

    def __post_init__(self) -> None:
        both = sorted(set(self.backends) & set(self.coordinated))
        if both:
            raise ValueError(f"backend {', '.join(both)} is registered under two ports")

    def outputs_of(self, backend: Backend) -> OutputStorage | None:
        """Where ``backend``'s members write outputs recorded as artifacts: the backend's own
        storage, else this control plane's when the backend shares outputs, else nowhere."""
        own = self.backend_outputs.get(backend.name)
        if own is not None:
            return own
        return self.outputs if backend.storage.shared_outputs else None

    def checkpoints_of(self, backend: Backend) -> CheckpointStorage | None:
        """Where ``backend``'s members keep checkpoints on this host: here, when its members
        mount this host's directories (it shares outputs) and this process keeps blobs."""
        if backend.storage.shared_outputs and self.blobs is not None:
            return self.checkpoints
        return None

    def blob_store(self) -> BlobStore:
        """The blob store; Unavailable in a process built without one (a bug of its wiring)."""
        if self.blobs is None:
            raise Unavailable(
                "this process keeps no blobs",
                fix="ask the control plane (`tp serve`, `tp up`) or the node gateway",
            )
        return self.blobs

    def backend(self, name: str) -> Backend:
        """The enabled backend ``name``, whichever port it keeps (to pin runtimes, read its
        storage capabilities)."""
        direct = self.direct(name)
        return direct if direct is not None else self.coordinated[name]

    def direct(self, name: str) -> ExecutionBackend | None:
        """The backend ``name`` if it runs members one by one; None if it is coordinated (its
        members are the gang coordinator's). Raises InvalidInput if it is not enabled."""
        if name in self.backends:
            return self.backends[name]
        if name not in self.coordinated:
            raise InvalidInput(
                f"backend {name!r} is not enabled on this control plane",
                fix="choose a profile served by an enabled backend: "
                + ", ".join(sorted({*self.backends, *self.coordinated})),
                field="intent.profiles",
            )
        return None
