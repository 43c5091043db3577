"""Issue 22: a local member whose container the engine no longer knows is ``node-lost`` only
when the engine (re)started after the container did; classified over a real engine's answers
(tests/fixtures/docker_recorded/engine_restart.json: a running container's inspect, the 404
once it is gone, the engine process's /proc line), adapters/docker/ends.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.docker.ends import gone, process_started, started_at
from domain.backend_ports import Observation

pytestmark = pytest.mark.unit

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "docker_recorded"


def recorded() -> dict[str, Any]:
    return dict(json.loads((RECORDED / "engine_restart.json").read_text()))


def test_the_times_read_from_the_engines_answers() -> None:
    rec = recorded()
    at = started_at(rec["inspect_running"]["body"])
    assert at == datetime(2026, 12, 5, 7, 26, 58, 764592, UTC)
    assert started_at({"State": {"StartedAt": "0001-01-01T00:00:00Z"}}) is None  # never started
    assert started_at({"State": {"StartedAt": "2026-01-02T03:04:05Z"}}) == datetime(
        2026, 1, 2, 3, 4, 5, tzinfo=UTC
    )
    assert started_at({}) is None and started_at({"State": {"StartedAt": "garbage"}}) is None
    proc = rec["engine_process"]
    engine = process_started(proc["proc_pid_stat"], proc["proc_stat_btime"], proc["clk_tck"])
    assert engine < at  # this engine ran before the container started: no restart since
    # a command name with spaces and parentheses does not shift the fields
    hostile = proc["proc_pid_stat"].replace("(dockerd)", "(a) b (c)")
    assert process_started(hostile, proc["proc_stat_btime"], proc["clk_tck"]) == engine


def test_a_container_gone_after_the_engine_restarted_is_node_lost_else_missing() -> None:
    rec = recorded()
    assert rec["inspect_gone"]["status"] == 404
    handle = rec["inspect_running"]["body"]["Id"]
    member = started_at(rec["inspect_running"]["body"])
    assert member is not None
    restarted = member + timedelta(minutes=3)
    obs = gone(handle, restarted, member)
    assert (obs.status, obs.cause) == ("missing", "node-lost")
    assert obs.reason == (
        "the container engine restarted at 2026-12-05 07:29:58 UTC, after container"
        f" {handle[:12]} started (2026-12-05 07:26:58 UTC), and no longer knows it: lost with"
        " the engine"
    )
    proc = rec["engine_process"]
    same_engine = process_started(proc["proc_pid_stat"], proc["proc_stat_btime"], proc["clk_tck"])
    assert gone(handle, same_engine, member) == Observation("missing")  # removed, no restart
    assert gone(handle, None, member) == Observation("missing")  # engine start unknown
    assert gone(handle, restarted, None) == Observation("missing")  # never seen started
    assert gone(handle, member, member) == Observation("missing")  # not after: no proof
