"""The console's charts and compare view (issue 25 item 1) in headless Chromium, against a real
`tp serve` and one real node daemon whose collector shipped the metrics of three real jobs
(JSONL files their commands wrote; one of them still writing while the tests run).

One cluster and three jobs for the module (about 30 s to set up); each test opens its own page.
Screenshots are saved under test-artifacts/console/<test>/ (fixtures: tests/fixtures/browser.py).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.async_api import Browser, Page, Request, expect

from tests.e2e.test_node_backend import submit
from tests.e2e.test_telemetry_e2e import wait_for
from tests.e2e.test_walkthrough import hello_workspace
from tests.fixtures.browser import accessibility_violations
from tests.fixtures.nodes import NodeCluster, start_node_cluster
from tests.fixtures.server import servers_with_admin, stop_servers

pytestmark = pytest.mark.e2e

STEPS = 300
# Job A: a falling loss with a NaN at step 50, and eval/acc (a tag only it has).
JOB_A = (
    'd="$TUNEPLANE_METRICS_DIR"; test -d "$d" || exit 3; '
    f"for i in $(seq 0 {STEPS - 1}); do "
    'if [ $i = 50 ]; then v=NaN; else v=$((100000 / (i + 10))); fi; '
    'printf \'{"step": %d, "metrics": {"train/loss": %s, "eval/acc": %d}}\\n\' $i $v $((i / 3)); '
    'done > "$d/train.jsonl"; echo wrote'
)  # fmt: skip
# Job B: a loss that is zero or negative at times (not drawable on a log scale).
JOB_B = (
    'd="$TUNEPLANE_METRICS_DIR"; test -d "$d" || exit 3; '
    f"for i in $(seq 0 {STEPS - 1}); do "
    'printf \'{"step": %d, "metrics": {"train/loss": %d}}\\n\' $i $((i % 7 - 1)); '
    'done > "$d/train.jsonl"; echo wrote'
)  # fmt: skip
# Job C: still running: 200 steps at once, then one step every half second for two minutes.
JOB_C = (
    'd="$TUNEPLANE_METRICS_DIR"; test -d "$d" || exit 3; '
    'line() { printf \'{"step": %d, "metrics": {"train/loss": %d}}\\n\' $1 $((500 - $1)); }; '
    'for i in $(seq 0 199); do line $i; done >> "$d/train.jsonl"; '
    'for i in $(seq 200 440); do line $i >> "$d/train.jsonl"; sleep 0.5; done'
)  # fmt: skip


@dataclass
class Jobs:
    cluster: NodeCluster
    a: str
    b: str
    c: str

    @property
    def url(self) -> str:
        return self.cluster.servers.url


def _count(cluster: NodeCluster, job: str, tag: str = "train/loss") -> int:
    series = cluster.api("GET", f"/v1/jobs/{job}/metrics")["series"]
    return sum(s["count"] for s in series if s["tag"] == tag)


@pytest.fixture(scope="module")
def jobs(
    module_pg_url: str, docker_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Jobs]:
    state = tmp_path_factory.mktemp("state")
    settings = {"TUNEPLANE_HEARTBEAT_SECONDS": "1"}
    servers = servers_with_admin(module_pg_url, docker_host, state, 1, **settings)
    try:
        cluster = start_node_cluster(servers, settings, 1, cpus=2)  # the three jobs at once
        try:
            cli = hello_workspace(servers.url, servers.token, tmp_path_factory.mktemp("cli"))
            ids = [submit(cli, cmd, profile="nodes/cpu:0.5") for cmd in (JOB_A, JOB_B, JOB_C)]
            for job in ids[:2]:
                done = cli.wait_state(job, {"succeeded", "failed", "cancelled"}, timeout=120)
                assert done["state"] == "succeeded", (done, cli("job", "logs", job).stdout)
                wait_for(lambda j=job: _count(cluster, j) == STEPS, 60, f"{job}'s points")
            wait_for(lambda: _count(cluster, ids[2]) >= 200, 60, "the running job's points")
            yield Jobs(cluster, *ids)
            cli("job", "cancel", ids[2], ok=False)
        finally:
            cluster.close()
    finally:
        stop_servers(servers)


@pytest.fixture
def expected_statuses() -> set[int]:
    return {401, 404}  # the compare view is asked for a job that does not exist


async def sign_in(page: Page, url: str, token: str) -> None:
    await page.goto(url)
    await page.get_by_label("API token").fill(token)
    await page.get_by_label("API token").press("Enter")


def curve_query(request: Request) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(request.url).query).items()}


async def drag(page: Page, figure: Any, lo: float, hi: float) -> None:
    over = figure.locator(".u-over")
    await over.scroll_into_view_if_needed()
    box = await over.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    await page.mouse.move(box["x"] + box["width"] * lo, y)
    await page.mouse.down()
    await page.mouse.move(box["x"] + box["width"] * hi, y, steps=5)
    await page.mouse.up()


async def test_compare_three_collected_jobs(
    jobs: Jobs, page: Page, browser: Browser, screenshots: Path
) -> None:
    """Tags, colours and legend, smoothing, log scale, x modes, zoom and reset, a NaN marked, the
    CSV of what is shown, a live refresh that keeps the zoom; axe clean in light and dark."""
    a, b, c = jobs.a, jobs.b, jobs.c
    await sign_in(
        page,
        jobs.url + f"/console/#/compare?jobs={a},{b},{c},nope-nope",
        jobs.cluster.servers.token,
    )
    await expect(page.get_by_role("heading", level=1)).to_have_text("Compare 3 jobs")
    await expect(page.get_by_role("alert")).to_contain_text("nope-nope")  # named; others drawn
    loss = page.locator('figure.chart[data-tag="train/loss"]')
    await expect(loss).to_have_attribute("data-attempts", "3")
    lines = (await loss.get_attribute("data-lines") or "").split("\n")
    assert lines == [f"{a} · attempt 1", f"{b} · attempt 1", f"{c} · attempt 1"], lines
    acc = page.locator('figure.chart[data-tag="eval/acc"]')
    await expect(acc).to_have_attribute("data-lines", f"{a} · attempt 1")  # the tags' union
    await expect(page.locator("details > summary").first).to_have_text("train/ (1)")
    # the NaN job A logged at step 50, marked on its curve and said in words
    await expect(loss).to_have_attribute("data-nonfinite", "1 NaN, 0 +inf, 0 -inf")
    await expect(loss.locator(".chart-note")).to_contain_text("1 NaN (×)")
    # legends show each run's last value until hovered (not "--")
    legend = loss.get_by_role("list", name="Runs of train/loss")
    run_a = legend.get_by_role("button", name=f"{a} · attempt 1")
    await expect(run_a).to_contain_text("last ")
    plot = loss.get_by_role("img", name="Line chart of train/loss by step")
    # the plot fills two thirds of its card, the legend the rest (the plot follows its column)
    await page.wait_for_function(
        "() => { const f = document.querySelector('figure.chart[data-tag=\"train/loss\"]');"
        " return f.querySelector('canvas').getBoundingClientRect().width"
        " >= 0.62 * f.getBoundingClientRect().width; }"
    )
    card, canvas = await loss.bounding_box(), await loss.locator("canvas").bounding_box()
    items = await legend.bounding_box()
    assert card and canvas and items, (card, canvas, items)
    await expect(plot).to_be_visible()
    assert 0.62 * card["width"] <= canvas["width"] <= 0.7 * card["width"], (card, canvas)
    assert canvas["x"] + canvas["width"] <= items["x"], (canvas, items)
    await page.screenshot(path=screenshots / "01-compare.png", full_page=True)
    assert not await accessibility_violations(page)

    # Smoothing on (0.6, the default) and off: the value drawn for job A's last point changes.
    smoothed = await run_a.locator(".value").text_content()
    await page.get_by_label("Smoothing").fill("0")
    await expect(run_a.locator(".value")).not_to_have_text(smoothed or "")
    raw = await run_a.locator(".value").text_content()
    assert raw == f"last {100000 // (STEPS - 1 + 10)}", raw  # the value job A logged last
    await page.get_by_label("Smoothing").fill("0.9")
    await expect(run_a.locator(".value")).not_to_have_text(raw)

    # Hover highlights, click hides (from the CSV too), and the keyboard does both.
    await run_a.hover()
    await expect(loss).to_have_attribute(
        "data-highlight", json.dumps([a, 1, ""], separators=(",", ":"))
    )
    run_b = legend.get_by_role("button", name=f"{b} · attempt 1")
    await run_b.focus()
    await expect(loss).to_have_attribute(
        "data-highlight", json.dumps([b, 1, ""], separators=(",", ":"))
    )
    await page.keyboard.press("Enter")
    await expect(run_b).to_have_attribute("aria-pressed", "false")
    async with page.expect_download() as download:
        await loss.get_by_role("button", name="Download train/loss as CSV").click()
    got = await download.value
    assert got.suggested_filename == "train_loss.csv"
    rows = list(csv.DictReader(io.StringIO((await got.path()).read_text())))
    assert {r["job"] for r in rows} == {a, c}, {r["job"] for r in rows}  # B is hidden
    mine = [r for r in rows if r["job"] == a]
    assert [int(r["step"]) for r in mine] == list(range(STEPS))  # 300 steps: raw points
    nan = next(r for r in mine if r["step"] == "50")
    assert (nan["last"], nan["value"]) == ("NaN", "")
    assert mine[10]["value"] == str(100000 // 20) and mine[10]["smoothed"] != mine[10]["value"]
    await run_b.press("Space")
    await expect(run_b).to_have_attribute("aria-pressed", "true")

    # Log scale: job B's zero and negative values are not drawn, and counted.
    await page.get_by_label("Log scale (y)").check()
    await expect(loss.locator(".chart-note")).to_contain_text("not drawn on the log scale")
    dropped = int(await loss.get_attribute("data-dropped") or 0)
    assert dropped == sum(1 for i in range(STEPS) if i % 7 - 1 <= 0), dropped
    await page.screenshot(path=screenshots / "02-log.png", full_page=True)
    await page.get_by_label("Log scale (y)").uncheck()

    # x modes: wall time and relative time draw the same runs on a time axis (whole series).
    for label, mode in (("Wall time", "wall"), ("Relative time (s)", "relative"), ("Step", "step")):
        async with page.expect_request(
            lambda r: "/metrics/curve?" in r.url and "tag=train" in r.url
        ) as curve_request:
            await page.get_by_label("X axis").select_option(label=label)
        assert "start" not in curve_query(await curve_request.value)
        await expect(loss).to_have_attribute("data-x", mode)
        await expect(loss).to_have_attribute("data-attempts", "3")

    # Drag to zoom: each job is asked for that step window only (one request each); then the
    # running job's refresh asks for the same window again and the zoom stays.
    asked: list[dict[str, str]] = []
    page.on(
        "request", lambda r: asked.append(curve_query(r)) if "/metrics/curve?" in r.url else None
    )
    await drag(page, loss, 0.3, 0.5)
    await expect(loss).not_to_have_attribute("data-zoom", "")
    await expect(loss).not_to_have_attribute("data-loading", "true")
    zoomed = [q for q in asked if q.get("tag") == "train/loss"]
    assert len(zoomed) == 3 and len({(q["start"], q["end"]) for q in zoomed}) == 1, zoomed
    start, end = int(zoomed[0]["start"]), int(zoomed[0]["end"])
    assert 0 < start < end < 440, (start, end)
    window = await loss.get_attribute("data-zoom")
    await page.screenshot(path=screenshots / "03-zoomed.png", full_page=True)
    asked.clear()
    async with page.expect_response(
        lambda r: "/metrics/curve?" in r.url and "tag=train" in r.url, timeout=15_000
    ):
        pass  # the page's own refresh (every 5 s while job C runs)
    assert all(
        (q["start"], q["end"]) == (str(start), str(end))
        for q in asked
        if q.get("tag") == "train/loss"
    ), asked
    await expect(loss).to_have_attribute("data-zoom", window or "")
    # double-click: the whole series again
    asked.clear()
    await loss.locator(".u-over").dblclick()
    await expect(loss).to_have_attribute("data-zoom", "")
    assert any(q.get("tag") == "train/loss" and "start" not in q for q in asked), asked

    # More than 20 jobs asked for: the first 20, and said so.
    many = ",".join([a] * 1 + [f"j-{i}" for i in range(22)])
    await page.goto(jobs.url + f"/console/#/compare?jobs={many}")
    said = page.get_by_role("status").filter(has_text="At most 20 jobs are compared")
    await expect(said).to_contain_text("3 more were asked for and left out")

    # Dark, at a tablet's size: the legend under the plot, the keyboard zooms (+) and resets (Esc).
    dark = await browser.new_context(color_scheme="dark", viewport={"width": 820, "height": 1180})
    try:
        other = await dark.new_page()
        await sign_in(
            other, jobs.url + f"/console/#/compare?jobs={a},{b},{c}", jobs.cluster.servers.token
        )
        loss = other.locator('figure.chart[data-tag="train/loss"]')
        await expect(loss).to_have_attribute("data-attempts", "3")
        await expect(loss.locator(".chart-body")).to_have_class("chart-body narrow")
        await other.screenshot(path=screenshots / "04-dark-tablet.png", full_page=True)
        assert not await accessibility_violations(other)
        plot = loss.get_by_role("img", name="Line chart of train/loss by step")
        await plot.focus()
        async with other.expect_request(lambda r: "/metrics/curve?" in r.url and "start=" in r.url):
            await other.keyboard.press("+")
        await expect(loss).not_to_have_attribute("data-zoom", "")
        await other.keyboard.press("Escape")
        await expect(loss).to_have_attribute("data-zoom", "")
    finally:
        await dark.close()


async def test_the_job_page_chart_settings_and_downloads(
    jobs: Jobs, page: Page, screenshots: Path
) -> None:
    """The job page gets the same chart: its settings bar, a legend with last values, the JSON
    download of what is shown, whole-step ticks on a short zoom."""
    await sign_in(page, jobs.url + f"/console/#/jobs/{jobs.a}", jobs.cluster.servers.token)
    loss = page.locator('figure.chart[data-tag="train/loss"]')
    await expect(loss).to_have_attribute("data-attempts", "1")
    await expect(page.get_by_role("group", name="Chart settings")).to_be_visible()
    await expect(loss.get_by_role("button", name="attempt 1")).to_contain_text("last ")
    # zoom to a few steps: the axis ticks are whole steps
    await drag(page, loss, 0.50, 0.51)
    await expect(loss).not_to_have_attribute("data-zoom", "")
    await expect(loss).not_to_have_attribute("data-loading", "true")
    await expect(loss).to_have_attribute("data-x-ticks", re.compile(r"^-?\d+(,-?\d+)*$"))
    ticks = (await loss.get_attribute("data-x-ticks") or "").split(",")
    assert ticks and all(t.lstrip("-").isdigit() for t in ticks), ticks  # never a fraction
    async with page.expect_download() as download:
        await loss.get_by_role("button", name="Download train/loss as JSON").click()
    body = (await (await download.value).path()).read_text()
    shown = json.loads(body)
    lo, hi = shown["window"]
    assert shown["tag"] == "train/loss" and shown["rows"]
    assert all(lo <= r["x"] <= hi for r in shown["rows"]), shown["window"]
    await page.screenshot(path=screenshots / "01-job-chart.png", full_page=True)
    assert not await accessibility_violations(page)
