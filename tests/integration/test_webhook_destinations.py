"""The sender's destination check and pinning (adapters/webhook_sender.py,
docs/notifications.md#where-webhooks-may-go), against real sockets and a real HTTPS receiver on
127.0.0.1.

The one fake: the resolver. DNS cannot be controlled here (no zone of ours, no /etc/hosts
edits), so the sender is given a resolver (name → addresses, the injection point the sender
has for this) that makes a test name resolve to a chosen address. Everything after it is real:
the policy, the TCP connect, TLS with the certificate checked against the name, the HTTP."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from adapters.tls import dev_server_context
from adapters.webhook_sender import HttpWebhookSender
from domain.webhook_destinations import Destinations
from tests.support.webhook_receiver import receiver

pytestmark = pytest.mark.integration
HEADERS = {"Content-Type": "application/json"}
WITHIN = timedelta(seconds=30)


class Names:
    """The documented fake resolver: a table of names, and how often each was asked."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def __call__(self, host: str) -> Sequence[str]:
        self.asked.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[host]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP socket listening on 127.0.0.1: any connection to it would wait in its backlog."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def accepted(sock: socket.socket) -> int:
    """How many connections reached ``sock`` (each was complete in the backlog before the
    send that made it returned)."""
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.mark.parametrize(
    ("addresses", "policy", "says"),
    [
        (["127.0.0.1"], Destinations(), "127.0.0.0/8, this host's loopback"),
        (["127.0.0.1", "169.254.169.254"], Destinations(allow_loopback=True),
         "169.254.169.254, in 169.254.0.0/16, link-local, where the cloud metadata"),
        (["127.0.0.1", "::ffff:169.254.169.254"], Destinations(allow_loopback=True),
         "as IPv4-mapped IPv6"),
        (["127.0.0.1", "10.1.2.3"], Destinations(allow_loopback=True, allow_private=False),
         "10.1.2.3, in 10.0.0.0/8, a private network: the operator refuses private networks"),
    ],
)  # fmt: skip
async def test_a_name_resolving_to_a_refused_address_is_refused_without_connecting(
    listener: socket.socket, addresses: list[str], policy: Destinations, says: str
) -> None:
    """127.0.0.1 leads each answer: a sender that connected anyway would reach the listener."""
    port = listener.getsockname()[1]
    names = Names({"inside.test": addresses})
    sender = HttpWebhookSender(destinations=policy, resolve=names)
    try:
        result = await sender.send(f"http://inside.test:{port}/x", HEADERS, b"{}", WITHIN)
    finally:
        await sender.close()
    assert result.status is None and not result.ok
    assert result.error.startswith("refused: inside.test resolves to "), result.error
    assert says in result.error, result.error
    assert accepted(listener) == 0


async def test_an_address_literal_is_judged_without_resolving(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    names = Names({})
    sender = HttpWebhookSender(resolve=names)
    try:
        result = await sender.send(f"http://127.0.0.1:{port}/x", HEADERS, b"{}", WITHIN)
    finally:
        await sender.close()
    assert result.error.startswith("refused: 127.0.0.1 is in 127.0.0.0/8"), result.error
    assert names.asked == [] and accepted(listener) == 0


async def test_a_name_that_does_not_resolve_or_hangs_fails_naming_it() -> None:
    async def hangs(host: str) -> Sequence[str]:
        await asyncio.Event().wait()
        return []

    missing = HttpWebhookSender(resolve=Names({"empty.test": []}))
    slow = HttpWebhookSender(resolve=hangs)
    try:
        nowhere = await missing.send("https://nowhere.test/x", HEADERS, b"{}", WITHIN)
        empty = await missing.send("https://empty.test/x", HEADERS, b"{}", WITHIN)
        hung = await slow.send("https://slow.test/x", HEADERS, b"{}", timedelta(seconds=0.2))
    finally:
        await missing.close()
        await slow.close()
    assert nowhere.error.startswith("nowhere.test does not resolve"), nowhere.error
    assert empty.error == "empty.test resolves to no address"
    assert hung.error == "slow.test did not resolve in 0.2 s"


async def test_a_pinned_https_delivery_verifies_the_certificate_against_the_name(
    tmp_path: Path,
) -> None:
    """The receiver's certificate names hooks.test only (no IP): sent to the checked 127.0.0.1
    with the name in SNI and Host, it verifies and arrives; other.test, pinned to the very same
    address and port right after, fails verification, as does the bare IP. The name is
    resolved once per send: nothing re-resolves it."""
    server, ca = dev_server_context(tmp_path, ["hooks.test"])
    names = Names({"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    sender = HttpWebhookSender(
        verify=ssl.create_default_context(cafile=str(ca)),
        destinations=Destinations(allow_loopback=True),
        resolve=names,
    )
    with receiver(server) as rec:
        port = rec.url.rsplit(":", 1)[1]
        try:
            sent = await sender.send(f"https://hooks.test:{port}/x", HEADERS, b"{}", WITHIN)
            other = await sender.send(f"https://other.test:{port}/y", HEADERS, b"{}", WITHIN)
            bare = await sender.send(f"https://127.0.0.1:{port}/z", HEADERS, b"{}", WITHIN)
        finally:
            await sender.close()
    assert sent.ok and sent.status == 200, sent.error
    assert "CERTIFICATE_VERIFY_FAILED" in other.error and "other.test" in other.error
    assert "CERTIFICATE_VERIFY_FAILED" in bare.error and "127.0.0.1" in bare.error
    assert [r.path for r in rec.received] == ["/x"]
    assert rec.received[0].headers["Host"] == f"hooks.test:{port}"
    assert names.asked == ["hooks.test", "other.test"]


async def test_an_address_that_refuses_the_connection_falls_to_the_next() -> None:
    """Nothing listens on 127.0.0.2 at the receiver's port (it is bound to 127.0.0.1): the
    first address refuses, the second (checked too) takes the delivery."""
    names = Names({"two.test": ["127.0.0.2", "127.0.0.1"], "one.test": ["127.0.0.2"]})
    sender = HttpWebhookSender(destinations=Destinations(allow_loopback=True), resolve=names)
    with receiver() as rec:
        port = rec.url.rsplit(":", 1)[1]
        try:
            sent = await sender.send(f"http://two.test:{port}/x", HEADERS, b"{}", WITHIN)
            down = await sender.send(f"http://one.test:{port}/x", HEADERS, b"{}", WITHIN)
        finally:
            await sender.close()
    assert sent.ok, sent.error
    assert down.status is None and down.error.startswith("ConnectError:"), down.error
    assert [r.headers["Host"] for r in rec.received] == [f"two.test:{port}"]
