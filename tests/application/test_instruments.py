"""What the use cases report through ``Context.instruments`` (application/instruments.py), on
in-memory adapters with the real Prometheus adapter: commits and previews, a scheduling pass's
duration and its queue and pool gauges. (The gang phases, node streams and the telemetry
gateway are scraped live in tests/e2e/test_up.py.)"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.observability.prometheus import PrometheusInstruments
from application import submissions
from application.context import Context
from application.scheduler import Scheduler
from domain.fleet import Pool
from tests.support.context import ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit

A = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")  # 3 nodes of 8 GPUs


def samples(measure: PrometheusInstruments) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(measure.exposition().decode())
        for s in f.samples
    }


@pytest.fixture
def measure() -> PrometheusInstruments:
    return PrometheusInstruments()


@pytest.fixture
def ctx(tmp_path: Path, measure: PrometheusInstruments) -> Context:
    return dataclasses.replace(memory_context(tmp_path, pools=(A,)), instruments=measure)


async def commit(ctx: Context, profile: str, key: str | None = None) -> str:
    intent = an_intent(profiles=(profile,), params={"command": "train"})
    preview = await submissions.create_preview(ctx, ALICE, intent)
    key = key or str(uuid.uuid4())
    await submissions.commit(ctx, ALICE, preview.id, preview.digest, key)
    again = await submissions.commit(ctx, ALICE, preview.id, preview.digest, key)  # a replay
    return again.job_id


async def test_commits_previews_and_a_pass_are_measured_with_bounded_labels(
    ctx: Context, measure: PrometheusInstruments
) -> None:
    first = await commit(ctx, "h200:16")  # fits: two nodes
    second = await commit(ctx, "h200:16")  # waits: 8 GPUs left
    result = await Scheduler(ctx).pass_once()
    assert result.reserved == [first]
    got = samples(measure)
    assert got[("tuneplane_submissions_previews_total", frozenset())] == 2
    assert got[("tuneplane_submissions_commits_total", frozenset({("outcome", "created")}))] == 2
    assert got[("tuneplane_submissions_commits_total", frozenset({("outcome", "replayed")}))] == 2
    assert got[("tuneplane_scheduler_pass_duration_seconds_count", frozenset())] == 1
    queue = frozenset({("queue", "default")})
    assert got[("tuneplane_scheduler_pending_jobs", queue)] == 1  # the second waits
    assert got[("tuneplane_scheduler_reserved_jobs", queue)] == 1
    assert got[("tuneplane_scheduler_reserved_gpus", queue)] == 16
    assert got[("tuneplane_scheduler_free_gpus", frozenset({("pool", "a")}))] == 8
    placed = frozenset({("queue", "default"), ("outcome", "reserved")})
    assert got[("tuneplane_scheduler_placements_total", placed)] == 1
    text = measure.exposition().decode()
    assert first not in text and second not in text and ALICE.name not in text
