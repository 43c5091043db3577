"""The system source (adapters/telemetry/system.py): samples as JSONL records in the collector's
own file, read by the member's tail as source ``system``; GPU ordinals, missing and failing
GPUs, the period, resuming the step, the size bounds; the member files that carry GPUs and
usage (both sides), and the setting."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from adapters.gpu.nvml import RecordedProbe
from adapters.node.collector_feed import CollectorFeed
from adapters.telemetry import system
from adapters.telemetry.collector import read_member_file
from adapters.telemetry.spool import Spool
from adapters.telemetry.system import SystemSampler, Target
from adapters.telemetry.tailer import MemberTail
from application import metrics
from application.metrics import MetricsSummary
from application.node_usage import MemberUsage
from domain.errors import InvalidInput, Unavailable
from domain.gpus import GpuInventory, GpuProbe, GpuReading
from domain.node_daemon_ports import JournalEntry
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef, Phase
from domain.telemetry import SYSTEM_SOURCE, UsageSource
from domain.telemetry_ports import SeriesInfo
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import NodeSettings

GPUS = Path(__file__).parents[1] / "fixtures" / "gpus" / "two-gpus.xml"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


class ClockedSampler(SystemSampler):
    """A sampler on a test's monotonic clock, which the test moves."""

    clock: Clock


def sampler(tmp_path: Path, probe: GpuProbe | None = None, period: float = 5.0) -> ClockedSampler:
    clock = Clock()
    s = ClockedSampler(
        tmp_path / "system",
        probe if probe is not None else RecordedProbe(GPUS),
        period,
        monotonic=clock,
        wall=lambda: 1_700_000_000.5,
        proc=tmp_path / "no-proc",
    )
    s.clock = clock
    return s


def test_gpus_are_named_by_the_member_s_own_ordinal(tmp_path: Path) -> None:
    s = sampler(tmp_path)
    s.sample([Target("m1", (1, 0), None)])
    (rec,) = records(s.path("m1"))
    assert rec["step"] == 0 and rec["wall_time"] == 1_700_000_000.5
    assert rec["metrics"] == {
        "sys/gpu0/utilization": 97.0,  # host GPU 1 is the member's cuda:0
        "sys/gpu0/memory_used_mb": 40123.0,
        "sys/gpu0/temperature_c": 64.0,  # its power is N/A: not shipped
        "sys/gpu1/utilization": 0.0,
        "sys/gpu1/memory_used_mb": 1.0,
        "sys/gpu1/power_w": 71.25,
        "sys/gpu1/temperature_c": 31.0,
    }
    assert os.stat(s.path("m1")).st_mode & 0o777 == 0o600
    assert os.stat(s.directory).st_mode & 0o777 == 0o700


def test_the_period_is_kept_on_the_monotonic_clock(tmp_path: Path) -> None:
    s = sampler(tmp_path, period=5.0)
    t = [Target("m1", (0,), None)]
    assert s.sample(t) and not s.sample(t)
    s.clock.now += 4.9
    assert not s.due() and not s.sample(t)
    s.clock.now += 0.1
    assert s.sample(t)
    s.clock.now += 3600  # a suspended host: one sample, then the period again from now
    assert s.sample(t) and not s.sample(t)
    assert [r["step"] for r in records(s.path("m1"))] == [0, 1, 2]


def test_a_gpu_the_host_lacks_is_left_out_and_named_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = sampler(tmp_path, period=1)
    with caplog.at_level(logging.WARNING, "tuneplane.collector"):
        for _ in range(3):
            s.sample([Target("m1", (7, 1), None)])
            s.clock.now += 1
    assert caplog.text.count("has no GPU [7]") == 1
    assert all(set(r["metrics"]) == {
        "sys/gpu1/utilization", "sys/gpu1/memory_used_mb", "sys/gpu1/temperature_c"
    } for r in records(s.path("m1")))  # fmt: skip


class Failing:
    """A probe whose GPUs fell off the bus, and whose readings are nonsense."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def inventory(self) -> GpuInventory:
        if self.mode == "inventory":
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return RecordedProbe(GPUS).inventory()

    def read(self, indices: Sequence[int]) -> list[GpuReading]:
        if self.mode == "read":
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return [GpuReading(99, 1.0), GpuReading(0, float("nan"), -5.0, float("inf"), 40.0)]

    def close(self) -> None:
        return None


@pytest.mark.parametrize("mode", ["inventory", "read"])
def test_a_failing_gpu_costs_its_points_only(tmp_path: Path, mode: str) -> None:
    group = tmp_path / "g"
    group.mkdir()
    (group / "memory.current").write_text("1048576\n")
    (group / "memory.stat").write_text("inactive_file 0\n")
    s = sampler(tmp_path, Failing(mode))
    s.sample([Target("m1", (0,), UsageSource(None, (str(group),)))])
    assert [r["metrics"] for r in records(s.path("m1"))] == [{"sys/memory/used_mb": 1.0}]


def test_bogus_readings_are_not_points(tmp_path: Path) -> None:
    s = sampler(tmp_path, Failing("values"))
    s.sample([Target("m1", (0,), None)])  # NaN, negative, infinite, a GPU not asked for
    assert [r["metrics"] for r in records(s.path("m1"))] == [{"sys/gpu0/temperature_c": 40.0}]


def test_nothing_to_sample_writes_nothing(tmp_path: Path) -> None:
    s = sampler(tmp_path)
    s.sample([Target("m1", (), None), Target("m2", (), UsageSource(None, ()))])
    assert not s.path("m1").exists() and not s.path("m2").exists()


def test_a_restarted_collector_goes_on_counting(tmp_path: Path) -> None:
    s = sampler(tmp_path, period=1)
    for _ in range(3):
        s.sample([Target("m1", (0,), None)])
        s.clock.now += 1
    with s.path("m1").open("ab") as f:
        f.write(b'{"step": 9')  # killed mid-way by something else: a cut line is ignored
    again = sampler(tmp_path)
    again.sample([Target("m1", (0,), None)])
    assert records(s.path("m1"))[-1]["step"] == 3


def test_the_file_is_bounded_while_unread_and_rotated_once_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(system, "MAX_UNREAD", 1000)
    monkeypatch.setattr(system, "ROTATE_BYTES", 1500)
    s = sampler(tmp_path, period=1)
    spool = Spool(tmp_path / "spool")
    tail = MemberTail("m1", tmp_path / "metrics", spool, extra={SYSTEM_SOURCE: s.path("m1")})
    try:
        for _ in range(40):  # nobody reads: the file stops growing past the bound
            s.sample([Target("m1", (0, 1), None, tail.position(SYSTEM_SOURCE))])
            s.clock.now += 1
        size = s.path("m1").stat().st_size
        assert 1000 < size < 1000 + 400
        for _ in range(40):  # read as it goes: the file is replaced after 1,500 bytes
            tail.poll()
            s.sample([Target("m1", (0, 1), None, tail.position(SYSTEM_SOURCE))])
            s.clock.now += 1
            assert s.path("m1").stat().st_size < 1500 + 400
        tail.poll()
        tail.poll()
        batch = spool.batch("m1", 100_000)
        assert batch is not None
        names = [src.name for src in batch.sources]
        assert names == [f"system#{n}" for n in range(len(names))] and len(names) >= 2
        shipped = [int(p) for src in batch.sources for p in src.points.step[::7]]
        assert shipped == list(range(s.samples))  # in order, none lost, none twice
    finally:
        tail.close()
        spool.close()


def test_the_tail_reads_the_system_file_as_source_system(tmp_path: Path) -> None:
    s = sampler(tmp_path)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "system").write_text('{"step": 1, "metrics": {"x": 1}}\n')  # no parser claims it
    (metrics / "train.jsonl").write_text('{"step": 1, "metrics": {"loss": 1}}\n')
    s.sample([Target("m1", (0,), None)])
    spool = Spool(tmp_path / "spool")
    tail = MemberTail("m1", metrics, spool, extra={SYSTEM_SOURCE: s.path("m1")})
    tail.poll()
    tail.close()
    assert {st.name for st in spool.sources("m1").values()} == {"system#0", "train.jsonl#0"}
    again = MemberTail("m1", tmp_path / "gone", spool, extra={SYSTEM_SOURCE: s.path("m1")})
    assert again.position(SYSTEM_SOURCE) is not None  # restored after a restart
    again.close()
    spool.close()


# -- the member file --------------------------------------------------------------------------


def _file(tmp_path: Path, **extra: object) -> Path:
    body = {"job": "j", "attempt": "a", "member": "m1", "index": 0, "token": "t",
            "metrics_dir": "/m", "ended": False, **extra}  # fmt: skip
    path = tmp_path / "m1.json"
    path.write_text(json.dumps(body))
    return path


def test_member_files_without_gpus_or_usage_still_read(tmp_path: Path) -> None:
    f = read_member_file(_file(tmp_path))
    assert (f.gpus, f.usage) == ((), None)
    f = read_member_file(_file(tmp_path, gpus=[3, 1], usage={"pid": 5, "cgroups": ["/sys/x"]}))
    assert (f.gpus, f.usage) == ((3, 1), UsageSource(5, ("/sys/x",)))


@pytest.mark.parametrize(
    "extra",
    [
        {"gpus": [0, 0]},
        {"gpus": [-1]},
        {"gpus": [True]},
        {"gpus": "0,1"},
        {"gpus": list(range(300))},
        {"usage": {"pid": 0}},
        {"usage": {"pid": "1"}},
        {"usage": {"pid": 1, "cgroups": ["relative"]}},
        {"usage": {"pid": 1, "cgroups": ["/sys/fs/cgroup/../../etc"]}},
        {"usage": {"pid": 1, "cgroups": ["/a\0b"]}},
        {"usage": [1]},
    ],
)
def test_bad_gpus_or_usage_name_the_field(tmp_path: Path, extra: dict[str, object]) -> None:
    with pytest.raises(InvalidInput) as err:
        read_member_file(_file(tmp_path, **extra))
    assert next(iter(extra)) in err.value.message and "m1.json" in err.value.message


def _entry(phase: Phase, gpus: tuple[int, ...] = (2, 5)) -> JournalEntry:
    order = PrepareOrder(
        MemberRef("a1", "m1", 0, 1), "n1", "j1", "img", (), {}, 1.0, 512, gpus, None, 1,
        "process", 0, collector_token="tok",
    )  # fmt: skip
    return JournalEntry(order, phase, container_id="c1")


def test_the_feed_tells_gpus_and_usage_privately_and_rewrites_only_changes(
    tmp_path: Path,
) -> None:
    feed = CollectorFeed(tmp_path)
    path = tmp_path / "members" / "m1.json"
    feed.sync([_entry(Phase.RUNNING)])
    first = json.loads(path.read_text())
    assert first["gpus"] == [2, 5] and first["usage"] is None
    inode = path.stat().st_ino
    feed.sync([_entry(Phase.RUNNING)])
    assert path.stat().st_ino == inode  # unchanged: not rewritten
    usage = {"m1": UsageSource(42, ("/sys/fs/cgroup/memory/docker/c1",))}
    feed.sync([_entry(Phase.RUNNING)], usage)
    assert json.loads(path.read_text())["usage"] == {
        "pid": 42, "cgroups": ["/sys/fs/cgroup/memory/docker/c1"]
    }  # fmt: skip
    assert path.stat().st_mode & 0o777 == 0o600
    feed.sync([_entry(Phase.EXITED)], usage)  # ended: nothing more to sample
    body = json.loads(path.read_text())
    assert body["ended"] and body["usage"] is None
    assert read_member_file(path).gpus == (2, 5)  # what the daemon writes, the collector reads


class Runtime:
    def __init__(self, answers: list[UsageSource | Exception | None]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def usage_source(self, container_id: str) -> UsageSource | None:
        self.asked.append(container_id)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_the_runtime_is_asked_until_it_knows_then_once() -> None:
    found = UsageSource(7, ())
    runtime = Runtime([Unavailable("engine down"), None, found])
    usage = MemberUsage(runtime)  # type: ignore[arg-type]
    running = [_entry(Phase.RUNNING)]
    assert await usage.of([_entry(Phase.STARTING)]) == {}  # not running: not asked
    assert await usage.of(running) == {}
    assert await usage.of(running) == {}
    assert await usage.of(running) == {"m1": found}
    assert await usage.of(running) == {"m1": found}
    assert runtime.asked == ["c1"] * 3
    assert await usage.of([_entry(Phase.EXITED)]) == {}  # forgotten with the run


# -- the setting ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "five", "7200", "1e400"])
def test_a_bad_sample_period_is_refused_with_the_fix(raw: str) -> None:
    with pytest.raises(InvalidInput) as err:
        load_one(NodeSettings, "gpu_sample_seconds", {"TUNEPLANE_GPU_SAMPLE_SECONDS": raw})
    assert err.value.field == "TUNEPLANE_GPU_SAMPLE_SECONDS" and "e.g. 5" in err.value.fix


def test_the_sample_period_defaults_to_five_seconds() -> None:
    assert load_one(NodeSettings, "gpu_sample_seconds", {}) == 5.0
    env = {"TUNEPLANE_GPU_SAMPLE_SECONDS": " 0.25 "}
    assert load_one(NodeSettings, "gpu_sample_seconds", env) == 0.25


# -- reading them back ------------------------------------------------------------------------


def _series(member: int, source: str, tag: str) -> SeriesInfo:
    return SeriesInfo(1, "a1", 1, f"m{member}", member, source, tag, 0, 9, 10, 1.0, 1.0)


def test_system_series_are_a_group_of_their_own_not_canonical_metrics() -> None:
    summary = MetricsSummary(
        (),
        [
            _series(0, "train.jsonl#0", "train/loss"),
            _series(0, "system#0", "sys/memory/used_mb"),
            _series(0, "system#1", "sys/gpu10/utilization"),
            _series(0, "system#0", "sys/gpu2/power_w"),
            _series(0, "system#0", "sys/cpu/utilization"),
            _series(1, "system#0", "sys/gpu0/utilization"),  # member 1's: not shown
            _series(0, "system#0.jsonl#0", "written/by/the/job"),  # a file, not the collector
        ],
        [],
    )
    assert metrics.canonical_tags(summary) == ["train/loss", "written/by/the/job"]
    assert metrics.system_tags(summary) == [
        "sys/gpu2/power_w", "sys/gpu10/utilization", "sys/cpu/utilization", "sys/memory/used_mb"
    ]  # fmt: skip
