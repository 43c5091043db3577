"""An in-process courier (``domain.artifact_ports.CheckpointCourier`` and ``OutputCourier``)
for node ``node``: it calls the gateway's rules (``application/node_checkpoints.py``,
``node_output_fetch.py``) directly, as the gRPC calls do
after authenticating the node (adapters/grpc/node_checkpoint_service.py; the real calls over
TLS are exercised end to end by tests/e2e/test_retries.py). It counts the files it carried."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

from application import node_checkpoints, node_output_fetch
from application.context import Context
from domain.node_messages import CheckpointOffer
from domain.node_protocol import MemberRef


class DirectCourier:
    def __init__(self, ctx: Context, node: str) -> None:
        self.ctx, self.node = ctx, node
        self.sent: list[str] = []  # digests of the files put
        self.fetched: list[str] = []

    async def offer(self, offered: CheckpointOffer) -> tuple[bool, list[str]]:
        return await node_checkpoints.offer(self.ctx, self.node, offered)

    async def put_file(
        self, ref: MemberRef, job_id: str, sha256: str, content: AsyncIterator[bytes]
    ) -> None:
        await node_checkpoints.put_file(self.ctx, self.node, ref, job_id, sha256, content)
        self.sent.append(sha256)

    async def put_output(
        self, request_id: str, content: AsyncIterator[bytes] | None, error: str = ""
    ) -> None:
        await node_output_fetch.receive(self.ctx, self.node, request_id, error, content or _no())

    async def get_file(
        self, ref: MemberRef, job_id: str, sha256: str, path: str
    ) -> tuple[str, int]:
        data = b"".join(
            [c async for c in node_checkpoints.send_file(self.ctx, self.node, ref, job_id, sha256)]
        )
        await asyncio.to_thread(Path(path).write_bytes, data)
        self.fetched.append(sha256)
        return hashlib.sha256(data).hexdigest(), len(data)


async def _no() -> AsyncIterator[bytes]:
    return
    yield b""
