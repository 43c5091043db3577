"""The console's lists in headless Chromium against one real `tp serve` shared by the module:
the Jobs list's columns (duration, attempts, GPUs, queue position), its search (``_`` and ``%``
literal), its 10 s refresh keeping filters, focus, typed text and selection (on Playwright's
clock), the compare link; the Fleet page's bars and badges with their change times, and a node's
connectivity history. axe-core in light and dark; screenshots at 1280 px and 820x1180.

Jobs are written through the real PostgreSQL adapters the server reads (as
tests/e2e/test_console_ops.py does): a pending job whose pool does not exist stays pending (the
scheduler says its pool is gone), so its queue position is stable, and an ended job with two
attempts needs no backend.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from adapters.postgres.engine import create_engine
from adapters.postgres.uow import PostgresUnitOfWork
from domain.catalog import Resources
from domain.jobs import Job
from domain.lifecycle import AttemptState, JobState
from domain.requests import RoleSpec
from tests.contract.builders import a_job, a_spec, an_attempt
from tests.fixtures.browser import accessibility_violations
from tests.fixtures.nodes import NodeCluster, shared_node_cluster
from tests.fixtures.server import Servers

pytestmark = pytest.mark.e2e

GONE = (RoleSpec("main", "cpu:1", "gone", 1, Resources(cpus=1.0, memory_mb=512, gpus=0)),)
Stored = tuple[Job, list[tuple[JobState, datetime]], int]  # a job, its moves, its attempts
GPUS = (RoleSpec("main", "a100:4", "local", 2, Resources(cpus=8.0, memory_mb=4096, gpus=4)),)


async def _store(server: Servers, *jobs: Stored) -> None:
    """Each job added pending, moved through the given states at the given times (the job's
    timeline), with that many attempts."""
    engine = create_engine(server.env["TUNEPLANE_DATABASE_URL"])
    try:
        async with PostgresUnitOfWork(engine) as uow:
            for job, moves, attempts in jobs:
                await uow.jobs.add(job)
                for n in range(1, attempts + 1):
                    await uow.attempts.add(an_attempt(job, n, state=AttemptState.SUCCEEDED))
                current = job
                for target, at in moves:
                    moved = current.moved(target, at)
                    await uow.jobs.update(moved, current.state)
                    current = moved
            await uow.commit()
    finally:
        await engine.dispose()


def _pending(experiment: str, created: datetime) -> Stored:
    spec = replace(a_spec(experiment=experiment), roles=GONE)
    return a_job(owner="admin", spec=spec, created_at=created), [], 0


async def _sign_in(page: Page, server: Servers, route: str) -> None:
    await page.goto(server.url + "/console/" + route)
    await page.get_by_label("API token").fill(server.token)
    await page.get_by_label("API token").press("Enter")


@pytest.fixture(scope="module")
def cluster(
    module_pg_url: str, docker_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeCluster]:
    """One `tp serve` with its gateways and one node daemon (n1, pool "nodes", 0.5 CPU),
    shared by the module: the Jobs list's tests write their own jobs beside it."""
    state = tmp_path_factory.mktemp("lists")
    with shared_node_cluster(module_pg_url, docker_host, state, 1) as made:
        yield made


@pytest.fixture
async def dark(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(
        color_scheme="dark", viewport={"width": 820, "height": 1180}
    )
    yield await context.new_page()
    await context.close()


async def test_jobs_list_columns_search_refresh_and_compare_selection(
    cluster: NodeCluster, page: Page, dark: Page, screenshots: Path
) -> None:
    server = cluster.servers
    now = datetime.now(UTC)
    first = _pending("lr_100", now - timedelta(minutes=3))
    second = _pending("lrx100", now - timedelta(minutes=2))
    ended = a_job(owner="admin", spec=replace(a_spec(experiment="big"), roles=GPUS),
                  created_at=now - timedelta(minutes=12))  # fmt: skip
    path = [
        (JobState.STARTING, now - timedelta(minutes=11)),
        (JobState.RUNNING, now - timedelta(minutes=10)),
        (JobState.SUCCEEDED, now - timedelta(minutes=4)),
    ]
    await _store(server, first, second, (ended, path, 2))
    a, b = first[0].id, second[0].id

    await page.clock.install()  # the list's refresh runs on this clock
    await _sign_in(page, server, "#/jobs")
    table = page.get_by_role("table")
    done = table.get_by_role("row").filter(has_text=ended.id)
    # Select, Job, State, Experiment, Owner, Queue, GPUs, Duration, Attempts, Queue position
    await expect(done.get_by_role("cell").nth(6)).to_have_text("8 GPUs")
    await expect(done.get_by_role("cell").nth(7)).to_have_text("ran 6 min")
    await expect(done.get_by_role("cell").nth(8)).to_have_text("2")
    await expect(done.get_by_role("cell").nth(9)).to_have_text("")
    row_a = table.get_by_role("row").filter(has_text=a)
    await expect(row_a.get_by_role("cell").nth(6)).to_have_text("1 CPU")
    await expect(row_a.get_by_role("cell").nth(7)).to_have_text(re.compile(r"^waiting 3 min"))
    await expect(row_a.get_by_role("cell").nth(9)).to_have_text("1 of 2")
    row_b = table.get_by_role("row").filter(has_text=b)
    await expect(row_b.get_by_role("cell").nth(9)).to_have_text("2 of 2")
    await page.screenshot(path=screenshots / "01-jobs-1280.png", full_page=True)
    assert not await accessibility_violations(page)

    # Search: "_" is a character, not a wildcard; "%" matches nothing; kept in the URL.
    search = page.get_by_label("Search")
    await search.fill("_100")
    await search.press("Enter")
    await expect(page).to_have_url(re.compile(r"#/jobs\?q=_100$"))
    await expect(page.get_by_role("table").get_by_role("row")).to_have_count(2)  # header + a
    await expect(page.get_by_role("table")).to_contain_text(a)
    await search.fill("%")
    await search.press("Enter")
    await expect(page.get_by_text("No jobs match “%”.")).to_be_visible()
    await search.fill("LR")
    await search.press("Enter")
    await expect(page.get_by_role("table").get_by_role("row")).to_have_count(3)

    # Pick two with the keyboard: the compare link names them in the order picked.
    box_b = page.get_by_role("checkbox", name=f"Select job {b} to compare")
    box_a = page.get_by_role("checkbox", name=f"Select job {a} to compare")
    await box_b.focus()
    await page.keyboard.press("Space")
    await box_a.focus()
    await page.keyboard.press("Space")
    compare = page.get_by_role("link", name="Compare selected (2)")
    await expect(compare).to_have_attribute("href", f"#/compare?jobs={b},{a}")

    # A job arrives; the refresh (10 s, on the page's clock) shows it and keeps the search,
    # the focus on the checkbox and the selection.
    third = _pending("lr-late", now)
    await _store(server, third)
    await page.clock.run_for(10_500)
    await expect(page.get_by_role("table")).to_contain_text(third[0].id)
    await expect(box_a).to_be_focused()
    await expect(box_a).to_be_checked()
    await expect(box_b).to_be_checked()
    await expect(search).to_have_value("LR")
    await expect(compare).to_be_visible()
    # ... and what is being typed (not yet applied) stays, with the focus in the field.
    await search.fill("lr-la")
    await page.clock.run_for(10_500)
    await expect(page.locator("#jobs-updated")).to_be_visible()
    await expect(search).to_have_value("lr-la")
    await expect(search).to_be_focused()
    await page.screenshot(path=screenshots / "02-selected.png", full_page=True)

    # The selection is kept across pages (sessionStorage), and at 20 the list says it is full.
    await page.goto(server.url + "/console/#/jobs?limit=1")
    await expect(page.get_by_role("link", name="Compare selected (2)")).to_be_visible()
    ids = [f"job-x{i}" for i in range(19)] + [a]
    keep = "ids => sessionStorage.setItem('tuneplane.jobs.selected', JSON.stringify(ids))"
    await page.evaluate(keep, ids)
    await page.goto(server.url + "/console/#/jobs")
    await expect(page.get_by_role("link", name="Compare selected (20)")).to_be_visible()
    await expect(page.locator("#compare-limit")).to_contain_text("20 is the most")
    await expect(page.get_by_role("checkbox", name=f"Select job {b} to compare")).to_be_disabled()
    await page.get_by_role("button", name="Clear selection").press("Enter")
    await expect(page.get_by_text("0 selected")).to_be_visible()
    await expect(page.get_by_role("checkbox", name=f"Select job {b} to compare")).to_be_enabled()

    # Dark, at a tablet's size: the same page, axe-clean.
    await _sign_in(dark, server, "#/jobs?q=lr")
    await expect(dark.get_by_role("table")).to_contain_text(a)
    await dark.screenshot(path=screenshots / "03-jobs-dark-820.png", full_page=True)
    assert not await accessibility_violations(dark)


def _submit_sleeper(cluster: NodeCluster) -> str:
    """A job holding all of n1's 0.5 CPU until cancelled."""
    intent = {
        "experiment": "hold",
        "method": "custom/custom",
        "profile": "nodes/cpu:0.5",
        "params": {"command": "sleep 300"},
    }
    preview = cluster.api("POST", "/v1/previews", intent)
    body = {
        "preview_id": preview["id"],
        "digest": preview["digest"],
        "retry_key": str(uuid.uuid4()),
    }
    job_id: str = cluster.api("POST", "/v1/jobs", body)["job_id"]
    deadline = time.monotonic() + 90
    while cluster.api("GET", f"/v1/jobs/{job_id}")["state"] != "running":
        assert time.monotonic() < deadline, f"job {job_id} did not start"
        time.sleep(0.3)
    return job_id


def _connectivity(cluster: NodeCluster, node: str) -> str:
    return str(cluster.nodes()[node]["connectivity"])


def _until(check: Callable[[], str], want: str) -> None:
    deadline = time.monotonic() + 60
    while (got := check()) != want:
        assert time.monotonic() < deadline, f"still {got}, not {want}"
        time.sleep(0.2)


async def test_fleet_bars_state_times_and_connectivity_history(
    cluster: NodeCluster, page: Page, dark: Page, screenshots: Path
) -> None:
    server = cluster.servers
    # n1 goes away (its daemon stops: the session closes) and comes back.
    cluster.kill_daemon("n1", signal.SIGTERM)
    await asyncio.to_thread(_until, lambda: _connectivity(cluster, "n1"), "disconnected")
    cluster.start_daemon("n1")
    await asyncio.to_thread(_until, lambda: _connectivity(cluster, "n1"), "connected")
    job_id = await asyncio.to_thread(_submit_sleeper, cluster)
    cluster.api("POST", "/v1/nodes/n1/cordon")
    try:
        n1 = cluster.nodes()["n1"]
        [history] = [h for h in cluster.api("GET", "/v1/fleet/connectivity") if h["node"] == "n1"]
        assert [c["connectivity"] for c in history["changes"][:2]] == ["connected", "disconnected"]

        await page.clock.install()  # the page's 15 s refresh runs on this clock
        await _sign_in(page, server, "#/fleet")
        row = page.get_by_role("table", name="Nodes of pool nodes").get_by_role("row").nth(1)
        cells = row.get_by_role("cell")
        # Node, Scheduling, Connectivity, Last 24 h, Validation, GPUs, CPUs, Memory MB, ...
        since = await page.evaluate(
            "iso => 'since ' + new Date(iso).toLocaleString()", n1["sched_changed_at"]
        )
        await expect(cells.nth(1)).to_have_text(f"cordoned {since}")
        conn_since = await page.evaluate(
            "iso => 'since ' + new Date(iso).toLocaleString()", n1["connectivity_changed_at"]
        )
        await expect(cells.nth(2)).to_have_text(f"connected {conn_since}")
        cpus = page.get_by_role("meter", name="CPUs reserved on n1: 0.5 of 0.5 reserved (100%)")
        await expect(cpus).to_have_attribute("value", "0.5")
        await expect(cells.nth(6)).to_have_text("0.5 of 0.5 reserved (100%)")
        await expect(cells.nth(5)).to_have_text("none")  # a CPU node: no GPU bar
        await expect(
            page.get_by_role("meter", name=re.compile(r"^Memory MB reserved on n1: "))
        ).to_have_count(1)
        pool_cpus = page.get_by_role(
            "meter", name="CPUs reserved in pool nodes: 0.5 of 0.5 reserved (100%)"
        )
        await expect(pool_cpus).to_be_visible()

        # The history: a strip with its words, and the changes behind a disclosure (keyboard).
        strip = page.get_by_role("img", name=re.compile(r"^Connectivity of n1 in the last 24 h: "))
        label = await strip.get_attribute("aria-label") or ""
        assert "disconnected from" in label and label.rstrip().count("connected from") >= 2, label
        summary = cells.nth(3).locator("summary")
        await summary.focus()
        await page.keyboard.press("Enter")
        changes = cells.nth(3).get_by_role("listitem")
        await expect(changes.nth(0)).to_have_text(re.compile(r" connected$"))
        await expect(changes.nth(1)).to_have_text(re.compile(r" disconnected$"))
        await page.screenshot(path=screenshots / "01-fleet-1280.png", full_page=True)
        assert not await accessibility_violations(page)
        await page.keyboard.press("Escape")  # closes it again
        await expect(changes.nth(0)).to_be_hidden()
        await expect(summary).to_be_focused()

        async with page.expect_response(lambda r: "/v1/fleet/connectivity" in r.url):
            await page.clock.fast_forward(16_000)  # still refreshes every 15 s
        await expect(cells.nth(1)).to_contain_text("cordoned")

        await _sign_in(dark, server, "#/fleet")
        await expect(
            dark.get_by_role("meter", name=re.compile(r"^CPUs reserved on n1"))
        ).to_be_visible()
        await dark.screenshot(path=screenshots / "02-fleet-dark-820.png", full_page=True)
        assert not await accessibility_violations(dark)
    finally:
        cluster.api("POST", "/v1/nodes/n1/uncordon")
        cluster.api("POST", f"/v1/jobs/{job_id}/cancel")
