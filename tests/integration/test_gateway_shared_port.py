"""Node gateways on one address (``TUNEPLANE_NODE_GATEWAY_SHARE_PORT``): real TLS listeners on
loopback, as `tp gateway node` starts them (docs/node-backend.md#several-gateways-on-one-address).
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from grpclib.server import Server

from adapters.tls import dev_server_context
from domain.errors import Unavailable
from entrypoints.gateway import _listen
from tests.fixtures.server import free_port


async def _close(server: Server) -> None:
    server.close()
    await server.wait_closed()


async def _handshake(port: int, ca: Path) -> None:
    """A TLS handshake with whichever process the kernel hands the connection to."""
    client = ssl.create_default_context(cafile=str(ca))
    client.set_alpn_protocols(["h2"])
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    writer.transport.abort()  # the server's HTTP/2 preface may cross a polite close


async def test_two_gateways_share_a_port_only_when_each_asks_to(tmp_path: Path) -> None:
    tls, ca = dev_server_context(tmp_path, ["localhost", "127.0.0.1"])
    port = free_port()
    first = await _listen(Server([]), "127.0.0.1", port, tls, "node", share=True)
    try:
        second = await _listen(Server([]), "127.0.0.1", port, tls, "node", share=True)
        await _close(second)  # its listener leaves the group: the first still answers alone
        await _handshake(port, ca)
        with pytest.raises(Unavailable) as refused:  # a third that did not ask: refused
            await _listen(Server([]), "127.0.0.1", port, tls, "node")
        assert f"cannot listen on 127.0.0.1:{port}" in refused.value.message
        assert "TUNEPLANE_NODE_GATEWAY_HOST/_PORT" in refused.value.fix
    finally:
        await _close(first)
