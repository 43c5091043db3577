"""The settings sections besides the control plane's shared ``Settings``: the Slurm and
Kubernetes backends, the node daemon, the CLI's login, the embedded PostgreSQL, runtime image
builds and the supervision contract between `tp up` and its children. Loaded by the same loader
(``entrypoints.settings_loader.load``); documented by the same generated table."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from msgspec import Meta

from domain.errors import InvalidInput
from entrypoints.settings_loader import Port, section, var, xdg

RETRY_MAX_ENV = "TUNEPLANE_NODE_RETRY_MAX_SECONDS"
CONNECT_TIMEOUT_ENV = "TUNEPLANE_NODE_CONNECT_TIMEOUT_SECONDS"
COLLECTOR_RETRY_MAX_ENV = "TUNEPLANE_COLLECTOR_RETRY_MAX_SECONDS"


def _seconds(env: str, low: float, high: float, example: str) -> Callable[[str], float]:
    """A parser of a number of seconds from ``low`` to ``high`` for ``env``."""

    def parse(text: str) -> float:
        text = text.strip()
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not (math.isfinite(value) and low <= value <= high):
            raise InvalidInput(
                f"{env}={text!r} is not a number of seconds between {low:g} and {high:g}",
                fix=f"set {env} to e.g. {example}, or unset it",
                field=env,
            )
        return value

    return parse


_retry_max = _seconds(RETRY_MAX_ENV, 0.1, 600, "10")
_connect_timeout = _seconds(CONNECT_TIMEOUT_ENV, 1, 600, "30")
_collector_retry_max = _seconds(COLLECTOR_RETRY_MAX_ENV, 0.1, 600, "5")


EXECUTORS = ("container", "process")


def _executor(text: str) -> str:
    value = text.strip()
    if value not in EXECUTORS:
        raise InvalidInput(
            f"TUNEPLANE_NODE_EXECUTOR={text!r} is not an executor",
            fix="set it to container or process (or unset it: container)",
            field="TUNEPLANE_NODE_EXECUTOR",
        )
    return value


GPU_SAMPLE_ENV = "TUNEPLANE_GPU_SAMPLE_SECONDS"


def _sample_seconds(text: str) -> float:
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and 0 < value <= 3600):
        raise InvalidInput(
            f"{GPU_SAMPLE_ENV}={text!r} is not a positive number of seconds (at most 3600)",
            fix=f"set {GPU_SAMPLE_ENV} to e.g. 5, or unset it (5)",
            field=GPU_SAMPLE_ENV,
        )
    return value


def _yes(raw: str) -> bool:
    return raw.strip() in ("1", "true", "yes")


@section
@dataclass(frozen=True)
class SlurmSettings:
    """docs/slurm.md#pointing-tuneplane-at-a-slurm-cluster; checked by entrypoints.slurm_wiring."""

    url: str | None = var(
        None,
        env="TUNEPLANE_SLURM_URL",
        section="slurm",
        default_doc="unset: no Slurm backend",
        doc="slurmrestd's address: `unix:/path/slurmrestd.sock` or `http(s)://host:port`",
    )
    shared_dir: str | None = var(
        None,
        env="TUNEPLANE_SLURM_SHARED_DIR",
        section="slurm",
        doc="(required with the URL) an absolute directory every Slurm node and the control "
        "plane mount",
    )
    api_version: str = var(
        "auto",
        env="TUNEPLANE_SLURM_API_VERSION",
        section="slurm",
        doc="`auto` (discovered from `/openapi/v3`), `v0.0.38`, `v0.0.40`, `v0.0.41` or `v0.0.42`",
    )
    user: str | None = var(
        None, env="TUNEPLANE_SLURM_USER", section="slurm", doc="JWT auth: `X-SLURM-USER-NAME`"
    )
    token: str | None = var(
        None,
        env="TUNEPLANE_SLURM_TOKEN",
        section="slurm",
        secret=True,
        doc="JWT auth: `X-SLURM-USER-TOKEN`",
    )
    token_file: str | None = var(
        None,
        env="TUNEPLANE_SLURM_TOKEN_FILE",
        section="slurm",
        doc="a file holding the JWT (`scontrol token`), instead of `TUNEPLANE_SLURM_TOKEN`",
    )
    partitions: str = var(
        "",
        env="TUNEPLANE_SLURM_PARTITIONS",
        section="slurm",
        default_doc="unset: a pool is named after its partition",
        doc="`pool=partition,...`",
    )
    accounting: bool = var(
        False,
        env="TUNEPLANE_SLURM_ACCOUNTING",
        section="slurm",
        parse=_yes,
        default_doc="off",
        doc="`1` to ask slurmdbd (`/slurmdb/...`) about jobs Slurm no longer reports",
    )
    runtimes: str = var(
        "",
        env="TUNEPLANE_SLURM_RUNTIMES",
        section="slurm",
        doc="`runtime=/dir,...`: the directory on the nodes put first on the `PATH` of members "
        "of jobs on that runtime ([slurm.md](slurm.md#runtimes-on-slurm))",
    )
    telemetry_gateway: str | None = var(
        None,
        env="TUNEPLANE_SLURM_TELEMETRY_GATEWAY",
        section="slurm",
        default_doc="unset: Slurm members' metrics are not collected",
        doc="`HOST:PORT` of the telemetry gateway as the Slurm nodes reach it "
        "([slurm.md](slurm.md#metrics-a-collector-per-member))",
    )
    telemetry_ca: str | None = var(
        None,
        env="TUNEPLANE_SLURM_TELEMETRY_CA",
        section="slurm",
        doc="(required with the gateway) the CA (PEM) of the telemetry gateway, as the nodes "
        "see it",
    )
    telemetry_server_name: str | None = var(
        None,
        env="TUNEPLANE_SLURM_TELEMETRY_SERVER_NAME",
        section="slurm",
        doc="the name the telemetry gateway's certificate holds, when not the host",
    )
    collector_command: str | None = var(
        None,
        env="TUNEPLANE_SLURM_COLLECTOR_COMMAND",
        section="slurm",
        default_doc="the `tp` beside this Python",
        doc="the `tp` command the Slurm nodes run",
    )
    collector_spool: str = var(
        "/tmp",
        env="TUNEPLANE_SLURM_COLLECTOR_SPOOL",
        section="slurm",
        doc="a directory on each Slurm node's local disk",
    )
    collector_drain_seconds: Annotated[int, Meta(ge=0, le=3600)] = var(
        60,
        env="TUNEPLANE_SLURM_COLLECTOR_DRAIN_SECONDS",
        section="slurm",
        fix="set it to how long a member may wait for its collector to ship, e.g. 60",
        doc="how long a member waits for its collector to ship",
    )


@section
@dataclass(frozen=True)
class KubernetesSettings:
    config: Path | None = var(
        None,
        env="TUNEPLANE_KUBERNETES_CONFIG",
        section="kubernetes",
        default_doc="unset: no `kubernetes` backend",
        doc="a TOML file mapping pools to namespaces, Kueue LocalQueues and flavors, with the "
        "collector sidecar and the credentials ([kubernetes.md](kubernetes.md#configuration))",
    )
    service_host: str | None = var(
        None,
        env="KUBERNETES_SERVICE_HOST",
        section="kubernetes",
        default_doc="set by Kubernetes in a pod",
        doc="in a pod (and no kubeconfig named): the pod's service account is used",
    )


def default_node_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    return xdg(environ, "XDG_STATE_HOME", ".local/state") / "tuneplane-node"


@section
@dataclass(frozen=True)
class NodeSettings:
    """`tp node run` (docs/node-backend.md); its flags win over these."""

    join_token: str | None = var(
        None,
        env="TUNEPLANE_JOIN_TOKEN",
        section="node",
        secret=True,
        doc="`tp node run`: the join token, instead of `--join-token`",
    )
    retry_max_seconds: float = var(
        10.0,
        env=RETRY_MAX_ENV,
        section="node",
        parse=_retry_max,
        doc="`tp node run`: the longest pause between two attempts to reconnect to the gateway "
        "(0.1 to 600; [node-backend.md](node-backend.md#reconnects))",
    )
    connect_timeout_seconds: float = var(
        30.0,
        env=CONNECT_TIMEOUT_ENV,
        section="node",
        parse=_connect_timeout,
        doc="`tp node run`: how long a new stream waits for the gateway's Welcome before it is "
        "given up and tried again (1 to 600)",
    )
    docker_host: str | None = var(
        None,
        env="DOCKER_HOST",
        section="node",
        default_doc="the engine's default socket",
        doc="`tp node run`: the container engine (`--docker-host` wins)",
    )
    executor: str = var(
        "container",
        env="TUNEPLANE_NODE_EXECUTOR",
        section="node",
        parse=_executor,
        doc="`tp node run` and `tp up`: `container` (members in the container engine) or "
        "`process` (members as host processes; [node-backend.md](node-backend.md#host-processes))",
    )
    runtimes: str = var(
        "",
        env="TUNEPLANE_NODE_RUNTIMES",
        section="node",
        doc="`runtime=/dir,...`: with `--executor process`, the directory put first on the "
        "`PATH` of members of jobs on that runtime (`--runtime-dir` adds to it)",
    )
    member_user: str | None = var(
        None,
        env="TUNEPLANE_NODE_MEMBER_USER",
        section="node",
        default_doc="`tuneplane-member` (made if missing)",
        doc="`tp node run --executor process` as root: the unprivileged account members run as",
    )
    fake_nvml: str | None = var(
        None,
        env="TUNEPLANE_FAKE_NVML",
        section="node",
        doc="TESTS AND DEMOS ONLY: a recorded `nvidia-smi -q -x` output (or capture) the node "
        "daemon and its collector read their GPUs from instead of NVML, e.g. "
        "`tests/fixtures/nvml/h200.txt` (logged as a warning; "
        "[fleet.md](fleet.md#gpu-inventory))",
    )
    gpu_sample_seconds: float = var(
        5.0,
        env=GPU_SAMPLE_ENV,
        section="node",
        parse=_sample_seconds,
        doc="`tp collector`: seconds between two samples of each member's GPUs, CPU and memory "
        "(its `system` source; [telemetry.md](telemetry.md#the-system-source))",
    )
    collector_retry_max_seconds: float = var(
        5.0,
        env=COLLECTOR_RETRY_MAX_ENV,
        section="node",
        parse=_collector_retry_max,
        doc="`tp collector`: the longest pause between two attempts to send a member's metrics "
        "while the telemetry gateway cannot be reached (0.1 to 600)",
    )


def default_config_dir() -> Path:
    return Path.home() / ".config" / "tuneplane"


@section
@dataclass(frozen=True)
class CliSettings:
    """The `tp` CLI's login (docs/cli.md)."""

    config_dir: Path = var(
        default_factory=default_config_dir,
        env="TUNEPLANE_CONFIG_DIR",
        section="cli",
        default_doc="`~/.config/tuneplane`",
        doc="where `tp login` keeps `credentials.json`",
    )
    server: str | None = var(
        None,
        env="TUNEPLANE_SERVER",
        section="cli",
        doc="the API's URL; with `TUNEPLANE_TOKEN`, instead of `tp login`'s file",
    )
    token: str | None = var(
        None,
        env="TUNEPLANE_TOKEN",
        section="cli",
        secret=True,
        doc="the API token; with `TUNEPLANE_SERVER`, instead of `tp login`'s file",
    )


@section
@dataclass(frozen=True)
class PostgresSettings:
    """The embedded PostgreSQL `tp up` starts when `TUNEPLANE_DATABASE_URL` is unset."""

    port: Port | None = var(
        None,
        env="TUNEPLANE_PG_PORT",
        section="postgres",
        default_doc="unset → a free port (kept across restarts)",
        doc="the embedded PostgreSQL's port (127.0.0.1 only)",
    )
    bin_dir: Path | None = var(
        None,
        env="TUNEPLANE_PG_BIN",
        section="postgres",
        exists=True,
        default_doc="unset → pgserver's, else Debian's newest",
        doc="a directory holding `initdb`, `pg_ctl`, `postgres`",
    )
    user: str | None = var(
        None,
        env="TUNEPLANE_PG_USER",
        section="postgres",
        default_doc="`postgres` if it exists, else `tuneplane-pg`",
        doc="the account the embedded server runs as when `tp up` runs as root",
    )


def default_image_cache(environ: Mapping[str, str] | None = None) -> Path:
    return xdg(environ, "XDG_CACHE_HOME", ".cache") / "tuneplane" / "images"


@section
@dataclass(frozen=True)
class BuildSettings:
    """Runtime image builds (docs/runtimes.md, `tp runtime build`, deploy/images/build.sh)."""

    image_cache: Path = var(
        default_factory=default_image_cache,
        env="TUNEPLANE_IMAGE_CACHE",
        section="build",
        default_doc="`$XDG_CACHE_HOME/tuneplane/images` (`~/.cache/tuneplane/images`)",
        doc="where runtime builds keep downloaded packages and root filesystems",
    )
    debian_mirror: str | None = var(
        None,
        env="TUNEPLANE_DEBIAN_MIRROR",
        section="build",
        default_doc="unset → the mirror apt uses here",
        doc="the Debian mirror runtime builds download from",
    )


LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]
LogFormat = Literal["text", "json"]


@section
@dataclass(frozen=True)
class LoggingSettings:
    """How every long-running process writes its log (docs/operations.md#logs; set up by
    ``entrypoints.logs.setup``)."""

    level: LogLevel = var(
        "info",
        env="TUNEPLANE_LOG_LEVEL",
        section="logging",
        doc="the lowest level every process logs (`trace`: `debug` and uvicorn's own trace); "
        "uvicorn's and alembic's own lines only from `warning` unless `debug` or `trace`",
    )
    format: LogFormat = var(
        "text",
        env="TUNEPLANE_LOG_FORMAT",
        section="logging",
        doc="`text` (one line per record: time, level, process role, logger, message, then the "
        "ids known as `key=value`) or `json` (one JSON object per line); [Logs](#logs)",
    )


@section
@dataclass(frozen=True)
class SupervisionSettings:
    """What `tp up`'s supervisor tells each child it starts (docs/operations.md#tp-ups-children);
    set by the supervisor, not by hand."""

    ready_file: Path | None = var(
        None,
        env="TUNEPLANE_READY_FILE",
        section="supervision",
        doc="set by the supervisor: where its child writes its pid once it serves",
    )
    parent_pid: Annotated[int, Meta(ge=1)] | None = var(
        None,
        env="TUNEPLANE_PARENT_PID",
        section="supervision",
        doc="set by the supervisor: its pid; the child stops when its parent is gone",
    )
