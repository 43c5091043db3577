"""The Slurm backend from its settings (``SlurmSettings``, docs/slurm.md, "Configuration"):
enabled when ``TUNEPLANE_SLURM_URL`` is set, absent otherwise. The settings model types the
values; the checks that need more than a type (a partition map, a runtime map, the collector's
settings together) are here, at start.

* ``TUNEPLANE_SLURM_URL``: ``unix:/path/slurmrestd.sock`` (rest_auth/local) or
  ``http(s)://host:port``;
* ``TUNEPLANE_SLURM_API_VERSION``: ``auto`` (default: discovered from ``/openapi/v3``),
  ``v0.0.38``, ``v0.0.40``, ``v0.0.41`` or ``v0.0.42``;
* ``TUNEPLANE_SLURM_USER`` and ``TUNEPLANE_SLURM_TOKEN`` (or ``TUNEPLANE_SLURM_TOKEN_FILE``):
  JWT auth (``X-SLURM-USER-NAME``, ``X-SLURM-USER-TOKEN``);
* ``TUNEPLANE_SLURM_SHARED_DIR`` (required): a directory every Slurm node and the control
  plane see;
* ``TUNEPLANE_SLURM_PARTITIONS``: ``pool=partition,...`` (default: a pool is named after its
  partition);
* ``TUNEPLANE_SLURM_ACCOUNTING``: ``1`` to ask slurmdbd (``/slurmdb/...``) about jobs Slurm
  no longer reports;
* metrics (docs/slurm.md, "Metrics"): ``TUNEPLANE_SLURM_TELEMETRY_GATEWAY`` (``HOST:PORT`` as
  the Slurm nodes reach the telemetry gateway; unset: no collector, metrics stay in the
  attempt's directory), ``TUNEPLANE_SLURM_TELEMETRY_CA`` (required with it),
  ``TUNEPLANE_SLURM_TELEMETRY_SERVER_NAME``, ``TUNEPLANE_SLURM_COLLECTOR_COMMAND`` (the ``tp``
  the nodes run; default: the one beside this Python), ``TUNEPLANE_SLURM_COLLECTOR_SPOOL`` (a
  directory on each node's local disk, default ``/tmp``) and
  ``TUNEPLANE_SLURM_COLLECTOR_DRAIN_SECONDS`` (default 60);
* ``TUNEPLANE_SLURM_RUNTIMES``: ``runtime=/dir,...``: the directory on the nodes put first on
  the ``PATH`` of members of jobs on that runtime (its ``python3``: docs/slurm.md, "Runtimes
  on Slurm").
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from adapters.slurm.collector import SlurmCollector
from adapters.system import SystemClock
from domain.errors import InvalidInput
from domain.telemetry_ports import TokenSigner
from entrypoints.process import TELEMETRY_PORT, split_server
from entrypoints.runtime_dirs import runtime_dirs
from entrypoints.settings_loader import SettingExit, load
from entrypoints.settings_sections import SlurmSettings

log = logging.getLogger(__name__)


def _fail(message: str, fix: str) -> SystemExit:
    return SettingExit(message, fix)


def partitions_of(raw: str) -> dict[str, str]:
    """``pool=partition,pool2=partition2`` → {pool: partition}."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        pool, eq, partition = item.partition("=")
        if not eq or not pool.strip() or not partition.strip():
            raise _fail(
                f"TUNEPLANE_SLURM_PARTITIONS item {item!r} is not POOL=PARTITION",
                "write it as pool=partition,pool2=partition2",
            )
        out[pool.strip()] = partition.strip()
    return out


def runtimes_of(raw: str, where: str = "TUNEPLANE_SLURM_RUNTIMES") -> dict[str, str]:
    """``runtime=/dir,runtime2=/dir2`` → {runtime: directory} (``where``: the setting named in
    refusals; the node daemon's ``TUNEPLANE_NODE_RUNTIMES`` reads the same form)."""
    try:
        return runtime_dirs(raw, where)
    except InvalidInput as exc:
        raise _fail(exc.message, exc.fix or "") from None


def _settings(env: Mapping[str, str] | SlurmSettings) -> SlurmSettings:
    return env if isinstance(env, SlurmSettings) else load(SlurmSettings, env, {})


def collector_of(env: Mapping[str, str] | SlurmSettings) -> SlurmCollector | None:
    """The members' collector settings, or None when no telemetry gateway is configured."""
    cfg = _settings(env)
    gateway = (cfg.telemetry_gateway or "").strip()
    if not gateway:
        return None
    try:
        split_server(
            gateway, "TUNEPLANE_SLURM_TELEMETRY_GATEWAY", "the telemetry gateway", TELEMETRY_PORT
        )
    except InvalidInput as exc:
        raise _fail(exc.message, exc.fix or "") from None
    ca = (cfg.telemetry_ca or "").strip()
    if not ca or not Path(ca).is_absolute():
        raise _fail(
            "TUNEPLANE_SLURM_TELEMETRY_GATEWAY needs TUNEPLANE_SLURM_TELEMETRY_CA, an absolute"
            " file",
            "set it to the CA (PEM) that signed the telemetry gateway's certificate",
        )
    spool = cfg.collector_spool.strip()
    if not Path(spool).is_absolute() or any(ch in spool for ch in "\n\0"):
        raise _fail(
            f"TUNEPLANE_SLURM_COLLECTOR_SPOOL {spool!r} is not an absolute directory",
            "set it to a directory on every Slurm node's local disk, e.g. /var/tmp",
        )
    command = (cfg.collector_command or "").strip()
    if not command:
        command = shlex.quote(str(Path(sys.executable).parent / "tp"))
    elif "\n" in command or "\0" in command:
        raise _fail(
            "TUNEPLANE_SLURM_COLLECTOR_COMMAND holds a line break",
            "set it to the `tp` command of the Slurm nodes, e.g. /opt/tuneplane/bin/tp",
        )
    return SlurmCollector(
        gateway=gateway,
        ca=ca,
        command=command,
        spool_root=spool,
        server_name=(cfg.telemetry_server_name or "").strip() or None,
        drain_seconds=cfg.collector_drain_seconds,
    )


def backend_from_env(
    env: Mapping[str, str] | SlurmSettings,
    tokens: TokenSigner | None = None,
    token_lifetime_seconds: int = 30 * 86400,
) -> SlurmBackend | None:
    """The configured Slurm backend (from its settings, or from ``TUNEPLANE_SLURM_*``
    variables), or None when ``TUNEPLANE_SLURM_URL`` is not set. Bad settings stop the process
    with what to fix."""
    cfg = _settings(env)
    url = (cfg.url or "").strip()
    if not url:
        return None
    shared = (cfg.shared_dir or "").strip()
    if not shared or not Path(shared).is_absolute():
        raise _fail(
            "the Slurm backend needs TUNEPLANE_SLURM_SHARED_DIR, an absolute directory",
            "set it to a directory that every Slurm node and this control plane mount",
        )
    token = cfg.token
    token_file = cfg.token_file
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise _fail(
                f"TUNEPLANE_SLURM_TOKEN_FILE {token_file} cannot be read: {exc.strerror}",
                "point it at a file holding the JWT (`scontrol token`)",
            ) from None
    endpoint = SlurmEndpoint(
        url=url,
        version=cfg.api_version.strip(),
        user=cfg.user,
        token=token,
    )
    try:
        client = SlurmClient(endpoint)
    except InvalidInput as exc:
        raise _fail(exc.message, exc.fix or "") from None
    collector = collector_of(cfg) if tokens is not None else None
    runtime_dirs = runtimes_of(cfg.runtimes)
    if collector is None:
        log.warning(
            "the Slurm backend has no telemetry gateway (TUNEPLANE_SLURM_TELEMETRY_GATEWAY):"
            " members' metrics stay in their attempt's directory and are not collected"
        )
    Path(shared).mkdir(parents=True, exist_ok=True)
    return SlurmBackend(
        client,
        Path(shared),
        partitions=partitions_of(cfg.partitions),
        accounting=cfg.accounting,
        collector=collector,
        tokens=tokens,
        clock=SystemClock(),
        token_lifetime_seconds=token_lifetime_seconds,
        runtime_dirs=runtime_dirs,
    )


async def slurm_resource(
    settings: SlurmSettings,
    tokens: TokenSigner | None = None,
    token_lifetime_seconds: int = 30 * 86400,
) -> AsyncIterator[SlurmBackend | None]:
    backend = backend_from_env(settings, tokens, token_lifetime_seconds)
    try:
        yield backend
    finally:
        if backend is not None:
            await backend.close()
