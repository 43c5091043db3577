"""GPU inventory end to end (issue 23), with real servers, gateway, daemon and CLI on loopback:
a daemon reading a recorded H200 (TUNEPLANE_FAKE_NVML, tests/fixtures/nvml/h200.txt: a real
machine's nvidia-smi output) enrolls into an h200 pool, which a daemon detecting no GPU cannot;
the API (/v1/node-links, /v1/fleet), `tp fleet ls` and the console's Fleet page show its GPUs;
`--profile h200:1` is placed on it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.e2e.test_node_backend import Factory, cli_for, submit

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

H200 = Path(__file__).parent.parent / "fixtures" / "nvml" / "h200.txt"
LISTED = "1× NVIDIA H200 140.4 GiB NVLink, driver 590.48.01, CUDA 13.1 (recorded)"


async def test_a_node_with_recorded_h200s_enrolls_is_listed_and_takes_h200_work(
    node_cluster_factory: Factory, tmp_path: Path, page: Page
) -> None:
    cluster = await node_cluster_factory(0, TUNEPLANE_FAKE_NVML=str(H200))
    cluster.gpu_pool()
    cluster.start_daemon("g1")
    await asyncio.to_thread(cluster.wait_connected, ["g1"])

    [link] = [x for x in cluster.api("GET", "/v1/node-links") if x["node"] == "g1"]
    assert (link["gpus"], link["gpu_model"]) == (1, "h200")
    inventory = link["gpu_inventory"]
    assert inventory["source"] == "recorded" and inventory["cuda"] == "13.1", inventory
    assert inventory["devices"] == [
        {"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "name": "NVIDIA H200",
         "memory_mb": 143771, "mig": False, "nvlink": True}
    ]  # fmt: skip
    assert cluster.nodes()["g1"]["gpu_inventory"] == inventory

    cli = await cli_for(cluster, tmp_path)
    [row] = [line for line in cli("fleet", "ls").stdout.splitlines() if " g1 " in line]
    assert row.endswith(LISTED), row

    await page.goto(cluster.servers.url + "/console/#/fleet")  # the Fleet page says the same
    await page.get_by_label("API token").fill(cluster.servers.token)
    await page.get_by_label("API token").press("Enter")
    nodes = page.get_by_role("table", name="Nodes of pool gpu")
    await expect(nodes.get_by_role("columnheader", name="Detected GPUs")).to_have_count(1)
    await expect(nodes.get_by_role("row").filter(has_text="g1")).to_contain_text(LISTED)

    job_id = submit(cli, "nvidia-smi -L || true", "h200:1")
    job = await asyncio.to_thread(
        cli.wait_state,
        job_id,
        {"starting", "running", "succeeded", "failed"},
        90,
        lambda j: bool(j["attempts"]) and all(m.get("node") for m in j["attempts"][0]["members"]),
    )
    members = job["attempts"][0]["members"]
    assert [m["node"] for m in members] == ["g1"], job


async def test_a_node_detecting_no_gpu_cannot_join_a_gpu_pool(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(0)
    cluster.gpu_pool()
    daemon = cluster.start_daemon("g0")
    assert daemon.proc is not None
    code = await asyncio.to_thread(daemon.proc.wait, 60)
    assert code != 0
    assert "0 GPUs" in daemon.log.read_text(), daemon.log.read_text()
