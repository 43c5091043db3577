"""A TCP relay in front of a server that can cut every connection (tests of the collector's
shipping and of the telemetry gateway's cumulative acks)."""

from __future__ import annotations

import asyncio

from tests.fixtures.server import free_port


class Proxy:
    """A TCP relay in front of the server that can cut every connection (as a gateway killed
    with SIGKILL does) and refuse new ones for a while."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()
        await self.server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self.writers |= {writer, up_writer}

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except OSError:
                pass
            finally:
                w.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
