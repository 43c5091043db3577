"""`tp node run`: the node daemon process.

It wires the pieces a node needs: the journal (SQLite in the state directory), the container
runtime (Docker Engine API), the agent that obeys the protocol, and the outbound TLS link to the
node control gateway. The first start enrolls with a one-time join token; later starts use the
stored credential. The daemon holds its state directory for its lifetime (an advisory lock on
``STATE/daemon.lock``, released by the kernel however the process ends): a second daemon on
it is refused, naming the first's pid, before it reads or writes anything there. Once the
gateway accepted its session (the Welcome), the agent reconciles its journal with the engine,
so a restarted daemon re-adopts running containers instead of starting new ones; before it, the
daemon only looks (a daemon the gateway refuses, e.g. a restored backup of the state directory
on the same engine, must not take the live daemon's containers for its own orphans).

SIGTERM and SIGINT stop the daemon, never its members: they keep running and are re-adopted
at the next start. A lost or broken stream never ends the daemon (it reconnects with back-off,
at most ``TUNEPLANE_NODE_RETRY_MAX_SECONDS`` apart, 10 s by default); a credential the gateway
refuses for good does, with exit code 5 (the node needs a new join token).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from adapters.grpc.node_client import CREDENTIAL_FILE, load_credential
from adapters.node import process_isolation
from adapters.node.capacity import detect
from adapters.tls import client_context
from application import log_context
from application.node_adoption import survey
from application.node_sessions import check_address
from domain.errors import Conflict, InvalidInput, TunePlaneError, Unauthenticated
from domain.node_protocol import NodeCapacity
from entrypoints import logs
from entrypoints.containers.lifecycle import resolve, started
from entrypoints.containers.node import NodeContainer, NodePlan
from entrypoints.metrics_listener import checked_port, start_metrics
from entrypoints.process import TELEMETRY_PORT, run_server, split_server, until_signalled
from entrypoints.runtime_dirs import runtime_dirs, seen_by_host_members
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import CONNECT_TIMEOUT_ENV as CONNECT_TIMEOUT_ENV
from entrypoints.settings_sections import EXECUTORS, NodeSettings, default_node_state_dir
from entrypoints.settings_sections import RETRY_MAX_ENV as RETRY_MAX_ENV

log = logging.getLogger("tuneplane.node")

JOIN_TOKEN_ENV = "TUNEPLANE_JOIN_TOKEN"
LOCK_FILE = "daemon.lock"  # in the state directory: held by the daemon that uses it
CREDENTIAL_REFUSED = 5  # exit code: the join token or credential was refused (as `tp` uses 5)


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    server: str
    ca: Path
    state_dir: Path | None = None
    name: str | None = None
    join_token: str | None = None
    advertise_address: str | None = None
    gpus: int | None = None
    gpu_model: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    docker_host: str | None = None
    shared_dir: Path | None = None
    outputs_dir: Path | None = None  # members' outputs (default: <state_dir>/outputs)
    # the telemetry gateway the node's collector ships to, HOST:PORT; None: the --server host
    # on port 8472; "off": no collector (members get no metrics directory)
    telemetry_gateway: str | None = None
    # how members run: "container" (the engine) or "process" (host processes); None: the
    # setting TUNEPLANE_NODE_EXECUTOR, else container
    executor: str | None = None
    runtime_dirs: tuple[str, ...] = ()  # RUNTIME=DIR, added to TUNEPLANE_NODE_RUNTIMES
    member_user: str | None = None  # host processes as root: the account members run as
    separate_collector: bool = False  # the collector is a service of its own: start no child
    metrics_port: int | None = None  # /metrics here (else TUNEPLANE_NODE_METRICS_PORT, else none)


def default_state_dir() -> Path:
    return default_node_state_dir()


def _keep_outside(mounted: Path, state_dir: Path, flag: str) -> None:
    """A directory mounted into members must not hold the state directory (its credential)."""
    state = state_dir.resolve()
    if mounted == state or state.is_relative_to(mounted):
        raise InvalidInput(
            f"the state directory {state_dir} is inside {flag} {mounted}: workloads would see "
            "the node's credential",
            fix=f"keep --state-dir outside {flag}",
            field=flag.removeprefix("--").replace("-", "_"),
        )


def _outputs_root(given: Path | None, state_dir: Path) -> Path:
    """Members' outputs: ``given`` or ``<state_dir>/outputs``; never the state directory itself
    or a directory holding it (members would see the credential)."""
    state = state_dir.resolve()
    root = given.expanduser().resolve() if given else state / "outputs"
    if given is not None:
        _keep_outside(root, state, "--outputs-dir")
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    return root


def _gpu_uuids(capacity: NodeCapacity) -> dict[int, str]:
    """GPU index → UUID, as detected: how host-process members' GPUs are bound."""
    found = capacity.gpu_inventory.devices if capacity.gpu_inventory else ()
    return {g.index: g.uuid for g in found}


def retry_max() -> float:
    """The longest pause between two connection attempts (``TUNEPLANE_NODE_RETRY_MAX_SECONDS``)."""
    return float(load_one(NodeSettings, "retry_max_seconds"))


def connect_timeout() -> float:
    """How long a new stream waits for its Welcome (``TUNEPLANE_NODE_CONNECT_TIMEOUT_SECONDS``)."""
    return float(load_one(NodeSettings, "connect_timeout_seconds"))


def _version() -> str:
    try:
        return version("tuneplane")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


@contextlib.contextmanager
def held_state_dir(state_dir: Path) -> Iterator[None]:
    """Hold ``state_dir`` for this daemon while inside (an exclusive advisory lock on
    ``daemon.lock``, released by the kernel however the process ends, kill -9 included; the
    descriptor is not inherited by members or the collector). Conflict, naming the holder's
    pid, while another daemon holds it: two daemons on one state directory would share its
    journal, and the one the gateway refuses would roll back the other's members."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(state_dir / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            other = lock.read().strip() or "unknown"
            raise Conflict(
                f"another node daemon (pid {other}) is running on the state directory {state_dir}",
                fix=f"use that one, or stop it first (`kill {other}`, or stop its service); a "
                "state directory belongs to one daemon: another daemon of this machine needs "
                "its own --state-dir and join token",
            ) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield


def plan(options: DaemonOptions) -> NodePlan:
    """The daemon's options checked and completed (enrolled or not, name, capacity, where
    outputs go, where metrics ship): every refusal before anything starts."""
    host, port = split_server(options.server)
    address = options.advertise_address or socket.gethostname()
    check_address(address)  # else the gateway would refuse every stream
    state_dir = (options.state_dir or default_state_dir()).expanduser()
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state_dir, 0o700)
    stored = load_credential(state_dir)
    token = options.join_token or load_one(NodeSettings, "join_token")
    if stored is None and token is None:
        raise InvalidInput(
            f"this node is not enrolled yet (no {state_dir / CREDENTIAL_FILE})",
            fix="create a join token on the control plane (`tp node token create --pool POOL`) "
            "and pass it once with --join-token (or TUNEPLANE_JOIN_TOKEN)",
            field="join_token",
        )
    if stored and options.name and options.name != stored.node:
        raise InvalidInput(
            f"{state_dir} holds the credential of node {stored.node!r}, not {options.name!r}",
            fix=f"use another --state-dir for {options.name!r}, or drop --name",
            field="name",
        )
    shared = options.shared_dir.expanduser().resolve() if options.shared_dir else None
    if shared is not None and not shared.is_dir():
        raise InvalidInput(
            f"--shared-dir {shared} is not a directory",
            fix="pass the directory where this host mounts the site's shared storage",
            field="shared_dir",
        )
    if shared is not None:
        _keep_outside(shared, state_dir, "--shared-dir")
    executor = options.executor or str(load_one(NodeSettings, "executor"))
    if executor not in EXECUTORS:
        raise InvalidInput(
            f"--executor {executor!r} is not an executor",
            fix="give --executor container or --executor process",
            field="executor",
        )
    runtimes = runtime_dirs(str(load_one(NodeSettings, "runtimes")), "TUNEPLANE_NODE_RUNTIMES")
    for given in options.runtime_dirs:
        runtimes.update(runtime_dirs(given, "--runtime-dir"))
    if runtimes and executor != "process":
        raise InvalidInput(
            "--runtime-dir (TUNEPLANE_NODE_RUNTIMES) only applies to host processes",
            fix="add --executor process, or leave runtime directories out: a container's "
            "runtime is its image",
            field="runtime_dirs",
        )
    seen_by_host_members(runtimes, state_dir, "--runtime-dir (TUNEPLANE_NODE_RUNTIMES)")
    capacity = detect(
        gpus=options.gpus,
        gpu_model=options.gpu_model,
        cpus=options.cpus,
        memory_mb=options.memory_mb,
        fake_nvml=load_one(NodeSettings, "fake_nvml"),
    )
    member_user = options.member_user or load_one(NodeSettings, "member_user")
    name = stored.node if stored else (options.name or socket.gethostname())
    isolation = (
        process_isolation.isolation(name, member_user, None) if executor == "process" else None
    )
    telemetry = options.telemetry_gateway or f"{host}:{TELEMETRY_PORT}"
    if telemetry != "off":  # a clear error now rather than a collector crash loop
        split_server(telemetry, "--telemetry-gateway", "the telemetry gateway", TELEMETRY_PORT)
    return NodePlan(
        name=name,
        state_dir=state_dir,
        stored=stored,
        join_token=token,
        host=host,
        port=port,
        tls=client_context(options.ca),
        ca=options.ca,
        address=address,
        capacity=capacity,
        docker_host=options.docker_host or load_one(NodeSettings, "docker_host"),
        shared_dir=shared,
        outputs_dir=_outputs_root(options.outputs_dir, state_dir),
        telemetry_gateway=None if telemetry == "off" else telemetry,
        retry_max=retry_max(),
        connect_timeout=connect_timeout(),
        version=_version(),
        isolation=isolation,
        runtime_dirs=runtimes,
        gpu_uuids=_gpu_uuids(capacity) if isolation else {},
        collector_child=not options.separate_collector,
    )


async def serve_daemon(options: DaemonOptions) -> None:
    metrics_port = checked_port("node", options.metrics_port)  # refused before anything starts
    with held_state_dir((options.state_dir or default_state_dir()).expanduser()):
        await _serve(options, metrics_port)


async def _serve(options: DaemonOptions, metrics_port: int | None) -> None:
    node = plan(options)
    log_context.bind_rest_of_task(node=node.name)
    async with started(NodeContainer(plan=node)) as container:
        agent = await resolve(container.agent)
        link = await resolve(container.link)
        stored = node.stored
        if stored is None:
            assert node.join_token is not None
            stored = await link.enroll(node.join_token, node.name)
            logs.say(f"enrolled as node {stored.node} in pool {stored.pool}")
        if stored.node != node.name:  # the gateway may normalise the name
            raise InvalidInput(
                f"the gateway enrolled this node as {stored.node!r}, not {node.name!r}"
            )
        # only looks (a journal of another engine is refused here); the journal is reconciled
        # with the engine once the gateway accepts the session (its Welcome)
        scan = await survey(agent)
        if not scan.complete:
            log.warning("journal not reconciled with the container engine yet: %s", scan.reason)
        capacity = node.capacity
        runs = node.isolation.describe() if node.isolation else "containers"
        logs.say(
            f"node {node.name} connecting to {node.host}:{node.port} (TLS; state "
            f"{node.state_dir}; {capacity.gpus} GPUs, {capacity.cpus:g} CPUs, "
            f"{capacity.memory_mb} MiB; members run as {runs})"
        )
        if metrics_port is not None:
            start_metrics("node", metrics_port)
        process = await resolve(container.collector)
        collector = asyncio.create_task(process.run()) if process is not None else None
        try:
            await until_signalled(link.run())
        finally:
            if collector is not None:
                collector.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await collector  # raises an unrecoverable error (credential refused)


def run_daemon(options: DaemonOptions) -> int:
    logs.setup("node")
    try:
        run_server(serve_daemon(options))
    except TunePlaneError as exc:
        logs.report(exc)
        return CREDENTIAL_REFUSED if isinstance(exc, Unauthenticated) else 1
    return 0
