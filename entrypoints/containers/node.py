"""The node daemon's container (`tp node run`): the journal, the container runtime, the agent
that obeys the protocol, the outbound link to the node gateway, and the node's collector child.
Built from a :class:`NodePlan` (the daemon's options, checked: ``entrypoints/node_daemon.py``);
no database, no blob store, no backend."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dependency_injector import containers, providers

from adapters.checkpoint_dirs import FilesystemCheckpoints
from adapters.grpc.node_checkpoint_client import GrpcCheckpointCourier
from adapters.grpc.node_client import NodeLink, StoredCredential
from adapters.node.collector_feed import CollectorFeed
from adapters.node.executor import NodeExecutor
from adapters.node.journal import SqliteJournal
from adapters.node.member_view import NodeDirs
from adapters.node.process_isolation import Isolation
from adapters.node.processes import ProcessExecutor
from adapters.observability.prometheus import process_instruments
from adapters.outputs import FilesystemOutputs
from application.node_agent import NodeAgent
from application.node_checkpoint_carrier import CheckpointCarrier
from domain.node_protocol import NodeCapacity
from entrypoints.node_collector import CollectorProcess

JOURNAL_FILE = "journal.sqlite"
CHECKPOINTS_DIR = "checkpoints"  # attempts' checkpoint directories (docs/checkpoints.md)
PROCESSES_DIR = "processes"  # host-process members' directories (adapters/node/processes.py)


@dataclass(frozen=True, slots=True)
class NodePlan:
    """What a node daemon runs with, every option checked (``node_daemon.plan``)."""

    name: str
    state_dir: Path
    stored: StoredCredential | None  # None: enrol first, with ``join_token``
    join_token: str | None
    host: str
    port: int
    tls: ssl.SSLContext
    ca: Path
    address: str
    capacity: NodeCapacity
    docker_host: str | None
    shared_dir: Path | None
    outputs_dir: Path
    telemetry_gateway: str | None  # HOST:PORT the collector ships to; None: no collector
    retry_max: float
    version: str
    connect_timeout: float = 30.0  # seconds a new stream waits for its Welcome
    isolation: Isolation | None = None  # members as host processes (None: as containers)
    runtime_dirs: dict[str, str] = field(default_factory=dict)  # host processes: runtime → PATH dir
    gpu_uuids: dict[int, str] = field(default_factory=dict)  # host processes: GPU index → UUID
    # False: the collector runs as a service of its own (`tp node install --systemd`); the
    # daemon still writes the members' files it reads, and starts no collector child
    collector_child: bool = True


class Outbox:
    """The agent's way to the gateway, given before the link it goes through exists (the link
    needs the agent): sends fail as a lost connection until :meth:`attach`."""

    def __init__(self) -> None:
        self._link: NodeLink | None = None

    def attach(self, link: NodeLink) -> None:
        self._link = link

    async def send(self, body: object) -> None:
        if self._link is None:
            raise ConnectionError("not connected")
        await self._link.send(body)


def _journal(plan: NodePlan) -> Iterator[SqliteJournal]:
    journal = SqliteJournal(
        plan.state_dir / JOURNAL_FILE, node_name=plan.name, instruments=process_instruments()
    )
    try:
        yield journal
    finally:
        journal.close()


def _feed(plan: NodePlan) -> CollectorFeed | None:
    return CollectorFeed(plan.state_dir / "collector") if plan.telemetry_gateway else None


def _checkpoint_dirs(plan: NodePlan) -> FilesystemCheckpoints:
    return FilesystemCheckpoints(plan.state_dir / CHECKPOINTS_DIR)


def _courier(plan: NodePlan) -> Iterator[GrpcCheckpointCourier]:
    courier = GrpcCheckpointCourier(plan.host, plan.port, plan.tls, plan.state_dir)
    try:
        yield courier
    finally:
        courier.close()


async def _runtime(
    plan: NodePlan,
    feed: CollectorFeed | None,
    outputs: FilesystemOutputs,
    checkpoints: FilesystemCheckpoints,
) -> AsyncIterator[NodeExecutor | ProcessExecutor]:
    if plan.isolation is not None:
        dirs = NodeDirs(plan.shared_dir, feed.metrics_dir if feed else None, outputs, checkpoints)
        yield ProcessExecutor(
            plan.name,
            plan.state_dir / PROCESSES_DIR,
            plan.state_dir,
            plan.isolation,
            gpu_uuids=plan.gpu_uuids,
            runtime_dirs=plan.runtime_dirs,
            dirs=dirs,
            hidden=(plan.outputs_dir,),
        )
        return
    runtime = NodeExecutor(
        plan.name,
        plan.docker_host,
        gpu_check=plan.capacity.gpus > 0,
        shared_dir=plan.shared_dir,
        metrics_dir=feed.metrics_dir if feed else None,
        outputs=outputs,
        checkpoints=checkpoints,
    )
    try:
        yield runtime
    finally:
        await runtime.close()


async def _agent(
    plan: NodePlan,
    journal: SqliteJournal,
    runtime: NodeExecutor | ProcessExecutor,
    outbox: Outbox,
    feed: CollectorFeed | None,
    outputs: FilesystemOutputs,
    carrier: CheckpointCarrier,
    courier: GrpcCheckpointCourier,
) -> AsyncIterator[NodeAgent]:
    agent = NodeAgent(
        plan.name, journal, runtime, outbox.send, feed=feed, outputs=outputs,
        checkpoints=carrier, courier=courier,
    )  # fmt: skip
    try:
        yield agent
    finally:
        await agent.close()


def _link(plan: NodePlan, agent: NodeAgent, outbox: Outbox) -> NodeLink:
    link = NodeLink(
        host=plan.host,
        port=plan.port,
        tls=plan.tls,
        state_dir=plan.state_dir,
        agent=agent,
        capacity=plan.capacity,
        address=plan.address,
        version=plan.version,
        retry_max=plan.retry_max,
        connect_timeout=plan.connect_timeout,
        instruments=process_instruments(),
    )
    outbox.attach(link)
    return link


def _collector(plan: NodePlan) -> CollectorProcess | None:
    if plan.telemetry_gateway is None or not plan.collector_child:
        return None
    return CollectorProcess(plan.state_dir / "collector", plan.telemetry_gateway, plan.ca)


class NodeContainer(containers.DeclarativeContainer):
    plan = providers.Dependency(instance_of=NodePlan)
    journal = providers.Resource(_journal, plan)
    outputs = providers.Singleton(FilesystemOutputs, plan.provided.outputs_dir)
    feed = providers.Singleton(_feed, plan)
    checkpoint_dirs = providers.Singleton(_checkpoint_dirs, plan)
    courier = providers.Resource(_courier, plan)
    carrier = providers.Singleton(CheckpointCarrier, checkpoint_dirs, courier)
    runtime = providers.Resource(_runtime, plan, feed, outputs, checkpoint_dirs)
    outbox = providers.Singleton(Outbox)
    agent = providers.Resource(
        _agent, plan, journal, runtime, outbox, feed, outputs, carrier, courier
    )
    link = providers.Singleton(_link, plan, agent, outbox)
    collector = providers.Singleton(_collector, plan)
