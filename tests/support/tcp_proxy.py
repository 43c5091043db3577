"""A TCP proxy on loopback that can partition: the network between a node daemon and its
gateway, for fault tests.

``partition()`` black-holes the link like a real partition: open connections stop carrying
bytes in both directions (nothing is closed, nothing is answered) and new connections are
accepted but never forwarded. ``heal()`` closes the black-holed connections (as a peer's
TCP stack eventually would) and forwards new ones again.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._partitioned = asyncio.Event()
        self.connections = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._open):
            w.close()
        if self._server is not None:
            await self._server.wait_closed()

    def partition(self) -> None:
        self._partitioned.set()

    def heal(self) -> None:
        self._partitioned.clear()
        for w in list(self._open):  # the black-holed connections are dead by now
            w.transport.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(writer)
        upstream_w: asyncio.StreamWriter | None = None
        try:
            if self._partitioned.is_set():
                await self._black_hole(reader)
                return
            up_r, upstream_w = await asyncio.open_connection(*self.target)
            self._open.add(upstream_w)
            await asyncio.gather(self._pipe(reader, upstream_w), self._pipe(up_r, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, upstream_w):
                if w is not None:
                    self._open.discard(w)
                    w.transport.abort()

    async def _black_hole(self, reader: asyncio.StreamReader) -> None:
        while not reader.at_eof() and self._partitioned.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(65536), 0.5)  # swallowed

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                writer.transport.abort()
                return
            if self._partitioned.is_set():
                await self._black_hole(reader)  # this connection carries nothing any more
                writer.transport.abort()
                return
            writer.write(data)
            await writer.drain()
