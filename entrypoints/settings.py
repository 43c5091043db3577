"""The settings of TunePlane's own processes: one typed model, read once by the one loader
(``entrypoints.settings_loader``: environment, then ``TUNEPLANE_SETTINGS_FILE``, then the defaults
below). ``Settings`` holds what the control plane's processes (`tp up`, `tp serve`, the
gateways) share; ``entrypoints.settings_sections`` holds the other sections (Slurm, Kubernetes,
the node daemon, the CLI, the embedded PostgreSQL, image builds, supervision). The table in
docs/operations.md#settings is generated from these classes (``python -m
entrypoints.settings_doc``). Nothing else reads a setting from the environment (a ruff rule,
TID251, enforces it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from adapters.blobs_s3_location import S3Location  # no SDK: S3 is an optional extra
from application.context import Limits
from entrypoints import settings_parse
from entrypoints.settings_loader import (
    Port,
    Positive,
    Seconds,
    StoreGroups,
    load,
    section,
    var,
    xdg,
)
from entrypoints.settings_sections import (
    BuildSettings,
    KubernetesSettings,
    LoggingSettings,
    PostgresSettings,
    SlurmSettings,
)
from entrypoints.settings_webhooks import WebhookSettings

DEFAULT_DOCKER_SOCKET = "/var/run/tuneplane-docker/docker.sock"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/tuneplane`` (``~/.local/state/tuneplane``)."""
    return xdg(environ, "XDG_STATE_HOME", ".local/state") / "tuneplane"


def default_docker_host(environ: Mapping[str, str] | None = None) -> str | None:
    """``$DOCKER_HOST``, else TunePlane's private engine when its socket exists."""
    environ = os.environ if environ is None else environ
    if environ.get("DOCKER_HOST"):
        return environ["DOCKER_HOST"]
    if Path(DEFAULT_DOCKER_SOCKET).exists():
        return "unix://" + DEFAULT_DOCKER_SOCKET
    return None


@section
@dataclass(frozen=True)
class Settings:
    # -- general
    state_dir: Path = var(
        default_factory=default_state_dir,
        env="TUNEPLANE_STATE_DIR",
        section="general",
        default_doc="`$XDG_STATE_HOME/tuneplane` (`~/.local/state/tuneplane`)",
        doc="embedded PostgreSQL (`postgres/`), blob store (`blobs/`: source archives and Job "
        "Capsules), members' output directories on the local backend (`outputs/<job>/<attempt>/"
        "<member index>/`), the first admin token (`admin-token`, 0600), the dev PKI (`pki/`)",
    )
    fleet_file: Path | None = var(
        None,
        env="TUNEPLANE_FLEET_FILE",
        section="general",
        doc="a fleet file (pools, nodes, profiles, teams, queues; see [fleet.md](fleet.md)) "
        "applied at every start, all or nothing; without it an empty system gets the `local` "
        "pool and the `default` team and queue",
    )
    # the backend of the pool an empty system gets (`tp up` uses its local node daemon)
    default_backend: str = var(
        "local",
        env="TUNEPLANE_DEFAULT_BACKEND",
        section="general",
        default_doc="`node` under `tp up`, else `local`",
        doc="the backend of the `local` pool made on an empty system",
    )
    # wake-up hints between processes over LISTEN/NOTIFY (off: every loop only polls)
    signals: bool = var(
        True,
        env="TUNEPLANE_SIGNALS",
        section="general",
        parse=settings_parse.signals,
        default_doc="`on`",
        doc="wake-up hints between processes over PostgreSQL `LISTEN/NOTIFY` (the coordinator "
        "and the node gateways wake each other; see [benchmarks.md](benchmarks.md)); `off` "
        "where LISTEN does not work (PgBouncer in transaction mode): every loop then only polls",
    )
    # -- database
    database_url: str | None = var(
        None,
        env="TUNEPLANE_DATABASE_URL",
        section="database",
        secret=True,
        default_doc="unset → embedded (`tp up`)",
        doc="any PostgreSQL URL (`postgresql://user:pw@host:port/db`); the driver is asyncpg",
    )
    db_pool_size: Positive = var(
        20,
        env="TUNEPLANE_DB_POOL_SIZE",
        section="database",
        doc="connections per API process (no overflow)",
    )
    admission_store_groups: StoreGroups = var(
        1,
        env="TUNEPLANE_ADMISSION_STORE_GROUPS",
        section="database",
        doc="connections the leader stores one admission pass on at once: its placements split "
        "into this many groups that share no node, one transaction each (1 to 8; below "
        "`TUNEPLANE_DB_POOL_SIZE`). 1 is one after another; more spreads PostgreSQL's work over "
        "cores when a pass places many jobs ([scheduling.md](scheduling.md#storing-a-pass-on-"
        "several-connections))",
    )
    db_keepalive_seconds: Positive = var(
        60,
        env="TUNEPLANE_DB_KEEPALIVE_SECONDS",
        section="database",
        doc="how soon PostgreSQL ends the sessions of a process whose host was cut off (TCP "
        "keepalives: silent half of it, then three probes), freeing its leader lease and its "
        "open transactions' locks ([operations.md](operations.md#several-api-processes))",
    )
    # -- docker
    docker_host: str | None = var(
        default_factory=default_docker_host,
        env="DOCKER_HOST",
        section="docker",
        default_doc="`unix:///var/run/tuneplane-docker/docker.sock` when it exists",
        doc="the container engine of the `local` backend and of runtime builds",
    )
    # -- api
    host: str = var(
        "127.0.0.1", env="TUNEPLANE_HTTP_HOST", section="api", doc="where the API listens"
    )
    port: Port = var(
        8470,
        env="TUNEPLANE_HTTP_PORT",
        section="api",
        doc="the API's port (`tp up --port`, `tp serve --port`)",
    )
    console_dir: Path | None = var(
        None,
        env="TUNEPLANE_CONSOLE_DIR",
        section="console",
        default_doc="unset → the package's `console_dist/`",
        doc="a directory holding a built web console ([console.md](console.md))",
    )
    # -- node gateway (docs/node-backend.md, docs/tls.md)
    node_gateway_host: str = var(
        "127.0.0.1",
        env="TUNEPLANE_NODE_GATEWAY_HOST",
        section="node-gateway",
        doc="where the node control gateway listens",
    )
    node_gateway_port: Port = var(
        8471,
        env="TUNEPLANE_NODE_GATEWAY_PORT",
        section="node-gateway",
        doc="the node control gateway's port",
    )
    node_gateway_share_port: bool = var(
        False,
        env="TUNEPLANE_NODE_GATEWAY_SHARE_PORT",
        section="node-gateway",
        doc="`true`: several node gateway processes listen on the same host and port (each with "
        "it true; SO_REUSEPORT), the kernel spreading new connections between them "
        "([node-backend.md](node-backend.md#several-gateways-on-one-address))",
    )
    gateway_cert: Path | None = var(
        None,
        env="TUNEPLANE_GATEWAY_CERT",
        section="tls",
        exists=True,
        default_doc="unset → dev PKI in `<state>/pki`",
        doc="the gateways' TLS certificate ([tls.md](tls.md))",
    )
    gateway_key: Path | None = var(
        None,
        env="TUNEPLANE_GATEWAY_KEY",
        section="tls",
        exists=True,
        default_doc="unset → dev PKI in `<state>/pki`",
        doc="the gateways' TLS key",
    )
    ca_file: Path | None = var(
        None,
        env="TUNEPLANE_CA_FILE",
        section="tls",
        exists=True,
        default_doc="unset → dev PKI in `<state>/pki`",
        doc="the CA nodes are told to trust",
    )
    heartbeat_seconds: Positive = var(
        5,
        env="TUNEPLANE_HEARTBEAT_SECONDS",
        section="node-gateway",
        doc="node heartbeat interval; a stream silent for three is cut off; a node session "
        "silent for `max(6 ×, the floor below)` is dead even if its gateway never closed it "
        "([node-backend.md](node-backend.md#one-session-per-node))",
    )
    node_session_floor_seconds: Positive = var(
        30,
        env="TUNEPLANE_NODE_SESSION_FLOOR_SECONDS",
        section="node-gateway",
        fix="set TUNEPLANE_NODE_SESSION_FLOOR_SECONDS to whole seconds, at least 1, or unset it",
        doc="the least time a node session whose heartbeats stopped stays alive, and a gang's "
        "link to its gateway; the limit is `max(6 × TUNEPLANE_HEARTBEAT_SECONDS, this)`",
    )
    prepare_timeout_seconds: Positive = var(
        300,
        env="TUNEPLANE_PREPARE_TIMEOUT_SECONDS",
        section="node-gateway",
        doc="a gang member silent this long while preparing aborts the launch (retried)",
    )
    rendezvous_ports: range = var(
        range(29500, 30000),
        env="TUNEPLANE_RENDEZVOUS_PORTS",
        section="node-gateway",
        parse=settings_parse.port_range,
        default_doc="`29500-29999`",
        doc="the host ports a gang's rendezvous (torch `MASTER_PORT`, Ray's GCS) is given on its "
        "first node, `FIRST-LAST`; control planes sharing hosts get ranges of their own",
    )
    node_lost_after_seconds: Seconds = var(
        0,
        env="TUNEPLANE_NODE_LOST_AFTER_SECONDS",
        section="node-gateway",
        default_doc="`0` (never)",
        doc="fence a node disconnected this long; 0: only an operator fences",
    )
    credential_rotate_seconds: Positive = var(
        86400,
        env="TUNEPLANE_CREDENTIAL_ROTATE_SECONDS",
        section="node-gateway",
        doc="rotate a node credential older than this when it connects",
    )
    credential_grace_seconds: Seconds = var(
        600,
        env="TUNEPLANE_CREDENTIAL_GRACE_SECONDS",
        section="node-gateway",
        doc="refuse a rotated node credential this long after the rotation",
    )
    # -- telemetry (docs/telemetry.md)
    telemetry_gateway_host: str = var(
        "127.0.0.1",
        env="TUNEPLANE_TELEMETRY_GATEWAY_HOST",
        section="telemetry",
        doc="where the telemetry gateway listens (same certificate settings as the node gateway)",
    )
    telemetry_gateway_port: Port = var(
        8472,
        env="TUNEPLANE_TELEMETRY_GATEWAY_PORT",
        section="telemetry",
        doc="the telemetry gateway's port",
    )
    telemetry_gateway_share_port: bool = var(
        False,
        env="TUNEPLANE_TELEMETRY_GATEWAY_SHARE_PORT",
        section="telemetry",
        doc="let several telemetry gateway processes on this host listen on the same port "
        "(SO_REUSEPORT: the kernel spreads collectors' connections between them; a collector "
        "whose gateway dies reconnects to a live one and resends what was not acknowledged)",
    )
    telemetry_grace_seconds: Seconds = var(
        600,
        env="TUNEPLANE_TELEMETRY_GRACE_SECONDS",
        section="telemetry",
        doc="how long after its attempt ended a member's collector may still ship what it "
        "read; later batches are refused",
    )
    telemetry_compact_seconds: Seconds = var(
        60,
        env="TUNEPLANE_TELEMETRY_COMPACT_SECONDS",
        section="telemetry",
        doc="how often the telemetry gateway merges the small raw-point blocks of slow "
        "collectors (one gateway at a time; `0`: never)",
    )
    collector_token_seconds: Positive = var(
        30 * 86400,
        env="TUNEPLANE_COLLECTOR_TOKEN_SECONDS",
        section="telemetry",
        doc="lifetime of the collector token issued for each member at launch",
    )
    signing_key_rotate_seconds: Positive = var(
        7 * 86400,
        env="TUNEPLANE_SIGNING_KEY_ROTATE_SECONDS",
        section="telemetry",
        doc="a new signing key for collector tokens when the newest is older; old keys verify "
        "until their tokens expire",
    )
    # -- blobs (docs/operations.md#blobs-on-a-filesystem-or-in-s3)
    blob_store: str = var(
        "",
        env="TUNEPLANE_BLOB_STORE",
        section="blobs",
        parse=settings_parse.blob_store,
        default_doc="unset → `<state>/blobs`",
        doc="where blobs (source archives, Job Capsules, plugin packages) live: an absolute "
        "directory (`/mnt/shared/blobs`, or `file:///…`), or `s3://BUCKET/PREFIX/` "
        "([below](#blobs-on-a-filesystem-or-in-s3))",
    )
    s3_endpoint_url: str | None = var(
        None,
        env="TUNEPLANE_S3_ENDPOINT_URL",
        section="blobs",
        parse=settings_parse.endpoint_url,
        default_doc="unset → AWS (or `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`)",
        doc="the S3 API's URL for MinIO, Ceph RGW, SeaweedFS, ... "
        "(`https://minio.example.org:9000`)",
    )
    s3_region: str | None = var(
        None,
        env="TUNEPLANE_S3_REGION",
        section="blobs",
        default_doc="unset → `AWS_DEFAULT_REGION` / the AWS config, else `us-east-1`",
        doc="the region requests are signed for (the bucket's region on AWS; usually any "
        "value for others)",
    )
    s3_addressing_style: str | None = var(
        None,
        env="TUNEPLANE_S3_ADDRESSING_STYLE",
        section="blobs",
        parse=settings_parse.addressing_style,
        default_doc="`path` with `TUNEPLANE_S3_ENDPOINT_URL`, else `auto`",
        doc="`path` (`https://host/bucket/key`) or `virtual` (`https://bucket.host/key`)",
    )
    blob_gc_seconds: Seconds = var(
        3600,
        env="TUNEPLANE_BLOB_GC_SECONDS",
        section="blobs",
        doc="how often `tp serve` deletes the blobs nothing refers to (`0`: never; "
        "[below](#blob-garbage-collection))",
    )
    blob_gc_grace_seconds: Seconds = var(
        86400,
        env="TUNEPLANE_BLOB_GC_GRACE_SECONDS",
        section="blobs",
        doc="blobs younger than this are never collected",
    )
    checkpoint_harvest_seconds: Positive = var(
        15,
        env="TUNEPLANE_CHECKPOINT_HARVEST_SECONDS",
        section="blobs",
        doc="how often the supervisor keeps the complete checkpoints of running attempts (local "
        "backend) in the blob store, hashing only new ones "
        "([checkpoints.md](checkpoints.md#harvested-while-the-attempt-runs))",
    )
    # -- limits
    preview_ttl_seconds: Positive = var(
        3600,
        env="TUNEPLANE_PREVIEW_TTL_SECONDS",
        section="limits",
        doc="how long a preview can be committed",
    )
    max_archive_bytes: Positive = var(
        64 * 1024 * 1024,
        env="TUNEPLANE_MAX_ARCHIVE_BYTES",
        section="limits",
        default_doc="`67108864` (64 MiB)",
        doc="largest source archive accepted",
    )
    max_archive_unpacked_bytes: Positive = var(
        1024 * 1024 * 1024,
        env="TUNEPLANE_MAX_ARCHIVE_UNPACKED_BYTES",
        section="limits",
        default_doc="`1073741824` (1 GiB)",
        doc="most a source archive may unpack to (its files' sizes added up); a larger one is "
        "refused at upload (413)",
    )
    # -- the sections of the backends and of the embedded PostgreSQL
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    postgres: PostgresSettings = field(default_factory=PostgresSettings)
    build: BuildSettings = field(default_factory=BuildSettings)
    logs: LoggingSettings = field(default_factory=LoggingSettings)  # every process's
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    # the fields the environment or the settings file set (`tp up` defaults some others)
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings from the environment (``os.environ`` by default) and the settings
        file; a bad value stops the process (SystemExit) naming the variable and the fix."""
        import dataclasses

        from entrypoints.settings_loader import load_entries

        settings, entries = load_entries(cls, environ)
        explicit = frozenset(e.name for e in entries if e.source != "default")
        return dataclasses.replace(settings, explicit=explicit)

    @property
    def limits(self) -> Limits:
        return Limits(
            preview_ttl=timedelta(seconds=self.preview_ttl_seconds),
            max_archive_bytes=self.max_archive_bytes,
            max_archive_unpacked_bytes=self.max_archive_unpacked_bytes,
            blob_grace=timedelta(seconds=self.blob_gc_grace_seconds),
            checkpoint_harvest=timedelta(seconds=self.checkpoint_harvest_seconds),
        )

    @property
    def node_session_timeout(self) -> timedelta:
        """When a silent node session is dead (its gateway may have died), and its gang link."""
        return timedelta(seconds=max(6 * self.heartbeat_seconds, self.node_session_floor_seconds))

    @property
    def blob_dir(self) -> Path:
        """The filesystem blob store's directory (unless the blobs live in S3)."""
        if self.blob_store and not self.blob_store.startswith("s3://"):
            return Path(self.blob_store).expanduser()
        return self.state_dir / "blobs"

    @property
    def blob_s3(self) -> S3Location | None:
        """The S3 location of the blobs, or None when they are on a filesystem."""
        if not self.blob_store.startswith("s3://"):
            return None
        return S3Location.parse(self.blob_store)

    @property
    def output_dir(self) -> Path:
        """Members' output directories (local backend), manifested when they complete."""
        return self.state_dir / "outputs"

    @property
    def checkpoint_dir(self) -> Path:
        """Members' checkpoint directories (local backend) until their checkpoints are kept as
        blobs (docs/checkpoints.md)."""
        return self.state_dir / "checkpoints"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


__all__ = ["DEFAULT_DOCKER_SOCKET", "Settings", "default_docker_host", "default_state_dir", "load"]
