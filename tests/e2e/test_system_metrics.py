"""A member's system series end to end on the node backend: the daemon tells its collector where
the member's use can be read, the collector samples it every TUNEPLANE_GPU_SAMPLE_SECONDS and
ships it as the member's system source; `tp job metrics` and the API show it beside the
training curves, never among them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from tests.e2e.test_gpu_inventory import H200
from tests.e2e.test_node_backend import Factory, cli_for, submit
from tests.e2e.test_telemetry_e2e import wait_for
from tests.fixtures.browser import accessibility_violations

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GPUS = Path(__file__).parents[1] / "fixtures" / "gpus" / "two-gpus.xml"
BUSY = (
    'd="$TUNEPLANE_METRICS_DIR"; '
    """printf '{"step": 0, "metrics": {"train/loss": 1}}\\n' > "$d/l.jsonl"; """
    "end=$(($(date +%s) + 5)); while [ $(date +%s) -lt $end ]; do :; done; echo done"
)


def series(cluster: Any, job_id: str) -> dict[str, Any]:
    return cluster.api("GET", f"/v1/jobs/{job_id}/metrics")  # type: ignore[no-any-return]


async def test_a_cpu_member_s_cpu_and_memory_arrive_beside_its_curves_and_are_charted_apart(
    node_cluster_factory: Factory, tmp_path: Path, page: Page, screenshots: Path
) -> None:
    """The API and `tp job metrics` list the member's system series apart from its training
    curves, and the job's page charts them in its System group (one job for both: its busy loop
    and its cluster are the test's cost)."""
    cluster = await node_cluster_factory(1, TUNEPLANE_GPU_SAMPLE_SECONDS="0.5")
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, BUSY, profile="nodes/cpu:0.5")
    (daemon,) = cluster.daemons.values()
    members = daemon.state_dir / "collector" / "members"
    usage: dict[str, Any] | None = None
    deadline = time.monotonic() + 120
    while cluster.api("GET", f"/v1/jobs/{job_id}")["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, cli("job", "logs", job_id).stdout
        for path in members.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                usage = usage or json.loads(path.read_text())["usage"]
        await asyncio.sleep(0.3)
    assert usage is not None and usage["pid"] > 1 and usage["cgroups"], usage  # the container's

    def arrived() -> dict[str, Any] | None:
        s = series(cluster, job_id)
        return s if {"sys/cpu/utilization", "sys/memory/used_mb"} <= set(s["system"]) else None

    found = wait_for(arrived, 60, "the member's system series")
    assert found["canonical"] == ["train/loss"]  # not among the training curves
    sources = {s["source"] for s in found["series"] if s["tag"].startswith("sys/")}
    assert sources == {"system#0"}
    cpu = cluster.api("GET", f"/v1/jobs/{job_id}/metrics/curve?tag=sys/cpu/utilization")
    assert max(p["max"] for p in cpu["merged"]) > 0  # the member's busy loop, in cores
    out = cli("job", "metrics", job_id).stdout
    training_text, _, system_text = out.partition("system (member 0's")
    assert "train/loss" in training_text and "sys/" not in training_text
    assert "sys/cpu/utilization" in system_text and "sys/memory/used_mb" in system_text

    await page.goto(cluster.servers.url + "/console/")
    await page.get_by_label("API token").fill(cluster.servers.token)
    await page.get_by_label("API token").press("Enter")
    await page.goto(cluster.servers.url + f"/console/#/jobs/{job_id}")
    training = page.get_by_role("region", name="Metrics")
    loss = training.get_by_role("img", name="Line chart of train/loss by step")
    await expect(loss).to_be_visible()
    system = page.get_by_role("region", name="System")
    for tag in ("sys/cpu/utilization", "sys/memory/used_mb"):
        chart = system.get_by_role("img", name=f"Line chart of {tag} by step")
        await expect(chart).to_be_visible()
        await expect(chart.locator("canvas")).to_have_count(1)
        await expect(
            training.get_by_role("img", name=f"Line chart of {tag} by step")
        ).to_have_count(0)
    await page.screenshot(path=screenshots / "01-system-group.png", full_page=True)
    assert not await accessibility_violations(page)


async def test_a_gpu_member_s_gpus_arrive_under_the_recorded_probe(
    node_cluster_factory: Factory, tmp_path: Path, page: Page, screenshots: Path
) -> None:
    """Under TUNEPLANE_FAKE_NVML (a real H200's recorded output) the daemon and its collector see
    that GPU; a host-process member bound to it gets its sys/gpu0/* series (the member's own
    ordinal) beside its CPU and memory, read from its own cgroups; the job's page charts them in
    its System group."""
    cluster = await node_cluster_factory(
        0,
        TUNEPLANE_GPU_SAMPLE_SECONDS="0.5",
        TUNEPLANE_FAKE_NVML=str(H200),
        TUNEPLANE_NODE_EXECUTOR="process",
    )
    cluster.gpu_pool()
    cluster.start_daemon("g1")
    await asyncio.to_thread(cluster.wait_connected, ["g1"])
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, BUSY, profile="h200:1")

    def arrived() -> dict[str, Any] | None:
        s = series(cluster, job_id)
        wanted = {"sys/gpu0/utilization", "sys/cpu/utilization", "sys/memory/used_mb"}
        return s if wanted <= set(s["system"]) else None

    found = wait_for(arrived, 90, "the member's GPU series")
    assert {"sys/gpu0/memory_used_mb", "sys/gpu0/temperature_c"} <= set(found["system"])
    assert not any(t.startswith("sys/gpu1/") for t in found["system"])  # one GPU bound
    await page.goto(cluster.servers.url + "/console/")
    await page.get_by_label("API token").fill(cluster.servers.token)
    await page.get_by_label("API token").press("Enter")
    await page.goto(cluster.servers.url + f"/console/#/jobs/{job_id}")
    system = page.get_by_role("region", name="System")
    for tag in ("sys/gpu0/utilization", "sys/gpu0/memory_used_mb", "sys/cpu/utilization"):
        chart = system.get_by_role("img", name=f"Line chart of {tag} by step")
        await expect(chart).to_be_visible()
    await page.screenshot(path=screenshots / "02-gpu-series.png", full_page=True)
    assert not await accessibility_violations(page)
