"""Process settings, read once from the environment (``TUNEPLANE_*``) with embedded defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from application.context import Limits
from domain.errors import InvalidInput

if TYPE_CHECKING:
    from adapters.blobs_s3 import S3Location

DEFAULT_DOCKER_SOCKET = "/var/run/tuneplane-docker/docker.sock"


def _state_dir() -> Path:
    explicit = os.environ.get("TUNEPLANE_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tuneplane"


def _docker_host() -> str | None:
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    if Path(DEFAULT_DOCKER_SOCKET).exists():
        return "unix://" + DEFAULT_DOCKER_SOCKET
    return None


def _fleet_file() -> Path | None:
    raw = os.environ.get("TUNEPLANE_FLEET_FILE")
    return Path(raw).expanduser() if raw else None


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(
            f"error: {name}={raw!r} is not an integer (fix: set a whole number)"
        ) from None


def _signals() -> bool:
    raw = os.environ.get("TUNEPLANE_SIGNALS", "on")
    if raw not in ("on", "off"):
        raise SystemExit(
            f"error: TUNEPLANE_SIGNALS={raw!r} is neither on nor off (fix: set on, or off "
            "where LISTEN/NOTIFY does not work, e.g. behind PgBouncer in transaction mode)"
        )
    return raw == "on"


def _blob_store() -> str:
    """TUNEPLANE_BLOB_STORE: empty (the state directory's blobs/), a directory (a shared mount
    too), or ``s3://bucket/prefix/``; checked here so that a bad value stops the process."""
    raw = os.environ.get("TUNEPLANE_BLOB_STORE", "").strip()
    if raw.startswith("s3://"):
        from adapters.blobs_s3 import S3Location  # only where S3 is used: the SDK is big

        try:
            S3Location.parse(raw)
        except InvalidInput as exc:
            raise SystemExit(
                f"error: TUNEPLANE_BLOB_STORE: {exc.message} (fix: {exc.fix})"
            ) from None
        return raw
    path = raw.removeprefix("file://")
    if path and not Path(path).expanduser().is_absolute():
        raise SystemExit(
            f"error: TUNEPLANE_BLOB_STORE={raw!r} is neither an absolute directory nor an "
            "s3:// URL (fix: set /path/to/blobs, s3://BUCKET/PREFIX/, or leave it unset for "
            "the state directory's blobs/)"
        )
    return path


def _endpoint_url() -> str | None:
    raw = os.environ.get("TUNEPLANE_S3_ENDPOINT_URL", "").strip()
    if raw and not raw.startswith(("http://", "https://")):
        raise SystemExit(
            f"error: TUNEPLANE_S3_ENDPOINT_URL={raw!r} is not an http(s) URL (fix: e.g. "
            "https://minio.example.org:9000, or unset for AWS)"
        )
    return raw or None


def _addressing_style() -> str | None:
    raw = os.environ.get("TUNEPLANE_S3_ADDRESSING_STYLE", "").strip()
    if raw and raw not in ("auto", "path", "virtual"):
        raise SystemExit(
            f"error: TUNEPLANE_S3_ADDRESSING_STYLE={raw!r} is not auto, path or virtual (fix: "
            "path for most S3-compatible servers, virtual or auto for AWS)"
        )
    return raw or None


def _path(name: str) -> Path | None:
    raw = os.environ.get(name)
    return Path(raw).expanduser() if raw else None


@dataclass(frozen=True)
class Settings:
    state_dir: Path = field(default_factory=_state_dir)
    database_url: str | None = field(
        default_factory=lambda: os.environ.get("TUNEPLANE_DATABASE_URL")
    )
    docker_host: str | None = field(default_factory=_docker_host)
    host: str = field(default_factory=lambda: os.environ.get("TUNEPLANE_HTTP_HOST", "127.0.0.1"))
    port: int = field(default_factory=lambda: _int("TUNEPLANE_HTTP_PORT", 8470))
    db_pool_size: int = field(default_factory=lambda: _int("TUNEPLANE_DB_POOL_SIZE", 20))
    fleet_file: Path | None = field(default_factory=_fleet_file)
    # wake-up hints between processes over LISTEN/NOTIFY (off: every loop only polls)
    signals: bool = field(default_factory=_signals)
    # the backend of the pool an empty system gets (`tp up` uses its local node daemon)
    default_backend: str = field(
        default_factory=lambda: os.environ.get("TUNEPLANE_DEFAULT_BACKEND", "local")
    )
    # The node control gateway (docs/node-backend.md, docs/tls.md)
    node_gateway_host: str = field(
        default_factory=lambda: os.environ.get("TUNEPLANE_NODE_GATEWAY_HOST", "127.0.0.1")
    )
    node_gateway_port: int = field(
        default_factory=lambda: _int("TUNEPLANE_NODE_GATEWAY_PORT", 8471)
    )
    gateway_cert: Path | None = field(default_factory=lambda: _path("TUNEPLANE_GATEWAY_CERT"))
    gateway_key: Path | None = field(default_factory=lambda: _path("TUNEPLANE_GATEWAY_KEY"))
    ca_file: Path | None = field(default_factory=lambda: _path("TUNEPLANE_CA_FILE"))
    heartbeat_seconds: int = field(default_factory=lambda: _int("TUNEPLANE_HEARTBEAT_SECONDS", 5))
    prepare_timeout_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_PREPARE_TIMEOUT_SECONDS", 300)
    )
    node_lost_after_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_NODE_LOST_AFTER_SECONDS", 0)
    )  # 0: nodes are fenced only by an operator
    credential_rotate_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_CREDENTIAL_ROTATE_SECONDS", 86400)
    )
    credential_grace_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_CREDENTIAL_GRACE_SECONDS", 600)
    )
    # The telemetry gateway and collector tokens (docs/telemetry.md)
    telemetry_gateway_host: str = field(
        default_factory=lambda: os.environ.get("TUNEPLANE_TELEMETRY_GATEWAY_HOST", "127.0.0.1")
    )
    telemetry_gateway_port: int = field(
        default_factory=lambda: _int("TUNEPLANE_TELEMETRY_GATEWAY_PORT", 8472)
    )
    # how long after its attempt ended a member's collector may still ship what it read
    telemetry_grace_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_TELEMETRY_GRACE_SECONDS", 600)
    )
    # how often the telemetry gateway merges small raw-point blocks (0: never)
    telemetry_compact_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_TELEMETRY_COMPACT_SECONDS", 60)
    )
    collector_token_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_COLLECTOR_TOKEN_SECONDS", 30 * 86400)
    )
    signing_key_rotate_seconds: int = field(
        default_factory=lambda: _int("TUNEPLANE_SIGNING_KEY_ROTATE_SECONDS", 7 * 86400)
    )
    # Where blobs (source archives, Job Capsules, plugin packages) live: "" is
    # <state_dir>/blobs, an absolute directory (a shared mount), or s3://bucket/prefix/ with the
    # TUNEPLANE_S3_* settings below and the AWS SDK's credentials (docs/operations.md)
    blob_store: str = field(default_factory=_blob_store)
    s3_endpoint_url: str | None = field(default_factory=_endpoint_url)  # None: AWS's own
    s3_region: str | None = field(
        default_factory=lambda: os.environ.get("TUNEPLANE_S3_REGION") or None
    )
    s3_addressing_style: str | None = field(default_factory=_addressing_style)
    # how often `tp serve` deletes the blobs nothing refers to (0: never; docs/operations.md)
    blob_gc_seconds: int = field(default_factory=lambda: _int("TUNEPLANE_BLOB_GC_SECONDS", 3600))
    limits: Limits = field(
        default_factory=lambda: Limits(
            preview_ttl=timedelta(seconds=_int("TUNEPLANE_PREVIEW_TTL_SECONDS", 3600)),
            max_archive_bytes=_int("TUNEPLANE_MAX_ARCHIVE_BYTES", 64 * 1024 * 1024),
            max_archive_unpacked_bytes=_int(
                "TUNEPLANE_MAX_ARCHIVE_UNPACKED_BYTES", 1024 * 1024 * 1024
            ),
            blob_grace=timedelta(seconds=_int("TUNEPLANE_BLOB_GC_GRACE_SECONDS", 86400)),
        )
    )

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
        from adapters.blobs_s3 import S3Location

        return S3Location.parse(self.blob_store)

    @property
    def output_dir(self) -> Path:
        """Members' output directories (local backend), manifested when they complete."""
        return self.state_dir / "outputs"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
