"""Node credentials on a real node cluster: a credential rotates over the control stream, the
old one is refused once its grace period ended, and the daemon connects again with the one it
stored. (What a workload can see of its node's credential: test_node_faults.py.)"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from adapters.grpc import node_codec as codec
from adapters.grpc.node_client import StoredCredential, load_credential
from adapters.tls import client_context
from domain.node_messages import Hello
from domain.node_protocol import NodeCapacity
from proto.node_control_grpc import NodeControlStub
from tests.e2e.test_node_backend import Factory
from tests.fixtures.nodes import NODE_CPUS, NODE_MEMORY_MB, NodeCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_credentials_rotate_over_the_stream_and_the_old_one_is_refused(
    node_cluster_factory: Factory,
) -> None:
    cluster = await node_cluster_factory(
        1, TUNEPLANE_CREDENTIAL_ROTATE_SECONDS="4", TUNEPLANE_CREDENTIAL_GRACE_SECONDS="2"
    )
    state_dir = cluster.daemons["n1"].state_dir
    first = load_credential(state_dir)
    assert first is not None
    deadline = time.monotonic() + 30
    now: StoredCredential | None = first
    while now == first and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        now = load_credential(state_dir)
    assert now is not None and now.credential != first.credential, "never rotated"
    assert (state_dir / "credential").stat().st_mode & 0o777 == 0o600
    await asyncio.sleep(3)  # past the grace period
    with pytest.raises(GRPCError) as refused:
        await hello_with(cluster, first.credential)
    assert refused.value.status is Status.UNAUTHENTICATED
    await asyncio.to_thread(cluster.wait_connected, ["n1"])  # the daemon kept its stream
    cluster.kill_daemon("n1", signal.SIGTERM)  # and connects again with what it stored
    cluster.start_daemon("n1")
    await asyncio.to_thread(cluster.wait_connected, ["n1"])


async def hello_with(cluster: NodeCluster, credential: str) -> None:
    channel = Channel("127.0.0.1", cluster.gateway_port, ssl=client_context(cluster.ca))
    try:
        stub = NodeControlStub(channel)
        async with stub.Connect.open(metadata={"authorization": f"Bearer {credential}"}) as s:
            hello = Hello("n1", NodeCapacity(0, None, NODE_CPUS, NODE_MEMORY_MB), "x", "t", 0, ())
            await s.send_message(codec.node_message_to(1, hello))
            await s.recv_message()
    finally:
        channel.close()
