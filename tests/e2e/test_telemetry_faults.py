"""The telemetry path under faults, with real processes: `tp gateway telemetry` killed with
SIGKILL every 2 s while 8 collectors stream 1,000,000 points; the same with the collectors
killed; the gateway down while the files grow, until every collector retries at its longest
pause.

What must hold: every point written is stored, none twice, each with the value written.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.telemetry_rig import Rig
from tests.support.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MEMBERS = 8
RECORDS = 31_250  # records per member, 4 scalars each: 1,000,000 points in all
CHUNKS = 25  # one a second: the stream lasts longer than ten kills, however fast ingest is


@pytest.fixture
async def rig(tmp_path: Path, pg_url: str, pg_engine: AsyncEngine) -> AsyncIterator[Rig]:
    r = Rig(tmp_path, pg_url)
    await r.add_members(pg_engine, MEMBERS)
    try:
        yield r
    finally:
        r.stop()


async def stream_with_kills(rig: Rig, kill: str, seconds: float = 2.0) -> int:
    """Write the files in chunks (one a second) while killing ``kill`` every ``seconds``;
    keep killing until every chunk is written and stored, or a minute passed and every chunk is
    written. Returns the kills."""
    rig.start_gateway()
    for i in range(MEMBERS):
        rig.start_collector(i)
    kills, written, t0 = 0, 0, time.monotonic()
    next_kill, next_chunk = t0 + seconds, t0
    while written < CHUNKS or time.monotonic() - t0 < 60:  # a loaded machine writes slower
        now = time.monotonic()
        if written < CHUNKS and now >= next_chunk:
            rig.write(RECORDS // CHUNKS)
            written, next_chunk = written + 1, now + 1.0
        if now >= next_kill:
            if kill == "gateway":
                rig.kill_gateway()
                rig.start_gateway()
            else:
                victim = kills % MEMBERS
                rig.kill_collector(victim)
                rig.start_collector(victim)
            kills, next_kill = kills + 1, now + seconds
        if written == CHUNKS and await rig.stored() >= rig.expected():
            break
        await asyncio.sleep(0.1)
    return kills


async def test_the_gateway_killed_every_two_seconds_loses_and_doubles_nothing(rig: Rig) -> None:
    kills = await stream_with_kills(rig, "gateway")
    await rig.wait_stored(within=120)
    assert rig.expected() == 1_000_000
    assert kills >= 5
    assert await rig.mismatches() == []


async def test_collectors_killed_every_two_seconds_lose_and_double_nothing(rig: Rig) -> None:
    kills = await stream_with_kills(rig, "collector")
    await rig.wait_stored(within=120)
    assert rig.expected() == 1_000_000
    assert kills >= 5
    assert await rig.mismatches() == []


def every_collector_logged(rig: Rig, text: str) -> bool:
    logs = (rig.root / f"collector-{i}.log" for i in range(MEMBERS))
    return all(log.exists() and text in log.read_text(errors="replace") for log in logs)


async def test_a_gateway_down_until_every_collector_backed_off_costs_nothing(rig: Rig) -> None:
    # the cap of the collectors' pause between two attempts (5 s by default): the same back-off
    # reaches it, in a few seconds instead of up to half a minute
    rig.extra_env["TUNEPLANE_COLLECTOR_RETRY_MAX_SECONDS"] = "1"
    for i in range(MEMBERS):
        rig.start_collector(i)  # no gateway yet: collectors spool and retry
    # The files grow while every collector fails again and again, until its pause between two
    # attempts reached its cap (adapters/grpc/telemetry_client.py logs attempts 1 and 10):
    # from then on the outage's length changes nothing but how many pauses it lasts.
    for attempt in (None, 1, 10, 10):
        if attempt is not None:
            failed = f"sending again (attempt {attempt})"
            logged = functools.partial(every_collector_logged, rig, failed)
            await until(logged, what=failed, within=120)
        rig.write(1000)
    assert await rig.stored() == 0
    rig.start_gateway()
    await rig.wait_stored(within=120)
    assert await rig.mismatches() == []
