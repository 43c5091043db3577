"""Webhooks survive the API process (docs/notifications.md#delivery): `tp serve` killed with
SIGKILL while a delivery is in flight, and a change made while no API process runs, are both
delivered by the next process, in order, with the same event ids (at least once: the one in
flight is sent again). A real `tp serve` against the test's PostgreSQL; a real receiver on
loopback; no container engine (none is needed)."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from adapters.postgres.webhook_tables import webhook_outbox, webhook_subscriptions
from domain.lifecycle import JobState
from domain.webhooks import verify
from tests.contract.builders import a_job
from tests.fixtures.server import _admin_token, start_servers, stop_servers
from tests.support.waiting import until
from tests.support.webhook_receiver import receiver

pytestmark = pytest.mark.e2e
NO_ENGINE = "unix:///nonexistent/no-container-engine-here.sock"
ENV = {
    "TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK": "on",
    "TUNEPLANE_WEBHOOK_TIMEOUT_SECONDS": "1",  # a claim's lease: 3 s
    "TUNEPLANE_WEBHOOK_BACKOFF_SECONDS": "0.05",
    "TUNEPLANE_WEBHOOK_POLL_SECONDS": "0.2",
}


async def test_a_killed_api_process_loses_no_webhook(
    pg_url: str, pg_engine: AsyncEngine, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    token = await _admin_token(pg_url, NO_ENGINE, state)
    first = await asyncio.to_thread(start_servers, pg_url, NO_ENGINE, state, 1, ENV)
    second = None
    try:
        with receiver() as rec:
            rec.hanging.add("/h")
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as c:
                r = await c.post(f"{first.url}/v1/webhooks", json={"url": rec.url + "/h"})
                assert r.status_code == 201, r.text
                secret = r.json()["secret"]
            async with pg_engine.connect() as conn:  # sealed at rest, under STATE/secrets.key
                stored = (await conn.execute(select(webhook_subscriptions))).mappings().one()
            assert stored["secret"] is None and secret not in stored["sealed_secret"]
            assert (state / "secrets.key").stat().st_mode & 0o777 == 0o600
            job = a_job(owner="admin")
            async with PostgresUnitOfWork(pg_engine) as uow:
                await uow.jobs.add(job)
                await uow.commit()
            await until(lambda: rec.waiting == 1, what="the delivery in flight, hanging")
            first.procs[0].send_signal(signal.SIGKILL)  # between the send and its record
            first.procs[0].wait(10)
            moved = job.moved(JobState.STARTING, job.updated_at + timedelta(seconds=1))
            async with PostgresUnitOfWork(pg_engine) as uow:  # while no API process runs
                await uow.jobs.update(moved, job.state)
                await uow.commit()
            rec.hanging.clear()
            rec.release.set()
            second = await asyncio.to_thread(start_servers, pg_url, NO_ENGINE, state, 1, ENV)
            await until(lambda: len(rec.at("/h")) >= 3, what="both changes delivered after restart")
            got = rec.at("/h")
            ids = [g.headers["TunePlane-Event-Id"] for g in got]
            # the one in flight again (same id: the receiver's idempotency key), then the next
            assert ids == [f"{job.id}.1", f"{job.id}.1", f"{job.id}.2"], ids
            assert [json.loads(g.body)["job"]["state"] for g in got] == [
                "pending", "pending", "starting",
            ]  # fmt: skip
            for g in got:
                header = g.headers["TunePlane-Signature"]
                assert verify(secret, header, g.body, int(header.split(",")[0][2:]))

            async def all_delivered() -> bool:
                async with pg_engine.connect() as conn:
                    rows = (await conn.execute(select(webhook_outbox.c.status))).all()
                return [r.status for r in rows] == ["delivered", "delivered"]

            await until(all_delivered, what="the outbox recorded both as delivered")
    finally:
        stop_servers(first)
        if second is not None:
            stop_servers(second)
