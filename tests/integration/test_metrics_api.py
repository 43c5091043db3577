"""The metrics routes in-process (an ASGI client) over PostgreSQL: canonical curves
across attempts, bounded answers, the raw inspector's pages, visibility and bad input."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from application.auth import bootstrap_admin, create_token
from domain.auth import Role, User
from domain.telemetry import MemberScope, SourceBatch
from domain.telemetry_ports import CollectorCounters
from entrypoints.api.app import create_app
from tests.contract.builders import a_job, a_member, an_attempt
from tests.support.asgi import asgi_transport
from tests.support.context import memory_context
from tests.support.points import source_batch

pytestmark = pytest.mark.integration
NOW = datetime(2026, 12, 3, tzinfo=UTC)


def points(source: str, tag: str, steps: range, value: float) -> SourceBatch:
    n = len(steps)
    offsets, walls = [s * 50 for s in steps], [1.7e9 + s for s in steps]
    return source_batch(source, "tfevents", [tag] * n, offsets, steps, walls, [value] * n)


@pytest.fixture
async def setup(tmp_path: Path, pg_url: str, pg_engine: AsyncEngine) -> AsyncIterator[Any]:
    pool = await create_pool(pg_url)
    store = PostgresMetrics(pool)
    ctx = dataclasses.replace(
        memory_context(tmp_path), uow=lambda: PostgresUnitOfWork(pg_engine), metrics=store
    )
    admin = await bootstrap_admin(ctx)
    job = a_job(owner="alice")
    async with ctx.uow() as uow:
        for name in ("alice", "bob"):
            await uow.policy.put_user(User(name, Role.MEMBER, ("default",), created_at=NOW))
        await uow.jobs.add(job)
        scopes = []
        for number in (1, 2):
            attempt = an_attempt(job, number)
            await uow.attempts.add(attempt)
            for index in (0, 1):
                member = a_member(attempt, index)
                await uow.members.add(member)
                scopes.append(MemberScope(job.id, attempt.id, member.id, index))
        await uow.commit()
    none = CollectorCounters()
    await store.append(scopes[0], [points("ev#0", "loss", range(0, 1000), 1.0)], none, NOW)
    await store.append(scopes[1], [points("ev#0", "other", range(0, 10), 5.0)], none, NOW)
    resumed = points("ev#0", "loss", range(500, 800), 2.0)
    resumed.points.value[-1] = float("nan")  # type: ignore[attr-defined]
    await store.append(scopes[2], [resumed], CollectorCounters(3, 0, 17), NOW)
    # add_scalars("acc", {"train": ..., "val": ...}): one tag, a directory per sub-run
    train = points("acc_train/events.out.tfevents.1#0", "acc", range(0, 10), 0.5)
    val = points("acc_val/events.out.tfevents.1#0", "acc", range(0, 10), 0.25)
    val.points.value[3] = float("inf")  # type: ignore[attr-defined]
    val.points.value[4] = float("-inf")  # type: ignore[attr-defined]
    await store.append(scopes[0], [train, val], none, NOW)
    app = create_app(ctx, supervise=False)
    # httpx's ASGI transport runs the app on this test's event loop (the database pools are
    # bound to it); litestar's test client would run it on a loop of its own
    transport = asgi_transport(app)
    headers = {"Authorization": f"Bearer {admin}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        yield c, ctx, job.id
    await pool.close()


async def test_the_summary_names_canonical_metrics_and_counters(setup: Any) -> None:
    client, _, job_id = setup
    r = await client.get(f"/v1/jobs/{job_id}/metrics")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["canonical"] == ["acc", "loss"]  # member 1's metric is not canonical
    assert {(s["attempt"], s["member"], s["tag"], s["run"]) for s in body["series"]} == {
        (1, 0, "loss", ""),
        (1, 1, "other", ""),
        (2, 0, "loss", ""),
        (1, 0, "acc", "acc_train"),
        (1, 0, "acc", "acc_val"),
    }
    assert body["runs"] == {"acc": ["acc_train", "acc_val"], "loss": [""]}
    resumed = next(s for s in body["series"] if s["attempt"] == 2)
    assert (resumed["first_step"], resumed["last_step"], resumed["count"]) == (500, 799, 300)
    assert resumed["last_value"] == "NaN"  # JSON has no NaN: a string (docs/http-api.md)
    counters = {c["member_id"]: c for c in body["collectors"]}
    assert sorted((c["corrupt_records"], c["dropped_bytes"]) for c in counters.values()) == [
        (0, 0),
        (0, 0),
        (3, 17),
    ]


async def test_a_curve_is_bounded_and_a_later_attempt_wins_its_steps(setup: Any) -> None:
    client, _, job_id = setup
    r = await client.get(f"/v1/jobs/{job_id}/metrics/curve", params={"tag": "loss", "points": 100})
    assert r.status_code == 200, r.text
    curve = r.json()
    assert (curve["start"], curve["end"]) == (0, 999)
    assert curve["width"] == 64 and len(curve["merged"]) <= 100
    assert [a["attempt"] for a in curve["attempts"]] == [1, 2]
    assert curve["attempts"][0]["shown"] == [[0, 499], [800, 999]]
    by_step = {p["first_step"]: p for p in curve["merged"]}
    assert by_step[0]["attempt"] == 1 and by_step[0]["max"] == 1.0
    assert by_step[576]["attempt"] == 2 and by_step[576]["max"] == 2.0
    assert by_step[960]["attempt"] == 1
    assert sum(p["count"] for p in curve["attempts"][0]["points"]) == 1000
    # a zoom window small enough for raw points
    r = await client.get(
        f"/v1/jobs/{job_id}/metrics/curve", params={"tag": "loss", "start": 490, "end": 509}
    )
    zoom = r.json()
    assert zoom["width"] == 1
    assert [(p["first_step"], p["attempt"], p["last"]) for p in zoom["merged"]][9:11] == [
        (499, 1, 1.0),
        (500, 2, 2.0),
    ]


async def test_sub_runs_of_one_tag_are_separate_curves(setup: Any) -> None:
    """add_scalars writes each sub-run to a directory of its own under one tag: two curves,
    never merged, each answerable alone; a value that is not finite is a string."""
    client, _, job_id = setup
    base = f"/v1/jobs/{job_id}/metrics/curve"
    curve = (await client.get(base, params={"tag": "acc"})).json()
    assert [(a["attempt"], a["run"]) for a in curve["attempts"]] == [
        (1, "acc_train"),
        (1, "acc_val"),
    ]
    merged = {(p["run"], p["first_step"]): p for p in curve["merged"]}
    assert len(merged) == 20  # ten steps of each run, none merged into the other
    assert (merged[("acc_train", 3)]["last"], merged[("acc_val", 3)]["last"]) == (0.5, "Infinity")
    assert merged[("acc_val", 4)]["last"] == "-Infinity"
    assert merged[("acc_val", 4)]["max"] is None  # a bucket's max covers finite values only
    one = (await client.get(base, params={"tag": "acc", "run": "acc_val"})).json()
    assert [a["run"] for a in one["attempts"]] == ["acc_val"]
    assert {p["run"] for p in one["merged"]} == {"acc_val"}
    r = await client.get(base, params={"tag": "acc", "run": "acc_test"})
    assert r.status_code == 404 and r.json()["field"] == "run"
    assert "'acc_train', 'acc_val'" in r.json()["fix"]
    raw = await client.get(
        f"/v1/jobs/{job_id}/metrics/raw",
        params={"attempt": 1, "source": "acc_val/events.out.tfevents.1#0", "tag": "acc"},
    )
    values = [p["value"] for p in raw.json()["points"]]
    assert values[2:5] == [0.25, "Infinity", "-Infinity"]
    doc = (await client.get("/schema/openapi.json")).json()
    number = doc["components"]["schemas"]["RawPointOut"]["properties"]["value"]
    assert "NaN" in str(number) and "Infinity" in str(number)


async def test_the_raw_inspector_pages_through_one_series(setup: Any) -> None:
    client, _, job_id = setup
    params: dict[str, Any] = {"attempt": 2, "member": 0, "source": "ev#0", "tag": "loss"}
    seen: list[int] = []
    while True:
        r = await client.get(f"/v1/jobs/{job_id}/metrics/raw", params={**params, "limit": 128})
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [p["step"] for p in page["points"]]
        if page["next_start"] is None:
            break
        params.update(start=page["next_start"], after_offset=page["next_after_offset"])
    assert seen == list(range(500, 800))


async def test_bad_input_and_other_users_get_clear_answers(setup: Any) -> None:
    client, ctx, job_id = setup
    base = f"/v1/jobs/{job_id}/metrics"
    for params in ({"tag": "loss", "points": 0}, {"tag": "loss", "points": 10_001}, {}):
        assert (await client.get(base + "/curve", params=params)).status_code == 400
    r = await client.get(base + "/curve", params={"tag": "nope"})
    assert r.status_code == 404 and "tp job metrics" in r.json()["fix"]
    r = await client.get(base + "/curve", params={"tag": "loss", "start": 10, "end": 5})
    assert r.status_code == 422 and "start <= end" in r.json()["fix"]
    r = await client.get(base + "/raw", params={"attempt": 1, "source": "x", "tag": "loss"})
    assert r.status_code == 404 and r.json()["field"] == "source"
    bob = {"Authorization": f"Bearer {await create_token(ctx, 'bob')}"}
    assert (await client.get(base, headers=bob)).status_code == 404
    alice = {"Authorization": f"Bearer {await create_token(ctx, 'alice')}"}
    assert (await client.get(base, headers=alice)).status_code == 200


async def test_a_curve_over_a_time_range(setup: Any) -> None:
    client, _, job_id = setup
    base = f"/v1/jobs/{job_id}/metrics/curve"
    t = 1.7e9  # each point's wall time is t + its step
    r = await client.get(base, params={"tag": "loss", "start_time": t + 100, "end_time": t + 199.5})
    curve = r.json()
    assert r.status_code == 200, r.text
    assert [a["attempt"] for a in curve["attempts"]] == [1]  # attempt 2 logged later steps
    assert [p["first_step"] for p in curve["merged"]] == list(range(100, 200))
    r = await client.get(base, params={"tag": "loss", "start_time": t + 600, "end_time": t + 650})
    curve = r.json()
    assert [a["attempt"] for a in curve["attempts"]] == [1, 2]
    assert {p["attempt"] for p in curve["merged"]} == {2}
    assert [p["first_step"] for p in curve["merged"]] == list(range(600, 651))
    r = await client.get(base, params={"tag": "loss", "start_time": t + 5000})
    assert r.status_code == 200 and r.json()["attempts"] == []
    r = await client.get(base, params={"tag": "loss", "start": 1, "start_time": t})
    assert r.status_code == 422 and r.json()["field"] == "start_time"
    # an empty time range is refused as an empty step range is, not answered with no points
    r = await client.get(base, params={"tag": "loss", "start_time": t + 650, "end_time": t + 600})
    assert r.status_code == 422 and r.json()["field"] == "end_time", r.text
    assert "start_time <= end_time" in r.json()["fix"]
