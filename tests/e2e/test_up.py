"""`tp up` end to end: the first README command's system (control plane, private PostgreSQL,
node control gateway, a local node daemon) runs a job through the node path; stopping `tp up`
leaves a running member alone and the next `tp up` re-adopts it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from tests.e2e.test_node_backend import docker_events, starts
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.browser import accessibility_violations
from tests.fixtures.server import TP, free_port
from tests.support import http
from tests.support.log_lines import text_records
from tests.support.promql import exposed, expressions, metric_names
from tests.support.scrape import scrape, value, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOKEN = re.compile(r"--token (tp_\S+)")
METRICS_PROCESSES = ("node_gateway", "telemetry_gateway", "node", "collector")
ROOT = Path(__file__).resolve().parents[2]


class Up:
    def __init__(self, tmp_path: Path, docker_host: str) -> None:
        self.state = tmp_path / "state"
        self.port, self.gateway_port, self.telemetry_port = free_port(), free_port(), free_port()
        self.pg_port = free_port()  # every listener's port is settable, PostgreSQL's too
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
        self.env.update(
            DOCKER_HOST=docker_host,
            TUNEPLANE_NODE_GATEWAY_PORT=str(self.gateway_port),
            TUNEPLANE_TELEMETRY_GATEWAY_PORT=str(self.telemetry_port),
            TUNEPLANE_PG_PORT=str(self.pg_port),
            TUNEPLANE_HEARTBEAT_SECONDS="1",
            PYTHONUNBUFFERED="1",
        )
        # every child serves its metrics (docs/operations.md#metrics); the daemon's collector
        # child inherits its variable
        self.metrics = {p: free_port() for p in METRICS_PROCESSES}
        self.env.update(
            {f"TUNEPLANE_{p.upper()}_METRICS_PORT": str(port) for p, port in self.metrics.items()}
        )
        self.log = tmp_path / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> str:
        """Start `tp up`; returns what it printed once ready."""
        self.proc = subprocess.Popen(
            [TP, "up", "--state-dir", str(self.state), "--port", str(self.port)],
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if text.count("Ctrl-C stops it.") > self.starts:
                self.starts += 1
                return text
            if self.proc.poll() is not None:
                raise AssertionError(f"tp up exited {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.3)
        raise AssertionError(f"tp up not ready in {timeout} s:\n{self.log.read_text()[-3000:]}")

    starts = 0

    def workspace(self, printed: str, home: Path, hello: bool = True) -> tuple[Cli, str]:
        """Log in with the token ``printed`` by `tp up`; a workspace in ``home`` (with the
        experiment ``hello``, custom/custom, unless not ``hello``). The CLI, and the token."""
        match = TOKEN.search(printed)
        assert match, printed
        cli = Cli(home, home)
        cli("login", "--server", f"http://127.0.0.1:{self.port}", "--token", match.group(1))
        cli("init", str(home / "ws"))
        cli.cwd = home / "ws"
        if hello:
            cli("new", "hello", "--method", "custom/custom")
        return cli, match.group(1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        self.proc = None

    def children(self) -> list[str]:
        """Command lines of live processes that use this state directory."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                env = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if str(self.state).encode() in env and (
                "gateway" in cmd or "node run" in cmd or "collector" in cmd
            ):
                found.append(cmd)
        return found


def test_tp_up_runs_jobs_through_a_local_node_daemon(
    up: Up, docker_host: str, tmp_path: Path
) -> None:
    printed = up.start()
    assert f"node gateway: 127.0.0.1:{up.gateway_port} (TLS" in printed
    assert f"embedded PostgreSQL ready on 127.0.0.1:{up.pg_port}" in printed
    assert "local node daemon: node local" in printed
    # a second `tp up` on the same state directory is refused before it starts anything (it
    # would share the first's PostgreSQL and daemon, and stop the database when it stopped)
    second = subprocess.run(
        [TP, "up", "--state-dir", str(up.state), "--port", str(free_port())],
        env=up.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert second.returncode == 2 and up.proc is not None, second
    assert f"another `tp up` (pid {up.proc.pid}) is running on the state directory" in (
        second.stderr + second.stdout
    )
    cli, token = up.workspace(printed, tmp_path)

    since = time.time() - 1
    out = cli("submit", "hello", "--profile", "cpu:1", "--set", "command=echo via node", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, 120)
    assert job["state"] == "succeeded", job
    [attempt] = job["attempts"]
    [member] = attempt["members"]
    assert member["node"] == "local"
    [start] = [
        e
        for e in docker_events(docker_host, f"tuneplane.attempt={attempt['id']}", since)
        if e["Action"] == "start"
    ]
    assert start["Actor"]["Attributes"]["tuneplane.node"] == "local"
    assert "tuneplane.epoch" in start["Actor"]["Attributes"]  # the node daemon's container
    assert "via node" in cli("job", "logs", job_id).stdout
    api = metrics_of_the_api(up, token, job_id, job)

    # stopping `tp up` stops its gateways, daemon and collector, never a running member
    since = time.time() - 1
    out = cli(
        "submit", "hello", "--profile", "cpu:1", "--set", "command=sleep 15; echo kept", "--yes"
    )
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"running"}, 60)
    metrics_of_the_other_processes(up, api, [job_id, *ids_of(job)])
    kinds = sorted(
        next(k for k in ("gateway node", "gateway telemetry", "node run", "collector") if k in c)
        for c in up.children()
    )
    assert kinds == ["collector", "gateway node", "gateway telemetry", "node run"]
    up.stop()
    assert up.children() == []
    printed = up.start()  # the daemon reuses its credential; the member is re-adopted
    assert "admin token (shown once" not in printed.split("Ctrl-C stops it.")[1]
    job = cli.wait_state(job_id, {"succeeded", "failed"}, 120)
    assert job["state"] == "succeeded", job
    [attempt] = job["attempts"]
    assert starts(docker_host, attempt["id"], since) == {attempt["members"][0]["id"]: 1}
    assert "kept" in cli("job", "logs", job_id).stdout
    # text logs (the default): one format in every process, readable in the terminal
    for log, role in ((up.log, "up"), (up.state / "gateway.log", "node-gateway"),
                      (up.state / "node.log", "node")):  # fmt: skip
        text_records(log, role)


def ids_of(job: dict[str, Any]) -> list[str]:
    return [job["id"]] + [
        x for a in job["attempts"] for x in [a["id"], *(m["id"] for m in a["members"])]
    ]


def metrics_of_the_api(up: Up, token: str, job_id: str, job: dict[str, Any]) -> str:
    """The API's /metrics (open by default) after real requests: counts move by route template,
    method and status class; the node path's admission and gang phases were measured; no id,
    user name or token anywhere. Returns the exposition."""
    base = f"http://127.0.0.1:{up.port}"
    headers = {"Authorization": f"Bearer {token}"}
    route = "/v1/jobs/{job_id}"
    _, before = scrape(base + "/metrics")
    for _ in range(3):
        assert http.get(f"{base}/v1/jobs/{job_id}", headers=headers).status_code == 200
    assert http.get(f"{base}/v1/jobs/job-nope", headers=headers).status_code == 404
    assert http.get(f"{base}/v1/no/such/route").status_code == 404
    text, after = scrape(base + "/metrics")
    for status, more in (("2xx", 3), ("4xx", 1)):
        labels = {"route": route, "method": "GET", "status": status}
        moved = value(after, "tuneplane_api_requests_total", **labels) - value(
            before, "tuneplane_api_requests_total", **labels
        )
        assert moved == more, (status, moved)
    unmatched = {"route": "unmatched", "status": "4xx"}
    assert value(after, "tuneplane_api_requests_total", **unmatched) >= 1
    timed = value(after, "tuneplane_api_request_duration_seconds_count", route=route)
    assert timed - value(before, "tuneplane_api_request_duration_seconds_count", route=route) == 4
    assert value(after, "tuneplane_submissions_commits_total", outcome="created") >= 1
    assert value(after, "tuneplane_submissions_previews_total") >= 1
    assert value(after, "tuneplane_scheduler_pass_duration_seconds_count") >= 1
    assert ("tuneplane_scheduler_pending_jobs", frozenset({("queue", "default")})) in after
    assert value(after, "tuneplane_scheduler_placements_total", outcome="reserved") >= 1
    prepared = {"phase": "prepare", "outcome": "commit"}
    assert value(after, "tuneplane_gang_phase_duration_seconds_count", **prepared) >= 1
    assert value(after, "tuneplane_gang_phase_duration_seconds_count", phase="commit") >= 1
    routes = {dict(ls)["route"] for (_, ls) in after if "route" in dict(ls)}
    assert {route, "/v1/jobs", "unmatched", "/metrics"} <= routes, routes  # templates only
    for secret in [*ids_of(job), token, "job-nope", "/v1/no/such/route"]:
        assert secret not in text, secret
    assert not any(v == "admin" for (_, ls) in after for k, v in ls if k != "route")
    return text


def metrics_of_the_other_processes(up: Up, api: str, ids: list[str]) -> None:
    """Each child of `tp up` on its metrics port, while a member runs: streams, heartbeats,
    the journal, the collector's spool and shipping, the telemetry gateway's points; then every
    dashboard panel's and alert rule's metric names, against what the live processes offer."""
    url = {p: f"http://127.0.0.1:{port}/metrics" for p, port in up.metrics.items()}
    node_gateway, _ = wait_for(
        url["node_gateway"],
        lambda s: (
            value(s, "tuneplane_node_gateway_streams") == 1
            and value(s, "tuneplane_node_gateway_heartbeats_total") > 0
            and value(s, "tuneplane_node_gateway_heartbeat_flush_seconds_count") > 0
        ),
    )
    node, _ = wait_for(
        url["node"],
        lambda s: (
            value(s, "tuneplane_node_heartbeat_round_trip_seconds_count") > 0
            and value(s, "tuneplane_node_journal_commit_seconds_count") > 0
            and value(s, "tuneplane_node_members") >= 1
        ),
    )
    collector, _ = wait_for(  # the member's system source is sampled while it runs
        url["collector"],
        lambda s: (
            value(s, "tuneplane_collector_members") >= 1
            and value(s, "tuneplane_collector_shipped_points_total") > 0
        ),
    )
    telemetry, _ = wait_for(
        url["telemetry_gateway"],
        lambda s: (
            value(s, "tuneplane_telemetry_points_stored_total") > 0
            and value(s, "tuneplane_telemetry_batches_total", outcome="stored") > 0
        ),
    )
    texts = [api, node_gateway, node, collector, telemetry]
    for text in texts:
        assert not any(x in text for x in ids), [x for x in ids if x in text]
    offered = set().union(*(exposed(t) for t in texts))
    for where, expr in expressions().items():
        assert metric_names(expr) <= offered, (where, sorted(metric_names(expr) - offered))


@pytest.mark.timeout(900)
def test_the_readme_example_runs_through_its_recipe_and_its_artifacts_verify(
    up: Up, numpy_runtime: str, tmp_path: Path
) -> None:
    """The README walk-through's recipe part, on `tp up` (so through the local node daemon)."""
    match = TOKEN.search(up.start())
    assert match
    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", f"http://127.0.0.1:{up.port}", "--token", match.group(1))
    cli("init", str(tmp_path / "tuning"))
    cli.cwd = tmp_path / "tuning"
    shutil.copytree(ROOT / "docs/examples/mlp", cli.cwd / "mlp")
    assert "steps" in cli("methods", "numpy/mlp-classification").stdout
    cli("recipe", "upgrade", "mlp")
    lock = json.loads((cli.cwd / "mlp" / "recipe.lock.json").read_text())
    assert lock["framework"] == "numpy" and lock["framework_version"], lock
    out = cli("submit", "mlp", "--yes", "--follow", "--set", "steps=600", timeout=600)
    assert "step 600: loss" in out.stdout and "final: loss" in out.stdout, out.stdout
    job_id = job_id_in(out.stdout + out.stderr)
    assert cli.status(job_id)["state"] == "succeeded"
    [member] = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)["members"]
    assert member["node"] == "local"
    assert {"checkpoint.npz", "report.json"} <= {f["path"] for f in member["files"]}
    verified = cli("artifacts", "verify", job_id).stdout
    assert "2 files match manifest" in verified and "(on node local)" in verified
    # its TensorBoard scalars went to the member's metrics directory, collected by the node
    deadline = time.monotonic() + 60
    while "train/accuracy" not in (metrics := cli("job", "metrics", job_id).stdout):
        assert time.monotonic() < deadline, metrics
        time.sleep(0.5)


LIVE_JSONL = (
    'd="$TUNEPLANE_METRICS_DIR"; test -d "$d" || exit 3; i=0; echo training; '
    "while [ $i -lt 900 ]; do "
    'printf \'{"step": %d, "metrics": {"train/loss": %d}}\\n\' $i $((100000 / (i + 10))) '
    '>> "$d/train.jsonl"; i=$((i + 1)); sleep 0.2; done'
)
CONSOLE = re.compile(r"web console: (http://\S+/console/)")


async def test_after_tp_up_the_console_shows_a_running_job_with_live_curves(
    up: Up, tmp_path: Path, page: Page, screenshots: Path
) -> None:
    """The issue's "done when": after the README's first command (`bash deploy/dev/up.sh` runs
    `tp up`), the console URL it prints shows a running job whose curve grows while we look."""
    printed = await asyncio.to_thread(up.start)
    url = CONSOLE.search(printed)
    assert url, printed
    cli, token = up.workspace(printed, tmp_path)
    out = cli("submit", "hello", "--profile", "cpu:1", "--set", f"command={LIVE_JSONL}", "--yes")
    job_id = job_id_in(out.stdout)
    await asyncio.to_thread(cli.wait_state, job_id, {"running"}, 120)

    await page.goto(url.group(1))
    await page.get_by_label("API token").fill(token)
    await page.get_by_label("API token").press("Enter")
    await page.get_by_role("link", name="Jobs").click()
    await page.get_by_role("link", name=job_id).click()
    await expect(page.locator(".facts")).to_contain_text("running")
    loss = page.get_by_role("img", name="Line chart of train/loss by step")
    chart = page.locator("figure.chart").filter(has=loss)  # the System group has charts too
    await expect(chart).to_have_count(1, timeout=60_000)  # once the first points are collected
    await expect(page.get_by_role("img", name="Line chart of train/loss by step")).to_be_visible()
    before = int(await chart.get_attribute("data-points") or 0)
    last = int(await chart.get_attribute("data-last-step") or -1)
    await page.screenshot(path=screenshots / "01-running.png", full_page=True)
    assert not await accessibility_violations(page)
    # Live: the page refreshes the chart by itself (no reload) and the curve gains points.
    async with page.expect_response(lambda r: "/metrics/curve?" in r.url, timeout=60_000):
        pass
    await page.wait_for_function(
        "() => Number([...document.querySelectorAll('figure.chart')].find(f =>"
        " f.querySelector('figcaption').textContent === 'train/loss').dataset.lastStep)"
        f" > {last}",
        timeout=60_000,
    )
    after = int(await chart.get_attribute("data-points") or 0)
    assert after > before, (before, after)
    await expect(page.locator(".facts")).to_contain_text("running")
    await expect(page.get_by_role("table", name="Timeline")).to_contain_text("running")
    await page.screenshot(path=screenshots / "02-grown.png", full_page=True)
    cli("job", "stop", job_id)
