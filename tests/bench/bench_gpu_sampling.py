"""What the collector's system sampling costs (not part of the suite): CPU time of the sampler
per sample and per GPU, as a share of one core at the default period (5 s).

One run, three members sampled ``BENCH_SAMPLES`` times each (2,000 by default), every sample a
real record appended to the collector's file: (a) a member with no GPU, its CPU and memory read
from this process's cgroups and /proc tree (what every member costs); (b) the same with 8 GPUs
through the recorded probe (``adapters/gpu/nvml.py``'s ``RecordedProbe``: readings held in
memory) (c) 8 GPUs and no usage. The CPU time is the process's (``time.process_time``).

What it cannot measure here: NVML itself (no GPU on this machine). nvmlDeviceGetUtilizationRates,
GetMemoryInfo, GetPowerUsage and GetTemperature are each an ioctl into the driver; their cost
must be measured on a GPU host (issue 23's proof run on a real GPU). The figures are the
collector's own work around them: the probe call, the JSON record, the append, the cgroup and
/proc reads.

Run: ``.venv/bin/pytest tests/bench/bench_gpu_sampling.py -m bench -s``
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from adapters.gpu.nvml import RecordedProbe
from adapters.node.cgroup_paths import usage_source_of
from adapters.telemetry.system import DEFAULT_PERIOD, SystemSampler, Target

pytestmark = pytest.mark.bench

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "2000"))
GPUS = Path(__file__).parents[1] / "fixtures" / "gpus" / "two-gpus.xml"


def eight_gpus(path: Path) -> Path:
    root = ET.fromstring(GPUS.read_bytes())
    first = root.findall("gpu")[0]
    for _ in range(6):
        root.append(ET.fromstring(ET.tostring(first)))
    path.write_bytes(ET.tostring(root))
    return path


def cpu_per_sample(directory: Path, probe: RecordedProbe, target: Target) -> float:
    clock = [0.0]
    sampler = SystemSampler(directory, probe, monotonic=lambda: clock[0])
    t0 = time.process_time()
    for _ in range(SAMPLES):
        sampler.sample([target])
        clock[0] += sampler.period
    return (time.process_time() - t0) / SAMPLES


def test_sampling_cost(tmp_path: Path) -> None:
    probe = RecordedProbe(eight_gpus(tmp_path / "eight.xml"))
    assert len(probe.inventory().devices) == 8
    usage = usage_source_of(os.getpid())
    assert usage is not None
    gpus, where = tuple(range(8)), tmp_path / "system"
    a = cpu_per_sample(where, probe, Target("a", (), usage))
    b = cpu_per_sample(where, probe, Target("b", gpus, usage))
    c = cpu_per_sample(where, probe, Target("c", gpus, None))
    per_gpu = b / len(gpus)
    marginal = (b - a) / len(gpus)
    share = per_gpu / DEFAULT_PERIOD
    lines = {m: len((where / f"{m}.jsonl").read_bytes().splitlines()) for m in "abc"}
    assert lines == {"a": SAMPLES, "b": SAMPLES, "c": SAMPLES}
    print(
        f"\n{SAMPLES:,} samples each; usage read from {usage.cgroups or 'the /proc tree'}"
        f"\n(a) no GPU, CPU+memory:     {a * 1e6:8.1f} µs CPU per sample"
        f"\n(b) 8 GPUs + CPU+memory:    {b * 1e6:8.1f} µs CPU per sample"
        f"\n(c) 8 GPUs, no usage:       {c * 1e6:8.1f} µs CPU per sample"
        f"\nper GPU per sample, (b)/8:  {per_gpu * 1e6:8.1f} µs; marginal (b-a)/8: "
        f"{marginal * 1e6:.1f} µs"
        f"\nshare of one core per GPU at {DEFAULT_PERIOD:g} s: {share:.5%} (goal < 1 %: "
        f"{0.01 / share:,.0f}× under)"
    )
