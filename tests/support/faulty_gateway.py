"""A front door between a node daemon and its gateway that breaks each new control stream in
a chosen way, for the reconnect tests (docs/node-backend.md, "Reconnects").

Every connection the daemon opens is accepted on ``port`` and handled by the ``mode`` set at
that moment (``attempts`` counts them per mode):

* ``forward``: piped to the real gateway (TLS passes through untouched).
* TCP faults, decided here: ``reset`` (an RST at once), ``not-tls`` (an HTTP/1.1 answer to the
  TLS handshake), ``cut-rst`` and ``cut-fin`` (forwarded, then cut a second later with an RST,
  or with a FIN and no TLS close_notify).
* gRPC faults, from a grpclib server with the gateway's own certificate: ``takeover`` (Welcome,
  then the stream ends as when a newer session replaced it), ``stream-reset`` (Welcome, then
  RST_STREAM), ``bad-message`` (a message with no body), ``status:NAME`` (the gateway answers
  the Hello with that gRPC status).
* HTTP/2 faults, from a raw h2 server behind TLS: ``h2-garbage`` (random bytes), ``goaway``
  (GOAWAY at the first request), ``eof-mid-message`` (half a gRPC message, then the connection
  closes), ``end-mid-message`` (half a gRPC message, then END_STREAM).

``cut()`` aborts every open connection, so that the daemon's current stream ends and its next
one meets the new mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream

from adapters.tls import server_context
from proto import node_control_pb2 as pb
from proto.node_control_grpc import NodeControlBase
from tests.support.no_checkpoint_calls import NoCheckpointCalls

TCP_MODES = ("reset", "not-tls", "cut-rst", "cut-fin")
GRPC_MODES = ("takeover", "stream-reset", "bad-message")
H2_MODES = ("h2-garbage", "goaway", "eof-mid-message", "end-mid-message")


def _rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _FakeControl(NoCheckpointCalls, NodeControlBase):
    def __init__(self, front: FaultyFront) -> None:
        self.front = front

    async def Enroll(self, stream: Stream[pb.EnrollRequest, pb.EnrollReply]) -> None:
        raise GRPCError(Status.UNAVAILABLE, "enroll through the real gateway")

    async def Connect(self, stream: Stream[pb.NodeMessage, pb.GatewayMessage]) -> None:
        mode = self.front.mode
        hello = await stream.recv_message()
        if mode.startswith("status:"):
            raise GRPCError(Status[mode.removeprefix("status:")], f"injected fault {mode}")
        if mode == "bad-message":
            await stream.send_message(pb.GatewayMessage(seq=1))
            await asyncio.sleep(5)
            return
        epoch = hello.hello.epoch if hello is not None else 0
        welcome = pb.Welcome(
            epoch=epoch, heartbeat_seconds=1, server_unix_ms=0, installation=self.front.installation
        )
        await stream.send_message(pb.GatewayMessage(seq=1, welcome=welcome))
        if mode == "stream-reset":
            await stream.cancel()
        # "takeover" (and anything else): the handler returns, ending the stream with OK


class FaultyFront:
    def __init__(self, gateway_port: int, pki: Path, installation: str = "") -> None:
        """``installation``: what its own Welcomes name, as the real gateway's do (a daemon
        refuses for good a gateway that names none once it has to learn one)."""
        self.gateway_port = gateway_port
        self.installation = installation
        self.tls = server_context(pki / "server.pem", pki / "server-key.pem")
        self.mode = "forward"
        self.attempts: Counter[str] = Counter()
        self.port = 0
        self._grpc_port = 0
        self._h2_port = 0
        self._servers: list[asyncio.Server] = []
        self._grpc: Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        front = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        h2_server = await asyncio.start_server(self._h2, "127.0.0.1", 0, ssl=self.tls)
        self._servers = [front, h2_server]
        self._grpc = Server([_FakeControl(self)])
        await self._grpc.start("127.0.0.1", 0, ssl=self.tls)
        self.port = front.sockets[0].getsockname()[1]
        self._h2_port = h2_server.sockets[0].getsockname()[1]
        grpc_server: Any = self._grpc._server  # grpclib keeps its asyncio server here
        self._grpc_port = grpc_server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        self.cut()
        for server in self._servers:
            server.close()
        if self._grpc is not None:
            self._grpc.close()
            await self._grpc.wait_closed()

    def cut(self) -> None:
        """Abort every open connection (the daemon's current stream dies)."""
        for writer in list(self._open):
            _rst(writer)

    # -- the front door -----------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        self.attempts[mode] += 1
        self._open.add(writer)
        try:
            if mode == "reset":
                _rst(writer)
            elif mode == "not-tls":
                await reader.read(1024)  # the ClientHello
                writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                writer.close()
            elif mode.startswith("status:") or mode in GRPC_MODES:
                await self._forward(reader, writer, self._grpc_port)
            elif mode in H2_MODES:
                await self._forward(reader, writer, self._h2_port)
            else:  # forward, cut-rst, cut-fin
                await self._forward(reader, writer, self.gateway_port, cut=mode)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.discard(writer)
            writer.transport.abort()

    async def _forward(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int, cut: str = ""
    ) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
        self._open.add(up_w)
        pipes = asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))
        try:
            if cut in ("cut-rst", "cut-fin"):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(pipes), 1.0)
                if cut == "cut-rst":
                    _rst(writer)
                else:
                    with contextlib.suppress(OSError):
                        writer.write_eof()  # a FIN in the middle of TLS records
                    await asyncio.sleep(0.2)
                up_w.transport.abort()
            await pipes
        finally:
            pipes.cancel()
            with contextlib.suppress(BaseException):
                await pipes
            self._open.discard(up_w)
            up_w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    # -- the raw HTTP/2 server ----------------------------------------------------------------

    async def _h2(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        try:
            if mode == "h2-garbage":
                writer.write(os.urandom(4096))
                await writer.drain()
                await asyncio.sleep(0.5)
                return
            conn = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
            )
            conn.initiate_connection()
            writer.write(conn.data_to_send())
            answered = False
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        answered = True
                        if mode == "goaway":
                            conn.close_connection()
                        else:
                            self._half_message(conn, event.stream_id, mode == "end-mid-message")
                writer.write(conn.data_to_send())
                await writer.drain()
                if answered and mode in ("goaway", "eof-mid-message"):
                    await asyncio.sleep(0.2)
                    return  # the connection closes with the message half sent
        except (OSError, ssl.SSLError, h2.exceptions.H2Error):
            pass
        finally:
            writer.transport.abort()

    @staticmethod
    def _half_message(conn: h2.connection.H2Connection, stream_id: int, end: bool) -> None:
        conn.send_headers(
            stream_id, [(":status", "200"), ("content-type", "application/grpc+proto")]
        )
        # a gRPC message announcing 1000 bytes, of which only 10 come
        conn.send_data(stream_id, b"\x00" + struct.pack(">I", 1000) + b"x" * 10, end_stream=end)
