"""The node daemon's end of the gateway's file calls (``domain.artifact_ports.
CheckpointCourier`` and ``OutputCourier``; docs/checkpoints.md, docs/capsule.md): one TLS
channel beside the control stream, each call authenticated with the node's control credential
as read from its file at that moment (so a rotation is followed)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

from grpclib.client import Channel
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from h2.exceptions import H2Error

from adapters.grpc.checkpoint_codec import offer_to
from adapters.grpc.codec_pieces import ref_to
from adapters.grpc.errors import from_grpc
from adapters.grpc.node_client import load_credential
from domain.errors import Unauthenticated, Unavailable
from domain.node_messages import CheckpointOffer
from domain.node_protocol import MemberRef
from proto import node_control_pb2 as pb
from proto.node_control_grpc import NodeControlStub

PIECE = 1024 * 1024  # bytes per piece of a file sent
OFFER_TIMEOUT = 60.0  # seconds an offer may take (files are sent without a deadline)
_LOST = (OSError, EOFError, ProtocolError, StreamTerminatedError, H2Error, TimeoutError)


class GrpcCheckpointCourier:
    def __init__(self, host: str, port: int, tls: ssl.SSLContext, state_dir: Path) -> None:
        self.host, self.port, self.tls, self.state_dir = host, port, tls, state_dir
        self._channel: Channel | None = None

    def _stub(self) -> NodeControlStub:
        if self._channel is None:
            self._channel = Channel(self.host, self.port, ssl=self.tls)
        return NodeControlStub(self._channel)

    def _metadata(self) -> dict[str, str]:
        stored = load_credential(self.state_dir)
        if stored is None:
            raise Unauthenticated("this node is not enrolled", fix="run `tp node run` to enroll")
        return {"authorization": f"Bearer {stored.credential}"}

    @contextmanager
    def _call(self, what: str) -> Iterator[None]:
        try:
            yield
        except GRPCError as exc:
            raise from_grpc(exc, what) from None
        except _LOST as exc:
            self.close()
            raise Unavailable(f"{what}: the gateway cannot be reached ({exc})") from None

    async def offer(self, offered: CheckpointOffer) -> tuple[bool, list[str]]:
        with self._call(f"offering checkpoint {offered.name}"):
            reply = await self._stub().OfferCheckpoint(offer_to(offered), metadata=self._metadata())
        return reply.recorded, list(reply.sha256)

    async def put_file(
        self, ref: MemberRef, job_id: str, sha256: str, content: AsyncIterator[bytes]
    ) -> None:
        with self._call(f"sending checkpoint file {sha256}"):
            async with self._stub().PutCheckpointFile.open(metadata=self._metadata()) as stream:
                first = pb.CheckpointFilePiece(ref=ref_to(ref), job_id=job_id, sha256=sha256)
                async for data in content:  # the first piece names the file
                    for offset in range(0, len(data), PIECE):
                        first.data = data[offset : offset + PIECE]
                        await stream.send_message(first)
                        first = pb.CheckpointFilePiece()
                if first.sha256:  # an empty file: one piece that names it
                    await stream.send_message(first)
                await stream.end()
                await stream.recv_message()

    async def put_output(
        self, request_id: str, content: AsyncIterator[bytes] | None, error: str = ""
    ) -> None:
        with self._call(f"sending the output file of request {request_id}"):
            async with self._stub().PutOutputFile.open(metadata=self._metadata()) as stream:
                first = pb.OutputFilePiece(request_id=request_id, error=error)
                async for data in content or _nothing():  # the first piece names the request
                    for offset in range(0, len(data), PIECE):
                        first.data = data[offset : offset + PIECE]
                        await stream.send_message(first)
                        first = pb.OutputFilePiece()
                if first.request_id:  # an empty file, or an error: one piece
                    await stream.send_message(first)
                await stream.end()
                await stream.recv_message()

    async def get_file(
        self, ref: MemberRef, job_id: str, sha256: str, path: str
    ) -> tuple[str, int]:
        request = pb.CheckpointFileRequest(ref=ref_to(ref), job_id=job_id, sha256=sha256)
        hashed, size = hashlib.sha256(), 0
        fd = await asyncio.to_thread(os.open, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with self._call(f"fetching checkpoint file {sha256}"):
                async with self._stub().GetCheckpointFile.open(metadata=self._metadata()) as stream:
                    await stream.send_message(request, end=True)
                    async for piece in stream:
                        hashed.update(piece.data)
                        size += len(piece.data)
                        await asyncio.to_thread(_write_all, fd, piece.data)
            await asyncio.to_thread(os.fsync, fd)
        finally:
            os.close(fd)
        return hashed.hexdigest(), size

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
