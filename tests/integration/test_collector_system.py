"""The system source through the whole collector, against the recording Telemetry server
(tests/fixtures/recording_telemetry.py): a live member's GPUs (the recorded probe under
TUNEPLANE_FAKE_NVML), CPU and memory arrive as series of source system#0 and the file is gone
after the drain; `tp collector` killed -9 mid-way and started again neither loses nor
duplicates a sample."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.gpu.nvml import RecordedProbe
from adapters.grpc.telemetry_client import open_channel
from adapters.grpc.telemetry_gateway import source_batch
from adapters.node.cgroup_paths import usage_source_of
from adapters.telemetry.collector import Collector, CollectorOptions
from adapters.telemetry.columns import Points
from adapters.telemetry.spool import Spool
from adapters.telemetry.system import SystemSampler
from domain.telemetry import UsageSource
from tests.fixtures.recording_telemetry import Net, until

pytestmark = pytest.mark.integration

GPUS = Path(__file__).parents[1] / "fixtures" / "gpus" / "two-gpus.xml"
ROOT = Path(__file__).parents[2]


@pytest.fixture
def workload() -> Iterator[subprocess.Popen[bytes]]:
    """A member's process: a real child of this test, measured through /proc and its cgroups."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def member_file(
    members: Path, metrics: Path, *, gpus: list[int], usage: UsageSource | None, ended: bool
) -> None:
    body = {
        "job": "j1", "attempt": "a1", "member": "m1", "index": 0, "token": "token-m1",
        "metrics_dir": str(metrics), "ended": ended, "gpus": gpus,
        "usage": None if usage is None else {"pid": usage.pid, "cgroups": list(usage.cgroups)},
    }  # fmt: skip
    tmp = members / "m1.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)
    tmp.rename(members / "m1.json")


def system_points(net: Net) -> list[tuple[str, int, str, int, float]]:
    """(source, offset, tag, step, value) of every system point the server was sent."""
    out = []
    for batch in net.recording.accepted:
        for s in batch.sources:
            if not s.source.startswith("system#"):
                continue
            p = source_batch(s).points
            assert isinstance(p, Points)
            for tag, offset, step, value in zip(
                p.tag.tolist(), p.offset.tolist(), p.step.tolist(), p.value.tolist(), strict=True
            ):
                out.append((s.source, offset, p.tags[tag], step, value))
    return out


async def test_a_member_s_gpus_cpu_and_memory_arrive_as_its_system_source(
    tmp_path: Path, net: Net, workload: subprocess.Popen[bytes]
) -> None:
    members = tmp_path / "members"
    members.mkdir()
    usage = usage_source_of(workload.pid)
    assert usage is not None
    member_file(members, tmp_path / "metrics", gpus=[1], usage=usage, ended=False)
    gateway = f"127.0.0.1:{net.port}"
    options = CollectorOptions(tmp_path / "spool", members, gateway, net.pki.ca.cert)
    spool = Spool(options.spool)
    channel = open_channel("127.0.0.1", net.port, net.pki.ca.cert)
    sampler = SystemSampler(options.spool / "system", RecordedProbe(GPUS), 0.05)
    collector = Collector(options, spool, channel, sampler)
    want = {
        "sys/gpu0/utilization": 97.0,  # the host's GPU 1 is the member's cuda:0
        "sys/gpu0/memory_used_mb": 40123.0,
        "sys/gpu0/temperature_c": 64.0,
    }
    try:

        def arrived() -> bool:
            tags = {p[2] for p in system_points(net)}
            return tags >= {*want, "sys/cpu/utilization", "sys/memory/used_mb"}

        while not arrived():
            await collector.step()
            await asyncio.sleep(0.05)
        points = system_points(net)
        assert {p[0] for p in points} == {"system#0"}
        assert {(t, v) for _, _, t, _, v in points if t.startswith("sys/gpu")} == set(want.items())
        assert "sys/gpu0/power_w" not in {p[2] for p in points}  # N/A on that GPU: not shipped
        memory = [v for _, _, t, _, v in points if t == "sys/memory/used_mb"]
        assert all(v > 1 for v in memory)  # a Python interpreter's resident set
        assert sampler.path("m1").exists()
        member_file(members, tmp_path / "metrics", gpus=[1], usage=usage, ended=True)
        for _ in range(400):
            await collector.step()
            if (members / "m1.drained").exists():
                break
            await asyncio.sleep(0.02)
        assert (members / "m1.drained").exists()
        assert not sampler.path("m1").exists()  # removed once everything was shipped
        shipped = {(p[0], p[1]) for p in system_points(net)}
        assert len(shipped) == max(p[3] for p in system_points(net)) + 1  # one record a step
    finally:
        await collector.close()
        channel.close()
        spool.close()


async def test_a_collector_killed_mid_way_loses_and_duplicates_no_sample(
    tmp_path: Path, net: Net, workload: subprocess.Popen[bytes]
) -> None:
    members = tmp_path / "members"
    members.mkdir()
    usage = usage_source_of(workload.pid)
    member_file(members, tmp_path / "metrics", gpus=[0, 1], usage=usage, ended=False)
    env = {
        **os.environ,
        "TUNEPLANE_GPU_SAMPLE_SECONDS": "0.05",
        "TUNEPLANE_FAKE_NVML": str(GPUS),
    }
    args = [
        sys.executable, "-m", "entrypoints.cli.main", "collector",
        "--spool", str(tmp_path / "spool"), "--members", str(members),
        "--gateway", f"127.0.0.1:{net.port}", "--ca", str(net.pki.ca.cert), "--poll", "0.05",
    ]  # fmt: skip
    log = (tmp_path / "collector.log").open("ab")

    async def start() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(*args, env=env, cwd=ROOT, stderr=log)

    def steps() -> int:
        return len({p[3] for p in system_points(net) if p[2] == "sys/gpu0/power_w"})

    proc = await start()
    try:
        await until(lambda: steps() >= 20, within=60)
        proc.send_signal(signal.SIGKILL)  # mid-way: sampling, spooling and shipping go on
        await proc.wait()
        before = steps()
        proc = await start()
        await until(lambda: steps() >= before + 20, within=60)
        member_file(members, tmp_path / "metrics", gpus=[0, 1], usage=usage, ended=True)
        await until(lambda: (members / "m1.drained").exists(), within=60)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        log.close()
    power = [(src, off, step, v) for src, off, t, step, v in system_points(net)
             if t == "sys/gpu0/power_w"]  # fmt: skip
    stored = {(src, off): (step, v) for src, off, step, v in power}  # as the gateway dedupes
    assert sorted(s for s, _ in stored.values()) == list(range(len(stored)))  # none lost or twice
    assert {v for _, v in stored.values()} == {71.25}
    text = (tmp_path / "collector.log").read_text()
    assert "TUNEPLANE_FAKE_NVML" in text  # the recorded GPUs are named as such, a warning
