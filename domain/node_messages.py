"""The messages of the node control protocol, as both ends' use cases see them.

The gRPC adapter (``adapters/grpc/node_codec.py``) maps them to and from the protobuf messages
of ``proto/node_control.proto``; the simulator passes them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import ResumeFrom
from domain.node_protocol import EngineScan, MemberRef, MemberReport, NodeCapacity


@dataclass(frozen=True, slots=True)
class Hello:
    node: str
    capacity: NodeCapacity
    address: str
    daemon_version: str
    epoch: int  # the highest epoch the node was welcomed with (0: never)
    journal: tuple[MemberReport, ...]  # every member the node holds
    scan: EngineScan | None = None  # its engine listed in full (None: an older daemon)


@dataclass(frozen=True, slots=True)
class Inventory:
    """The node's whole journal and a new full scan of its engine, sent on the open stream when
    a scan completes after the Hello's could not (the engine was down, or the daemon learnt its
    installation only from the Welcome)."""

    scan: EngineScan
    journal: tuple[MemberReport, ...]


@dataclass(frozen=True, slots=True)
class Vote:
    ref: MemberRef
    yes: bool
    reason: str = ""
    # a no for a passing condition of the node (a port or GPU still held, the journal not yet
    # reconciled), not of the job: the launch is aborted and the job queued again
    busy: bool = False


@dataclass(frozen=True, slots=True)
class Progress:
    ref: MemberRef
    stage: str
    fraction: float  # 0..1, or -1 when unknown
    detail: str = ""

    def text(self) -> str:
        share = f" {self.fraction:.0%}" if 0 <= self.fraction <= 1 else ""
        return f"{self.stage}{share}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True, slots=True)
class LogChunk:
    """A piece of a member's output: of its final log (``last`` on the final piece), or with
    ``live`` a piece at byte ``offset`` while it runs."""

    ref: MemberRef
    data: bytes
    last: bool
    truncated: bool = False
    live: bool = False
    offset: int = 0


@dataclass(frozen=True, slots=True)
class OutputsScanned:
    """A node's answer to :class:`ScanOutputs`: the member's output directory hashed again
    (``manifest`` None: the directory is gone), or why the scan failed."""

    request_id: str
    ref: MemberRef
    manifest: Manifest | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointOffer:
    """A member's complete checkpoint, offered by its node to be kept (docs/checkpoints.md)."""

    ref: MemberRef
    job_id: str
    name: str
    step: int | None
    manifest: Manifest


@dataclass(frozen=True, slots=True)
class CredentialAck:
    credential_id: str


# The expiry a re-adopted member's rebuilt journal row reports when it was launched with a
# collector token: the token itself is never kept in labels, so the gateway renews it at once.
TOKEN_LOST = datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class PrepareOrder:
    """Everything a node needs to prepare one member (the Prepare message)."""

    ref: MemberRef
    node: str
    job_id: str
    image: str
    command: tuple[str, ...]
    env: dict[str, str]
    cpus: float
    memory_mb: int
    gpu_indices: tuple[int, ...]
    source_digest: str | None
    members: int
    process_model: str
    check_port: int  # member 0 of a gang: the rendezvous port that must be free; else 0
    # for the node's collector only, never the workload (docs/telemetry.md); "": no metrics
    collector_token: str = ""
    # the blob under source_digest is the Job Capsule's tar (unpacked at "/"; the command runs
    # its runner), not a source archive (unpacked into the working directory)
    capsule: bool = False
    collector_token_expires_at: datetime | None = None  # when collector_token expires
    # the control plane's installation (docs/node-backend.md): set by the node, in its labels
    installation: str = ""
    attempt: int = 0  # the attempt's number (0: from a control plane before checkpoints)
    # the checkpoint its members resume from, fetched and verified before the vote
    # (docs/checkpoints.md); None: none recorded by an earlier attempt
    resume: ResumeFrom | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    sent_unix_ms: int


@dataclass(frozen=True, slots=True)
class Welcome:
    epoch: int
    heartbeat_seconds: int
    server_unix_ms: int
    installation: str = ""  # the control plane's installation id (labels the node's containers)


@dataclass(frozen=True, slots=True)
class HeartbeatAck:
    sent_unix_ms: int


@dataclass(frozen=True, slots=True)
class SourceChunk:
    digest: str
    offset: int
    data: bytes
    last: bool


@dataclass(frozen=True, slots=True)
class Rotation:
    credential: str
    credential_id: str
    old_valid_until: datetime


@dataclass(frozen=True, slots=True)
class ScanOutputs:
    """Hash a member's output directory again (``tp artifacts verify``): its files live on the
    node, so the node answers with :class:`OutputsScanned`."""

    request_id: str
    ref: MemberRef
    job_id: str


@dataclass(frozen=True, slots=True)
class FetchOutput:
    """Send one file of a member's recorded outputs (a download of a file kept on the node):
    the node answers with a ``PutOutputFile`` call naming ``request_id``, its content the
    file's, or the reason it cannot (docs/capsule.md#on-the-node-backend)."""

    request_id: str
    ref: MemberRef
    job_id: str
    file: ArtifactFile  # as the member's manifest recorded it


@dataclass(frozen=True, slots=True)
class TokenRenewal:
    """A newer collector token for a started member whose run outlives its token: the node
    journals it and hands it to its collector only, never to the workload."""

    ref: MemberRef
    token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Refused:
    seq: int
    reason: str
