"""The headline flow, for real: the TRL recipes go through every layer of `tp up` (the README's
first command: control plane, private PostgreSQL, node gateway, a local node daemon running
containers, the telemetry gateway and the node's collector). `tp new my-grpo --method trl/grpo`,
`tp submit --preview`, `tp submit --commit FILE`, then admission, reservation, the Job Capsule,
the runner's checks of the `pytorch-trl` runtime (built here: `deploy/images/build.sh
pytorch-trl`), the training itself, every primary metric of the recipe through the collector at
the steps TRL logged, the artifacts' manifests, and the console's charts."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from adapters.recipes import load_recipes
from tests.e2e.test_up import CONSOLE, Up
from tests.e2e.test_walkthrough import JOB_ID, Cli, job_id_in
from tests.fixtures.docker import build_image
from tests.integration.test_trl_recipes import RUNS, TINY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
COMMIT = re.compile(r"tp submit --commit (\S+)")
ROOT = Path(__file__).resolve().parents[2]


def readme_command(start: str) -> list[str]:
    """The README walk-through's command that starts with ``start`` (continued lines joined,
    the comment dropped), as arguments after `tp`."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith(start)]
    return shlex.split(line.split("  #", 1)[0])[1:]


@pytest.fixture(scope="session")
def trl_runtime(docker_host: str) -> str:
    """The `pytorch-trl` runtime image, built as the README says; its image id."""
    return build_image("pytorch-trl", docker_host)


def sets(name: str) -> list[str]:
    return [arg for k, v in {**TINY, **RUNS[name]}.items() for arg in ("--set", f"{k}={v}")]


def primary(name: str) -> tuple[str, ...]:
    (method,) = [m for m in load_recipes() if m.name == name]
    return method.primary_metrics


def trl_logs(log: str) -> list[dict[str, float]]:
    """The dict TRL's trainer prints at each logging step (`{'loss': '0.5', …}`), in order."""
    found = []
    for line in log.splitlines():
        if line.startswith("{'loss'"):
            found.append({k: float(v) for k, v in ast.literal_eval(line).items()})
    return found


def by_tag(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["tag"]: s for s in summary["series"] if not s["source"].startswith("system#")}


def collected(cli: Cli, job_id: str) -> dict[str, dict[str, Any]]:
    return by_tag(json.loads(cli("job", "metrics", job_id, "--all", "--json").stdout)["summary"])


async def wait_collected(
    cli: Cli, job_id: str, tags: tuple[str, ...], steps: int
) -> dict[str, Any]:
    """The series once every tag has its last step (the collector ships after the member's
    end too: the spool drains on its own time): polled in this process (GET
    /v1/jobs/ID/metrics, the summary `tp job metrics` reads first; a `tp` process a poll
    took 0.3-0.45 s of a core from the training), then read once through the command."""

    def arrived(got: dict[str, dict[str, Any]]) -> bool:
        return all(t in got and got[t]["last_step"] >= steps for t in tags)

    with cli.api() as api:
        for _ in range(240):
            got = by_tag((await asyncio.to_thread(api.get, f"/v1/jobs/{job_id}/metrics")).json())
            if arrived(got):
                break
            await asyncio.sleep(0.5)
        else:
            raise AssertionError(f"{job_id}: not every primary metric arrived: {sorted(got)}")
    got = await asyncio.to_thread(collected, cli, job_id)
    assert arrived(got), got
    return got


@pytest.mark.timeout(1500)
async def test_the_trl_recipes_train_through_tp_up_and_the_console_charts_them(
    up: Up, trl_runtime: str, tmp_path: Path, page: Page, screenshots: Path
) -> None:
    printed = await asyncio.to_thread(up.start)
    url = CONSOLE.search(printed)
    assert url, printed
    cli, token = up.workspace(printed, tmp_path, hello=False)
    methods = cli("methods").stdout  # every recipe's default runtime is built in
    assert methods.count("trl/") == 3 and "not registered" not in methods, methods

    # The README's example, its own commands: preview, then commit the submission file.
    cli(*readme_command("tp new my-grpo"))
    preview = cli(*readme_command("tp submit my-grpo"))
    assert "pytorch-trl" in preview.stdout and "trl/grpo" in preview.stdout, preview.stdout
    match = COMMIT.search(preview.stdout)
    assert match, preview.stdout
    jobs = {"trl/grpo": JOB_ID.search(cli("submit", "--commit", match.group(1)).stdout)}
    for name in ("trl/sft", "trl/dpo"):
        short = name.split("/")[1]
        cli("new", short, "--method", name)
        jobs[name] = JOB_ID.search(cli("submit", short, "--profile", "cpu:1", "--yes",
                                       *sets(name)).stdout)  # fmt: skip
    ids = {name: m.group(0) for name, m in jobs.items() if m}
    assert len(ids) == 3, jobs

    given = dict(a.split("=", 1) for a in readme_command("tp submit my-grpo") if "=" in a)
    steps = {"trl/grpo": int(given["max_steps"]), "trl/sft": 4, "trl/dpo": 4}
    assert given["logging_steps"] == "1", given  # so TRL logs every step
    for name, job_id in ids.items():
        n = steps[name]
        job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 600)
        logs = cli("job", "logs", job_id).stdout
        assert job["state"] == "succeeded", logs[-4000:]
        assert job["spec"]["runtime"]["name"] == "pytorch-trl"
        assert job["spec"]["runtime"]["digest"] == trl_runtime
        assert f"tuneplane-recipe: {name} done after {n} steps" in logs, logs[-3000:]
        logged = trl_logs(logs)  # one per step: logging_steps=1
        assert len(logged) == n, logs[-3000:]
        got = await wait_collected(cli, job_id, primary(name), n)
        for tag in primary(name):  # every primary metric, at the steps TRL logged, same values
            assert (got[tag]["first_step"], got[tag]["last_step"], got[tag]["count"]) == (
                1, n, n), (name, tag, got[tag])  # fmt: skip
            assert got[tag]["last_value"] == pytest.approx(
                logged[-1][tag.removeprefix("train/")], rel=1e-3, abs=1e-6
            ), (name, tag)
        listed = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)
        [member] = listed["members"]
        files = {f["path"] for f in member["files"]}
        assert "report.json" in files and any(f.startswith("model/") for f in files), files
        verified = cli("artifacts", "verify", job_id).stdout
        assert f"{len(files)} files match manifest" in verified, verified

    shown = cli("job", "metrics", ids["trl/grpo"]).stdout
    assert all(tag in shown for tag in ("train/reward", "train/loss", "train/kl")), shown

    await page.goto(url.group(1))
    await page.get_by_label("API token").fill(token)
    await page.get_by_label("API token").press("Enter")
    await page.get_by_role("link", name="Jobs").click()
    await page.get_by_role("link", name=ids["trl/grpo"]).click()
    await expect(page.locator(".facts")).to_contain_text("succeeded")
    for tag in ("train/reward", "train/loss", "train/kl"):
        chart = page.get_by_role("img", name=f"Line chart of {tag} by step")
        await expect(chart).to_be_visible(timeout=30_000)
    await page.screenshot(path=screenshots / "grpo-charts.png", full_page=True)


@pytest.mark.timeout(900)
async def test_trl_sft_trains_as_one_torch_process_group_across_two_node_daemons(
    node_cluster_factory: Any, trl_runtime: str, tmp_path: Path
) -> None:
    """A 2-member gang: each member's container on its own node (host network); the recipe
    relaunches itself under torchrun from TunePlane's rendezvous environment, and the two
    processes train as one gloo process group on the CPU (the main process logs and saves)."""
    cluster = await node_cluster_factory(2, cpus=1, memory_mb=3072)
    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", cluster.servers.url, "--token", cluster.servers.token)
    cli("init", str(tmp_path / "ws"))
    cli.cwd = tmp_path / "ws"
    cli("new", "sft", "--method", "trl/sft")
    out = cli("submit", "sft", "--profile", "nodes/cpu:2", "--yes", *sets("trl/sft"))
    job_id = job_id_in(out.stdout)
    job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 600)
    logs = {i: cli("job", "logs", job_id, "--member", str(i)).stdout for i in (0, 1)}
    assert job["state"] == "succeeded", logs
    [attempt] = job["attempts"]
    assert len({m["node"] for m in attempt["members"]}) == 2
    for rank, log in logs.items():  # both relaunched under torchrun as one world of two
        assert "tuneplane-recipe: " in log and "torch.distributed.run" in log, log[-3000:]
        assert "--nnodes=2" in log and f"--node-rank={rank}" in log, log[-3000:]
    assert "tuneplane-recipe: trl/sft done after 4 steps" in logs[0], logs[0][-3000:]
    logged = trl_logs(logs[0])
    # each member is its node's local process zero, so both print the log, with the same
    # values: the trainer averages the loss and accuracy over the whole process group
    assert len(logged) == 4 and trl_logs(logs[1]) == logged, (logged, trl_logs(logs[1]))
    # 4 steps of 4 rows per process over 32 rows: one epoch with two processes (one alone
    # would have seen half of it), so the data was split across one world of two
    assert logged[-1]["epoch"] == 1.0, logged
    got = await wait_collected(cli, job_id, primary("trl/sft"), 4)
    assert {got[t]["member"] for t in primary("trl/sft")} == {0}
    listed = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)
    files = {m["member"]: {f["path"] for f in m["files"]} for m in listed["members"]}
    assert "report.json" in files[0] and any(f.startswith("model/") for f in files[0]), files
    assert "files match manifest" in cli("artifacts", "verify", job_id).stdout
