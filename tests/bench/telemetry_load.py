"""Load generator for bench_telemetry_streams.py: one process playing many collectors.

``python -m tests.bench.telemetry_load PLAN`` reads a JSON plan (gateway addresses, CA file, the
members it plays with their tokens, points per batch), opens one TLS connection and one
``Append`` stream per member (as collectors on separate hosts would), prints ``ready``, and waits
for ``go START SECONDS`` on stdin (START: epoch seconds). From START, each stream sends a batch of
``points`` points (``points / 4`` records of 4 tags) every second, its phase spread over the
second, until START + SECONDS; then it waits until every batch is acknowledged and writes the
results (``PLAN.out.json``) and exits.

Like the collector's shipper, a stream that fails is opened again (the same address; after a
short jittered pause) and every unacknowledged batch is sent again on it, with the same record
offsets: the gateway's watermarks store each record once. Records are numbered per member
(step = offset = record index), so the database can be checked exactly afterwards.

The plan's ``client`` picks the HTTP/2 client: ``grpclib`` (this module, the collector's),
``aio`` (``telemetry_load_aio.py``) or ``raw`` (``telemetry_load_raw.py``). One timer ticks
every player in turn (a coroutine sleeping per player cost a timer and a task step per batch).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import sys
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import uvloop
from grpclib.client import Channel

from adapters.grpc.telemetry_client import ACKS, CUMULATIVE, open_channel
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryStub

TAGS = ["train/loss", "train/reward", "train/lr", "grad_norm"]


@functools.cache
def _shape(records: int) -> tuple[np.ndarray, bytes, np.ndarray]:
    """Per batch size: each point's record index, the tag column, each point's tag as float."""
    tag = np.tile(np.arange(len(TAGS), dtype="<u4"), records)
    return np.repeat(np.arange(records, dtype="<i8"), len(TAGS)), tag.tobytes(), tag.astype("<f8")


def batch(member: dict[str, str], first: int, records: int) -> pb.SourceBatch:
    index, tag, tag_f = _shape(records)
    steps = index + first
    step_bytes, step_f = steps.tobytes(), steps.astype("<f8")
    return pb.SourceBatch(
        source="metrics.jsonl#0",
        kind="jsonl",
        tag_names=TAGS,
        offset=step_bytes,
        tag=tag,
        step=step_bytes,
        wall_time=(step_f + 1.7e9).tobytes(),
        value=(step_f * 4 + tag_f).tobytes(),
    )


@dataclass
class Player:
    member: dict[str, str]
    address: tuple[str, int]
    ca: Path
    records: int  # per batch
    next_record: int = 0
    unacked: dict[int, tuple[int, float]] = field(default_factory=dict)  # first record -> (n, t)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (sent at, seconds)
    sent: int = 0
    reconnects: int = 0
    channel: Channel | None = None
    wanted: asyncio.Queue[int] = field(default_factory=asyncio.Queue)  # first records to send
    cumulative: bool = False  # asks for cumulative acks (grpclib and raw clients)

    async def connect(self) -> None:
        self.channel = open_channel(*self.address, self.ca)
        await self.channel.__connect__()

    async def reopen(self) -> None:
        """Closes the failed connection, pauses (jittered), and opens another (lazily)."""
        if self.channel is not None:
            self.channel.close()
        await asyncio.sleep(random.uniform(0.05, 0.5))
        self.channel = open_channel(*self.address, self.ca)

    async def close(self) -> None:
        if self.channel is not None:
            self.channel.close()

    async def run(self, ready: asyncio.Event) -> None:
        """Streams until cancelled, reopening on failure and resending what is unacknowledged."""
        while True:
            try:
                await self._stream(ready)
            except asyncio.CancelledError:
                raise
            except Exception:  # any failure: reopen, as the shipper does
                self.reconnects += 1
                await self.reopen()
                while not self.wanted.empty():  # resend in record order, same offsets
                    self.wanted.get_nowait()
                for first in sorted(self.unacked):
                    self.wanted.put_nowait(first)

    async def _stream(self, ready: asyncio.Event) -> None:
        assert self.channel is not None
        stub = TelemetryStub(self.channel)
        meta = {"authorization": f"Bearer {self.member['token']}"}
        if self.cumulative:
            meta[ACKS] = CUMULATIVE
        async with stub.Append.open(metadata=meta) as stream:
            await stream.send_request()
            ready.set()
            await self.pump(stream, stream.send_message)

    async def pump(
        self, acks: AsyncIterable[pb.Ack], send: Callable[[pb.Batch], Awaitable[Any]]
    ) -> None:
        """Sends the wanted batches on an open stream (``send``) while a task reads ``acks``;
        returns never: raises ``ConnectionError`` once the acks end (the stream broke)."""
        in_flight: dict[int, int] = {}  # seq -> first record
        seq = 0

        async def read() -> None:
            async for ack in acks:
                now = time.time()
                for s in [s for s in in_flight if s <= ack.seq]:  # cumulative: all up to it
                    first = in_flight.pop(s)
                    if first in self.unacked:
                        _, t = self.unacked.pop(first)
                        self.latencies.append((t, now - t))

        reader = asyncio.create_task(read())
        me = asyncio.current_task()
        assert me is not None
        ended = False

        def on_end(task: asyncio.Task[None]) -> None:  # the stream broke: stop sending
            nonlocal ended
            if not task.cancelled():
                ended = True
                me.cancel()

        reader.add_done_callback(on_end)  # no asyncio.wait (a future and a set) per batch
        try:
            while True:
                first = await self.wanted.get()
                if first not in self.unacked:
                    continue
                n, _ = self.unacked[first]
                seq += 1
                in_flight[seq] = first
                message = pb.Batch(
                    seq=seq,
                    attempt=self.member["attempt"],
                    member=self.member["member"],
                    sources=[batch(self.member, first, n)],
                )
                await send(message)
        except asyncio.CancelledError:
            if ended and me.uncancel() == 0:
                raise ConnectionError("the gateway ended the stream") from None
            raise
        finally:
            reader.remove_done_callback(on_end)
            reader.cancel()

    def tick(self) -> None:
        """Queue the next batch (new records)."""
        first = self.next_record
        self.next_record += self.records
        self.unacked[first] = (self.records, time.time())
        self.sent += 1
        self.due(first)

    def due(self, first: int) -> None:
        """A batch to send: its stream's task sends it."""
        self.wanted.put_nowait(first)


async def main(plan_file: Path) -> None:
    plan = json.loads(plan_file.read_text())  # noqa: ASYNC240 - before anything runs
    ca = Path(plan["ca"])
    addresses = [(h, int(p)) for h, p in plan["gateways"]]
    records = plan["points"] // len(TAGS)
    kind: type[Player] = Player
    if plan.get("client") == "aio":  # grpc.aio (C-core): telemetry_load_aio.py
        from tests.bench.telemetry_load_aio import AioPlayer

        kind = AioPlayer
    elif plan.get("client") == "raw":  # frames written by hand: telemetry_load_raw.py
        from tests.bench.telemetry_load_raw import RawPlayer

        kind = RawPlayer
    players = [
        kind(m, addresses[m["index"] % len(addresses)], ca, records) for m in plan["members"]
    ]
    for p in players:
        p.cumulative = plan.get("acks") == CUMULATIVE
    sem = asyncio.Semaphore(16)

    async def connect(p: Player) -> None:
        async with sem:
            await p.connect()

    await asyncio.gather(*(connect(p) for p in players))
    events = [asyncio.Event() for _ in players]
    tasks = [asyncio.create_task(p.run(e)) for p, e in zip(players, events, strict=True)]
    await asyncio.gather(*(e.wait() for e in events))
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    _, start, seconds = line.split()
    start_at, end_at = float(start), float(start) + float(seconds)
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0 = time.process_time()

    n = len(players)
    k = 0  # ticks so far: player k % n, second k // n (phases spread over the second)
    while (due := start_at + k // n + (k % n) / n) < end_at:  # one timer, not one per player
        wait = due - time.time()
        if wait > 0.001:  # what is due within a millisecond is ticked now
            await asyncio.sleep(wait)
        players[k % n].tick()
        k += 1
    deadline = time.time() + plan.get("drain_seconds", 120)
    while any(p.unacked for p in players) and time.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    cpu = time.process_time() - cpu0  # sending until the last ack
    drained = time.time()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for p in players:
        await p.close()
    out = {
        "latencies": [x for p in players for x in p.latencies],
        "sent": {p.member["member"]: p.sent for p in players},
        "records": {p.member["member"]: p.next_record for p in players},
        "unacked": sum(len(p.unacked) for p in players),
        "reconnects": sum(p.reconnects for p in players),
        "cpu": cpu,
        "drained": drained,
    }
    Path(str(plan_file) + ".out.json").write_text(json.dumps(out))  # noqa: ASYNC240 - the end


if __name__ == "__main__":
    uvloop.run(main(Path(sys.argv[1])))
