"""GET /v1/jobs's list columns (progress, queue positions, GPUs/CPUs) and its text search
``q=``, in-process over in-memory adapters (the PostgreSQL side of the search and the progress
read is tests/contract/test_job_search.py; the page is tests/e2e/test_console_lists.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from adapters.memory.backend import MemoryBackend
from application import jobs, submissions
from application.auth import create_token
from application.context import Context
from domain.auth import Principal
from domain.errors import InvalidInput
from entrypoints.api.app import create_app
from tests.support.context import ALICE, FakeClock, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctx(tmp_path: Path, clock: FakeClock) -> Context:
    return memory_context(tmp_path, MemoryBackend(), clock)


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[Any]:
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        yield c


async def submit(ctx: Context, who: Principal, experiment: str) -> str:
    preview = await submissions.create_preview(ctx, who, an_intent(experiment=experiment))
    receipt = await submissions.commit(ctx, who, preview.id, preview.digest, str(uuid.uuid4()))
    return receipt.job_id


async def test_a_page_carries_positions_progress_and_resources(
    client: Any, ctx: Context, clock: FakeClock
) -> None:
    alice = {"Authorization": f"Bearer {await create_token(ctx, 'alice')}"}
    first = await submit(ctx, ALICE, "a")
    clock.advance(minutes=1)
    second = await submit(ctx, ALICE, "b")
    clock.advance(minutes=1)
    third = await submit(ctx, ALICE, "c")
    clock.advance(minutes=1)
    assert (await client.post(f"/v1/jobs/{second}/cancel", headers=alice)).status_code == 202

    page = (await client.get("/v1/jobs", headers=alice)).json()
    by_id = {j["id"]: j for j in page["jobs"]}
    assert page["pending_total"] == 2  # the cancelled one left the queue
    assert by_id[first]["progress"]["queue_position"] == 1  # FIFO within the queue
    assert by_id[third]["progress"]["queue_position"] == 2
    assert by_id[first]["progress"]["pending_since"].startswith("20")
    ended = by_id[second]["progress"]
    assert ended["queue_position"] is None and ended["pending_since"] is None
    assert ended["ended_at"] == by_id[second]["updated_at"] and ended["started_at"] is None
    assert {j["progress"]["attempts"] for j in page["jobs"]} == {0}
    assert (by_id[first]["gpus"], by_id[first]["cpus"]) == (0, 1.0)  # profile cpu:1
    # a page of ended jobs only makes no queue pass
    done = (await client.get("/v1/jobs", params={"state": "cancelled"}, headers=alice)).json()
    assert done["pending_total"] is None and [j["id"] for j in done["jobs"]] == [second]
    # a single job's answer has no list progress
    single = (await client.get(f"/v1/jobs/{first}", headers=alice)).json()
    assert single["progress"] is None and single["cpus"] == 1.0


async def test_search_is_literal_bounded_and_combined(client: Any, ctx: Context) -> None:
    alice = {"Authorization": f"Bearer {await create_token(ctx, 'alice')}"}
    under = await submit(ctx, ALICE, "lr_100")  # experiment names hold no % (catalog rule)
    plain = await submit(ctx, ALICE, "lrx100y")

    async def found(**params: Any) -> list[str]:
        answer = await client.get("/v1/jobs", params=params, headers=alice)
        assert answer.status_code == 200, answer.text
        return [j["id"] for j in answer.json()["jobs"]]

    assert await found(q="_100") == [under]  # _ is no wildcard
    assert await found(q="%") == []  # nor is %
    assert await found(q="LR") == [plain, under]
    assert await found(q="  ") == [plain, under]  # blank: no search
    assert await found(q="lr", state="cancelled") == []
    assert await found(q="alice", limit=1) == [plain]  # the owner; with a cursor after it

    for bad, words in [("x" * 201, "200"), ("a\x00b", "NUL"), ("a\nb", "control character")]:
        answer = await client.get("/v1/jobs", params={"q": bad}, headers=alice)
        assert answer.status_code in (400, 422), (bad, answer.text)  # edge or use case
        assert words in answer.text, answer.text


async def test_the_use_case_checks_the_search_text(ctx: Context) -> None:
    for bad in ["y" * 201, "tab\there", "nul\x00"]:
        with pytest.raises(InvalidInput) as refused:
            await jobs.list_jobs(
                ctx, ALICE, states=None, limit=5, cursor=None, everyone=False, search=bad
            )
        assert refused.value.field == "q" and refused.value.fix
