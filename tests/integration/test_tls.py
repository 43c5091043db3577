"""TLS for the gRPC gateways: a real grpclib server over TLS on 127.0.0.1, and the dev PKI.

The server serves a tiny NodeControl from the generated code; each refusal case asserts that the
client gets an error and never a reply (no fallback to plaintext or to an unverified channel).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from grpclib.client import Channel
from grpclib.exceptions import StreamTerminatedError
from grpclib.server import Server, Stream

from adapters import tls
from domain.errors import InvalidInput
from proto import node_control_grpc as grpc
from proto import node_control_pb2 as pb
from tests.support.no_checkpoint_calls import NoCheckpointCalls

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 3.0  # seconds; every call here is local, so a refusal shows well within it


class FixedNodeControl(NoCheckpointCalls, grpc.NodeControlBase):
    async def Enroll(self, stream: Stream[pb.EnrollRequest, pb.EnrollReply]) -> None:
        request = await stream.recv_message()
        assert request is not None
        await stream.send_message(
            pb.EnrollReply(node_name=request.node_name or "n1", pool="default", credential="c")
        )

    async def Connect(self, stream: Stream[pb.NodeMessage, pb.GatewayMessage]) -> None:
        async for message in stream:
            if message.WhichOneof("body") == "hello":
                welcome = pb.Welcome(epoch=message.hello.epoch, heartbeat_seconds=5)
                await stream.send_message(pb.GatewayMessage(seq=1, welcome=welcome))


@asynccontextmanager
async def tls_server(cert: tls.CertPaths) -> AsyncIterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))  # port 0: the kernel picks a free one, held by this socket
    port: int = sock.getsockname()[1]
    server = Server([FixedNodeControl()])
    await server.start(sock=sock, ssl=tls.server_context(cert.cert, cert.key))
    try:
        yield port
    finally:
        server.close()
        await server.wait_closed()


async def enroll(port: int, ctx: ssl.SSLContext | None, host: str = HOST) -> pb.EnrollReply:
    channel = Channel(host, port, ssl=ctx)
    try:
        stub = grpc.NodeControlStub(channel)
        request = pb.EnrollRequest(join_token="t", node_name="n1")
        reply = await stub.Enroll(request, timeout=DEADLINE)
        assert reply is not None
        return reply
    finally:
        channel.close()


@pytest.fixture
def ca(tmp_path: Path) -> tls.CertPaths:
    return tls.generate_ca(tmp_path / "ca")


@pytest.fixture
def issue(tmp_path: Path, ca: tls.CertPaths) -> Callable[..., tls.CertPaths]:
    def _issue(
        names: list[str],
        out: str = "server",
        not_before: dt.datetime | None = None,
        not_after: dt.datetime | None = None,
    ) -> tls.CertPaths:
        return tls.issue_server_cert(
            ca.cert.parent, tmp_path / out, names, not_before=not_before, not_after=not_after
        )

    return _issue


# ---- over the wire ----------------------------------------------------------------------------


async def test_right_ca_and_name_round_trip(
    ca: tls.CertPaths, issue: Callable[..., tls.CertPaths]
) -> None:
    async with tls_server(issue(["localhost", HOST])) as port:
        reply = await enroll(port, tls.client_context(ca.cert))
        assert (reply.node_name, reply.pool) == ("n1", "default")
        assert (await enroll(port, tls.client_context(ca.cert), host="localhost")).credential == "c"

        channel = Channel(HOST, port, ssl=tls.client_context(ca.cert))
        try:
            async with grpc.NodeControlStub(channel).Connect.open(timeout=DEADLINE) as stream:
                await stream.send_message(pb.NodeMessage(seq=1, hello=pb.Hello(epoch=7)))
                answer = await stream.recv_message()
                await stream.end()
            assert answer is not None and answer.welcome.epoch == 7
        finally:
            channel.close()


async def test_client_trusting_another_ca_is_refused(
    tmp_path: Path, issue: Callable[..., tls.CertPaths]
) -> None:
    other_ca = tls.generate_ca(tmp_path / "other-ca", name="someone else")
    async with tls_server(issue([HOST])) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await enroll(port, tls.client_context(other_ca.cert))


async def test_certificate_for_another_name_is_refused(
    ca: tls.CertPaths, issue: Callable[..., tls.CertPaths]
) -> None:
    async with tls_server(issue(["gateway.example", "10.9.9.9"])) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            await enroll(port, tls.client_context(ca.cert))
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            await enroll(port, tls.client_context(ca.cert), host="localhost")


async def test_expired_certificate_is_refused(
    ca: tls.CertPaths, issue: Callable[..., tls.CertPaths]
) -> None:
    now = dt.datetime.now(dt.UTC)
    expired = issue([HOST], not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(1))
    async with tls_server(expired) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
            await enroll(port, tls.client_context(ca.cert))


async def test_plaintext_client_gets_no_answer(
    ca: tls.CertPaths, issue: Callable[..., tls.CertPaths]
) -> None:
    async with tls_server(issue([HOST])) as port:
        # The server's TLS handshake fails on the HTTP/2 preface and it drops the connection.
        with pytest.raises((StreamTerminatedError, ConnectionError)):
            await enroll(port, None)
        assert (await enroll(port, tls.client_context(ca.cert))).pool == "default"


# ---- the development PKI ----------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_are_private(ca: tls.CertPaths, issue: Callable[..., tls.CertPaths]) -> None:
    server = issue(["localhost"])
    assert _mode(ca.key) == 0o600 and _mode(server.key) == 0o600
    assert (
        _mode(ca.cert) == 0o644
        and ca.cert.name == "ca.pem"
        and server.key.name == ("server-key.pem")
    )


def test_sans_split_dns_names_from_ip_addresses(issue: Callable[..., tls.CertPaths]) -> None:
    cert = tls.load_cert(issue(["Gateway.Example", "10.0.0.1", "::1"]).cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["gateway.example"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.1", "::1"]


def test_ensure_dev_pki_is_idempotent(tmp_path: Path) -> None:
    first = tls.ensure_dev_pki(tmp_path, ["localhost", HOST])
    assert first.ca.cert == tmp_path / "pki" / "ca.pem" and first.server.key.exists()
    before = {p: p.read_bytes() for p in (first.ca.cert, first.ca.key, first.server.cert)}
    second = tls.ensure_dev_pki(tmp_path, [HOST])  # a subset of the names: nothing to do
    assert second == first
    assert {p: p.read_bytes() for p in before} == before


def test_ensure_dev_pki_reissues_expired_or_incomplete_server_cert(tmp_path: Path) -> None:
    pki = tls.ensure_dev_pki(tmp_path, [HOST])
    ca_pem = pki.ca.cert.read_bytes()
    now = dt.datetime.now(dt.UTC)
    tls.issue_server_cert(
        pki.ca.cert.parent,
        pki.server.cert.parent,
        [HOST],
        not_before=now - dt.timedelta(days=3),
        not_after=now - dt.timedelta(days=1),
    )
    again = tls.ensure_dev_pki(tmp_path, [HOST])
    assert tls.load_cert(again.server.cert).not_valid_after_utc > now
    assert again.ca.cert.read_bytes() == ca_pem  # the CA nodes trust is kept

    tls.ensure_dev_pki(tmp_path, [HOST, "gw.local"])
    sans = tls.load_cert(again.server.cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert "gw.local" in sans.value.get_values_for_type(x509.DNSName)
    assert _mode(again.server.key) == 0o600


RACER = """
import json, os, sys, time
from pathlib import Path
from adapters import tls
go, dirs = Path(sys.argv[1]), sys.argv[2:]
(go.parent / f"ready-{os.getpid()}").touch()
while not go.exists():
    time.sleep(0.001)
seen = []
for d in dirs:
    try:
        pki = tls.ensure_dev_pki(Path(d), ["localhost", "127.0.0.1"])
        seen.append(tls.load_cert(pki.ca.cert).fingerprint(tls.hashes.SHA256()).hex())
    except Exception as exc:
        seen.append(f"{type(exc).__name__}: {exc}")
print(json.dumps(seen))
"""


def test_processes_creating_the_dev_pki_at_once_end_with_one_ca(tmp_path: Path) -> None:
    """Issue 18, defect 5: gateways starting together on a fresh state directory raced to
    create the dev PKI ("the private key …/ca-key.pem does not belong to …/ca.pem")."""
    racers, dirs = 6, [tmp_path / f"state-{i}" for i in range(12)]
    go = tmp_path / "go"
    args = [sys.executable, "-c", RACER, str(go), *map(str, dirs)]
    pipe = subprocess.PIPE
    procs = [
        subprocess.Popen(args, stdout=pipe, stderr=pipe, text=True, cwd=ROOT) for _ in range(racers)
    ]
    while len(list(tmp_path.glob("ready-*"))) < racers:  # every one imported: start together
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()
    seen = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        seen.append(json.loads(out))
    for i, state in enumerate(dirs):
        pki = tls.ensure_dev_pki(state, ["localhost"])  # what a later start finds
        ca_cert = tls.load_cert(pki.ca.cert)
        fingerprint = ca_cert.fingerprint(hashes.SHA256()).hex()
        assert {s[i] for s in seen} == {fingerprint}, (state, [s[i] for s in seen])
        tls.server_context(pki.ca.cert, pki.ca.key)  # the CA key belongs to the CA
        tls.server_context(pki.server.cert, pki.server.key)
        tls.load_cert(pki.server.cert).verify_directly_issued_by(ca_cert)
        assert _mode(pki.ca.key) == 0o600
        assert sorted(p.name for p in (state / "pki").iterdir() if p.name.endswith(".tmp")) == []


def test_a_ca_key_without_its_certificate_is_replaced(tmp_path: Path) -> None:
    """A process killed between writing the CA key and its certificate leaves the key alone;
    nothing can trust a CA whose certificate was never written, so the next start makes one."""
    first = tls.ensure_dev_pki(tmp_path, [HOST])
    first.ca.cert.unlink()
    first.server.cert.unlink()
    again = tls.ensure_dev_pki(tmp_path, [HOST])
    tls.server_context(again.ca.cert, again.ca.key)
    tls.load_cert(again.server.cert).verify_directly_issued_by(tls.load_cert(again.ca.cert))
    again.ca.key.unlink()  # a certificate without its key is still an error: nodes trust it
    with pytest.raises(InvalidInput, match=r"ca-key\.pem does not exist"):
        tls.ensure_dev_pki(tmp_path, [HOST])


# ---- clear errors -----------------------------------------------------------------------------


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"ca\.pem does not exist") as err:
        tls.client_context(tmp_path / "ca.pem")
    assert err.value.fix
    with pytest.raises(InvalidInput, match=r"server\.pem does not exist"):
        tls.server_context(tmp_path / "server.pem", tmp_path / "server-key.pem")


def test_garbage_and_unreadable_files(tmp_path: Path, ca: tls.CertPaths) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(InvalidInput, match=r"junk\.pem is not a PEM certificate") as err:
        tls.client_context(junk)
    assert "recreate" in err.value.fix
    with pytest.raises(InvalidInput, match=r"junk\.pem is not an unencrypted PEM private key"):
        tls.server_context(ca.cert, junk)
    with pytest.raises(InvalidInput, match="cannot read"):
        tls.client_context(tmp_path)  # a directory
    if os.geteuid() != 0:  # root reads a 0000 file anyway
        ca.key.chmod(0)
        with pytest.raises(InvalidInput, match=r"cannot read the TLS private key .*ca-key\.pem"):
            tls.server_context(ca.cert, ca.key)


def test_mismatched_key_is_refused(issue: Callable[..., tls.CertPaths]) -> None:
    a, b = issue([HOST], out="a"), issue([HOST], out="b")
    with pytest.raises(InvalidInput, match=r"does not belong to the certificate") as err:
        tls.server_context(a.cert, b.key)
    assert str(b.key) in err.value.message and str(a.cert) in err.value.message


def test_bad_names_and_expired_ca(tmp_path: Path) -> None:
    ca = tls.generate_ca(tmp_path / "pki")
    with pytest.raises(InvalidInput, match="at least one name"):
        tls.issue_server_cert(ca.cert.parent, tmp_path, [])
    with pytest.raises(InvalidInput, match="neither an IP address"):
        tls.issue_server_cert(ca.cert.parent, tmp_path, ["bad name"])
    now = dt.datetime.now(dt.UTC)
    tls.generate_ca(tmp_path / "pki", not_before=now - dt.timedelta(9), not_after=now)
    with pytest.raises(InvalidInput, match="expired") as err:
        tls.ensure_dev_pki(tmp_path, [HOST])
    assert "delete" in err.value.fix
