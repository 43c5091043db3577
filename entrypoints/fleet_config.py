"""The fleet file (TOML; docs/fleet.md): its schema, loading with errors that name the path in
the file, and the host's resources for the default local pool.

The same schema is the body of ``POST /v1/fleet/apply``: `tp fleet apply FILE` checks the file
here, then sends it as JSON, and the server checks it again.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from application.fleet_config import FleetConfig, PoolConfig
from domain.documents import toml_loads
from domain.errors import InvalidInput
from domain.fleet import Pool, Queue, Team
from domain.requests import Profile
from domain.retry import MAX_ATTEMPTS
from entrypoints.wire import Name, explain

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_NODES_PER_POOL = 10_000
MAX_FILE_NODES = 10_000

Text = Annotated[str, Meta(max_length=500)]
Quota = Annotated[int, Meta(ge=0, le=1_000_000)]
Backend = Annotated[str, Meta(min_length=1, max_length=32, description="local, node, ...")]
Gpus = Annotated[int, Meta(ge=0, le=1024)]
Cpus = Annotated[float, Meta(gt=0, le=100_000)]
MemoryMb = Annotated[int, Meta(ge=1, le=2**31 - 1)]


class PoolEntry(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    backend: Backend
    fleet: Name | None = None
    gpu_model: Name | None = None
    gpus_per_node: Gpus = 0
    cpus_per_node: Cpus
    memory_mb_per_node: MemoryMb
    description: Text = ""
    nodes: (
        Annotated[list[Name], Meta(max_length=MAX_NODES_PER_POOL)]
        | Annotated[int, Meta(ge=0, le=MAX_NODES_PER_POOL)]
    ) = []


class ProfileEntry(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    request: Annotated[str, Meta(min_length=1, max_length=128)]
    description: Text = ""


class TeamEntry(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name


class QueueEntry(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    team: Name
    priority: Annotated[int, Meta(ge=-1000, le=1000)] = 0
    gpu_quota: Quota | None = None
    job_quota: Quota | None = None
    max_attempts: Annotated[int, Meta(ge=1, le=MAX_ATTEMPTS)] | None = None


class FleetFile(Struct, forbid_unknown_fields=True, kw_only=True):
    """A whole fleet configuration. ``fleet`` names the fleet of pools that name none."""

    fleet: Name = "default"
    pools: Annotated[list[PoolEntry], Meta(max_length=1000)] = []
    profiles: Annotated[list[ProfileEntry], Meta(max_length=1000)] = []
    teams: Annotated[list[TeamEntry], Meta(max_length=1000)] = []
    queues: Annotated[list[QueueEntry], Meta(max_length=1000)] = []

    def to_config(self) -> FleetConfig:
        counted = sum(p.nodes if isinstance(p.nodes, int) else len(p.nodes) for p in self.pools)
        if counted > MAX_FILE_NODES:
            raise InvalidInput(
                f"the configuration declares {counted} nodes; at most {MAX_FILE_NODES} at once",
                fix="split it into several files",
                field="pools",
            )
        pools = []
        for p in self.pools:
            nodes = p.nodes
            if isinstance(nodes, int):
                nodes = [f"{p.name}-{i}" for i in range(nodes)]
            pool = Pool(
                p.name,
                p.fleet or self.fleet,
                p.backend,
                p.gpus_per_node,
                p.cpus_per_node,
                p.memory_mb_per_node,
                p.gpu_model,
                p.description,
            )
            pools.append(PoolConfig(pool, tuple(nodes)))
        return FleetConfig(
            pools=tuple(pools),
            profiles=tuple(Profile(p.name, p.request, p.description) for p in self.profiles),
            teams=tuple(Team(t.name) for t in self.teams),
            queues=tuple(
                Queue(q.name, q.team, q.priority, q.gpu_quota, q.job_quota, q.max_attempts)
                for q in self.queues
            ),
        )


_AT = re.compile(r"\s*- at `\$\.?([^`]*)`")


def parse(data: Any, source: str = "the fleet configuration") -> FleetFile:
    """Check a decoded document against the schema; an error names the path in it."""
    try:
        return msgspec.convert(data, FleetFile)
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _AT.search(text)
        field = match.group(1) if match else None
        message = explain(_AT.sub("", text))
        where = f"{source}: {field}" if field else source
        raise InvalidInput(
            f"{where}: {message}",
            fix="fix that entry; the schema is in docs/fleet.md",
            field=field,
        ) from None


def load(path: Path) -> FleetFile:
    """Read and check a fleet file (TOML)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(
            f"cannot read the fleet file {path}: {exc.strerror or exc}",
            fix="check the path (TUNEPLANE_FLEET_FILE or the argument of `tp fleet apply`)",
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidInput(
            f"the fleet file {path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB",
            fix="split it into several files",
        )
    try:
        data = toml_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(
            f"{path} is not valid TOML: {exc}", fix="fix the syntax (see docs/fleet.md)"
        ) from None
    return parse(data, str(path))


def host_resources() -> tuple[float, int]:
    """This host's CPUs and memory (MiB): the shape of the default local pool."""
    cpus = float(os.cpu_count() or 1)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError, AttributeError):
        memory = 4096
    return cpus, max(int(memory), 1)
