"""The node gateway's file calls: checkpoints (``OfferCheckpoint``, ``PutCheckpointFile``,
``GetCheckpointFile``; docs/checkpoints.md) and an output file asked for (``PutOutputFile``;
docs/capsule.md#on-the-node-backend). Authenticated by the node's control credential as the
control stream is, beside it so that a large file never delays a heartbeat. The rules are
``application/node_checkpoints.py``'s and ``application/node_output_fetch.py``'s."""

from __future__ import annotations

from collections.abc import AsyncIterator

from grpclib.server import Stream

from adapters.grpc.checkpoint_codec import file_named, offer_from
from adapters.grpc.errors import bearer, grpc_error
from application import node_checkpoints, node_output_fetch
from application.context import Context
from application.enrollment import authenticate_node
from domain.errors import InvalidInput, TunePlaneError
from proto import node_control_pb2 as pb


class CheckpointCalls:
    """Mixed into the node gateway's service (``NodeGateway``)."""

    ctx: Context

    async def _node(self, metadata: object) -> str:
        return (await authenticate_node(self.ctx, bearer(metadata))).node

    async def OfferCheckpoint(self, stream: Stream[pb.CheckpointOffer, pb.CheckpointWants]) -> None:
        request = await stream.recv_message()
        assert request is not None
        try:
            node = await self._node(stream.metadata)
            recorded, missing = await node_checkpoints.offer(self.ctx, node, offer_from(request))
        except TunePlaneError as exc:
            raise grpc_error(exc) from None
        await stream.send_message(pb.CheckpointWants(recorded=recorded, sha256=missing))

    async def PutCheckpointFile(
        self, stream: Stream[pb.CheckpointFilePiece, pb.CheckpointFileStored]
    ) -> None:
        try:
            node = await self._node(stream.metadata)
            first = await stream.recv_message()
            if first is None:
                raise InvalidInput("no file was sent", fix="upgrade the daemon")
            ref, job_id, sha256 = file_named(first.ref, first.job_id, first.sha256)

            async def pieces() -> AsyncIterator[bytes]:
                yield first.data
                async for piece in stream:
                    yield piece.data

            await node_checkpoints.put_file(self.ctx, node, ref, job_id, sha256, pieces())
        except TunePlaneError as exc:
            raise grpc_error(exc) from None
        await stream.send_message(pb.CheckpointFileStored())

    async def GetCheckpointFile(
        self, stream: Stream[pb.CheckpointFileRequest, pb.CheckpointFilePiece]
    ) -> None:
        request = await stream.recv_message()
        assert request is not None
        try:
            node = await self._node(stream.metadata)
            ref, job_id, sha256 = file_named(request.ref, request.job_id, request.sha256)
            async for chunk in node_checkpoints.send_file(self.ctx, node, ref, job_id, sha256):
                await stream.send_message(pb.CheckpointFilePiece(data=chunk))
        except TunePlaneError as exc:
            raise grpc_error(exc) from None

    async def PutOutputFile(self, stream: Stream[pb.OutputFilePiece, pb.OutputFileStored]) -> None:
        try:
            node = await self._node(stream.metadata)
            first = await stream.recv_message()
            if first is None or not first.request_id:
                raise InvalidInput("the first piece names no request", fix="upgrade the daemon")

            async def pieces() -> AsyncIterator[bytes]:
                yield first.data
                async for piece in stream:
                    yield piece.data

            await node_output_fetch.receive(self.ctx, node, first.request_id, first.error, pieces())
        except TunePlaneError as exc:
            raise grpc_error(exc) from None
        await stream.send_message(pb.OutputFileStored())
