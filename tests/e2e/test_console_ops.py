"""The console's operator and live views in headless Chromium against a real `tp serve`: Fleet
buttons (cordon with confirmation; none for members), a pending job's page following the job to
its end by itself, a chart overlaying two attempts with the raw inspector reading each, each
member's own log, and a pool that takes no new work.
Screenshots are saved under test-artifacts/console/<test>/ (fixtures: tests/fixtures/browser.py).
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Dialog, Page, Route, expect

from adapters.postgres.engine import create_engine
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from domain.checkpoints import Resume
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.retry import RetryPolicy
from domain.telemetry import MemberScope
from domain.telemetry_ports import CollectorCounters
from tests.contract.builders import a_job, a_member, a_spec, an_attempt
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.browser import accessibility_violations
from tests.fixtures.server import Servers
from tests.support.points import source_batch

pytestmark = pytest.mark.e2e
RESUMED = Resume("checkpoint-500", 1, 500, ("checkpoint-700 of attempt 1 skipped: w.bin: gone",))


async def test_cordon_from_the_fleet_page_a_pending_job_says_why_then_starts_by_itself(
    api_server: Servers, cli: Cli, page: Page, screenshots: Path
) -> None:
    await page.goto(api_server.url + "/console/#/fleet")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    local = page.get_by_role("table", name="Nodes of pool local").get_by_role("row").nth(1)
    await expect(local.get_by_role("cell").nth(1)).to_have_text(re.compile(r"^schedulable since "))

    # An admin cordons the node with its button, after a confirmation that says what it means.
    asked: list[str] = []

    async def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    page.once("dialog", accept)
    await page.get_by_role("button", name="Cordon node local", exact=True).click()
    await expect(page.get_by_role("status")).to_have_text("Node local is now cordoned.")
    assert asked and "no new work" in asked[0], asked
    await expect(local.get_by_role("cell").nth(1)).to_have_text(re.compile(r"^cordoned since "))
    await expect(local.get_by_role("cell").nth(2)).to_have_text(re.compile(r"^connected since "))
    await expect(page.get_by_role("button", name="Uncordon node local")).to_be_visible()
    await expect(page.get_by_role("button", name="Cordon node local", exact=True)).to_have_count(0)
    await page.screenshot(path=screenshots / "01-cordoned.png", full_page=True)
    assert not await accessibility_violations(page)
    page.once("dialog", lambda d: d.dismiss())  # declining changes nothing
    await page.get_by_role("button", name="Drain node local").click()
    await expect(local.get_by_role("cell").nth(1)).to_have_text(re.compile(r"^cordoned since "))
    assert "cordoned" in cli("fleet", "ls").stdout

    cli("new", "waiter", "--method", "custom/custom")
    out = cli("submit", "waiter", "--profile", "cpu:1", "--set", "command=true", "--yes")
    job_id = job_id_in(out.stdout)
    assert "(1 cordoned)" in cli("job", "why", job_id).stdout
    assert cli.status(job_id)["state"] == "pending"

    await page.goto(api_server.url + f"/console/#/jobs/{job_id}")
    reason = page.locator(".why")
    await expect(reason).to_contain_text("Why pending:")
    await expect(reason).to_contain_text("position 1 of 1")
    await expect(reason).to_contain_text("(1 cordoned)")  # what `tp job why` says too
    await expect(page.get_by_role("button", name="Stop job")).to_be_enabled()
    timeline = page.get_by_role("table", name="Timeline")
    await expect(timeline).to_contain_text("committed")
    await expect(timeline).not_to_contain_text("admitted")
    await page.screenshot(path=screenshots / "02-pending.png", full_page=True)
    assert not await accessibility_violations(page)

    # Uncordoned elsewhere: the page, not reloaded, follows the job to its end by itself.
    cli("fleet", "node", "uncordon", "local")
    await expect(page.locator(".facts")).to_contain_text("succeeded", timeout=60_000)
    await expect(timeline).to_contain_text("admitted")
    await expect(page.get_by_role("button", name="Stop job")).to_be_disabled()
    await page.screenshot(path=screenshots / "03-started-by-itself.png", full_page=True)


async def test_a_slow_page_never_draws_over_the_page_the_user_moved_to(
    api_server: Servers, page: Page
) -> None:
    """Signing in opens the Fleet page; its data arrives late (here: held back 2 s), after the
    user already went to Jobs. The late answer is dropped: the Jobs page stays (it used to be
    replaced by the Fleet page, detaching the link a user or test was about to click)."""

    async def slow(route: Route) -> None:
        await asyncio.sleep(2)
        await route.continue_()

    await page.route(re.compile(r".*/v1/fleet$"), slow)
    await page.goto(api_server.url + "/console/")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    await expect(page.get_by_role("heading", name="Fleet", level=1)).to_be_visible()
    await page.get_by_role("link", name="Jobs").click()
    await expect(page.get_by_role("heading", name="Jobs", level=1)).to_be_visible()
    await page.wait_for_load_state("networkidle")  # every held answer arrived and was handled
    await expect(page.get_by_role("heading", name="Jobs", level=1)).to_be_visible()
    await expect(page.get_by_role("heading", name="Fleet", level=1)).to_have_count(0)


async def signed_in_with_the_fleet_held(api_server: Servers, page: Page) -> asyncio.Event:
    """Sign in with the Fleet page's answer held back until the returned event is set; returns
    once the page says it is loading."""
    release = asyncio.Event()

    async def held(route: Route) -> None:
        await release.wait()
        await route.continue_()

    await page.route(re.compile(r".*/v1/fleet$"), held)
    await page.goto(api_server.url + "/console/")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    await expect(page.get_by_text("Loading…")).to_be_visible()
    return release


async def test_focus_moved_while_a_page_loads_stays_where_the_user_put_it(
    api_server: Servers, page: Page
) -> None:
    """Signing in opens the Fleet page, whose data is held back; meanwhile the keyboard user
    moves into the menu. When the page is drawn, the focus stays on the menu's link (it used to
    be moved to the page's content, under the user's fingers)."""
    release = await signed_in_with_the_fleet_held(api_server, page)
    link = page.get_by_role("link", name="Submit")
    await link.focus()
    release.set()
    await expect(page.get_by_text(re.compile(r"^Updated .*refreshes every"))).to_be_visible()
    await expect(link).to_be_focused()


async def test_signing_out_while_a_page_loads_leaves_the_sign_in_form(
    api_server: Servers, page: Page
) -> None:
    """The Fleet page's data is held back; meanwhile the user signs out. When the held answer
    arrives it is dropped: the sign-in form stays (the late page used to be drawn over it, with
    "no API token given" in its parts; CI saw it on a reloaded job page)."""
    release = await signed_in_with_the_fleet_held(api_server, page)
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_label("API token")).to_be_visible()
    release.set()
    await page.wait_for_load_state("networkidle")  # the held answer arrived and was handled
    await expect(page.get_by_label("API token")).to_be_visible()
    await expect(page.get_by_role("heading", name="Fleet", level=1)).to_have_count(0)
    assert await page.evaluate("sessionStorage.length") == 0


async def test_an_address_changed_while_signing_in_is_the_page_shown(
    api_server: Servers, page: Page
) -> None:
    """The token's check (GET /v1/whoami) is held back 2 s; meanwhile the address changes to the
    Jobs page. Once signed in, the Jobs page is shown: the address asked for last wins (it used to
    be replaced by the Fleet page, the default of the empty address the form was drawn at)."""
    held = asyncio.Event()

    async def slow(route: Route) -> None:
        if route.request.headers.get("authorization") and not held.is_set():
            held.set()
            await asyncio.sleep(2)
        await route.continue_()

    await page.route(re.compile(r".*/v1/whoami$"), slow)
    await page.goto(api_server.url + "/console/")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    await asyncio.wait_for(held.wait(), 20)  # the check is under way
    await page.goto(api_server.url + "/console/#/jobs")
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    await page.wait_for_load_state("networkidle")  # the held answer arrived and was handled
    await expect(page.get_by_role("heading", name="Jobs", level=1)).to_be_visible()
    await expect(page.get_by_role("heading", name="Fleet", level=1)).to_have_count(0)


async def test_members_get_no_fleet_buttons(
    api_server: Servers, cli: Cli, page: Page, expected_statuses: set[int]
) -> None:
    expected_statuses.add(403)  # owner= another user, below
    cli("admin", "user", "add", "mia", "--team", "default")
    mia = cli("admin", "token", "create", "mia").stdout.strip()
    await page.goto(api_server.url + "/console/#/fleet")
    await page.get_by_label("API token").fill(mia)
    await page.get_by_label("API token").press("Enter")
    nodes = page.get_by_role("table", name="Nodes of pool local")
    await expect(nodes).to_contain_text("schedulable")
    await expect(nodes.get_by_role("button")).to_have_count(0)
    await expect(nodes.get_by_role("columnheader", name="Actions")).to_have_count(0)
    # owner= another user is refused for a member: the list says so instead of showing nothing
    await page.goto(api_server.url + "/console/#/jobs?owner=admin")
    await expect(page.get_by_role("alert")).to_contain_text("may not list the jobs of admin")


async def test_a_chart_overlays_attempts_and_the_inspector_reads_each(
    api_server: Servers, page: Page, screenshots: Path
) -> None:
    """Two attempts of one job (attempt 2 resumed at step 500), stored through the real
    PostgreSQL adapters the server reads: one line per attempt with a legend, and the raw
    inspector switching between them."""
    url = api_server.env["TUNEPLANE_DATABASE_URL"]
    engine = create_engine(url)
    pool = await create_pool(url)
    retry = RetryPolicy.parse({"max_attempts": 2, "on": ["node-lost"]})
    job = a_job(owner="admin", state=JobState.FAILED, reason="OOM", spec=a_spec(retry=retry))
    scopes = []
    try:
        async with PostgresUnitOfWork(engine) as uow:
            await uow.jobs.add(job)
            for number in (1, 2):
                cause = "node-lost" if number == 1 else ""  # its node fenced: retried
                resume = RESUMED if number == 2 else None  # as the supervisor notes it
                attempt = an_attempt(
                    job, number, state=AttemptState.FAILED, cause=cause, resume=resume
                )
                member = a_member(attempt, 0, state=MemberState.FAILED)
                await uow.attempts.add(attempt)
                await uow.members.add(member)
                scopes.append(MemberScope(job.id, attempt.id, member.id, 0))
            await uow.commit()
        store = PostgresMetrics(pool)
        series = ((scopes[0], range(0, 800), 1.0), (scopes[1], range(500, 1000), 2.0))
        for scope, steps, value in series:
            n = len(steps)
            batch = source_batch(
                "train.jsonl#0", "jsonl", ["train/loss"] * n, [s * 50 for s in steps], steps,
                [1.7e9 + s for s in steps], [value] * n,
            )  # fmt: skip
            await store.append(scope, [batch], CollectorCounters(), datetime.now(UTC))
        # add_scalars("acc", {"train", "val"}) in attempt 1: one tag, two sub-runs, a NaN
        runs = []
        for run, value in (("acc/train", 0.5), ("acc/val", 0.25)):
            steps = range(0, 10)
            runs.append(source_batch(
                f"{run}/events.out.tfevents.1#0", "tfevents", ["acc"] * 10,
                [s * 50 for s in steps], steps, [1.7e9 + s for s in steps], [value] * 10,
            ))  # fmt: skip
        runs[1].points.value[3] = float("nan")  # type: ignore[attr-defined]
        await store.append(scopes[0], runs, CollectorCounters(), datetime.now(UTC))
    finally:
        await pool.close()
        await engine.dispose()

    await page.goto(api_server.url + f"/console/#/jobs/{job.id}")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")

    def chart(tag: str) -> Any:
        caption = page.locator("figcaption", has_text=re.compile(f"^{re.escape(tag)}$"))
        return page.locator("figure.chart").filter(has=caption)

    figure = chart("train/loss")
    await expect(figure).to_have_attribute("data-attempts", "2")
    await expect(figure).to_have_attribute("data-points", str(800 + 500))  # every step, each line
    legend = figure.locator(".legend")
    await expect(legend).to_contain_text("attempt 1")
    await expect(legend).to_contain_text("attempt 2")
    ends = page.get_by_role("table", name="Attempts").locator("tbody tr")
    await expect(ends.nth(0)).to_contain_text("node-lost")  # how attempt 1 ended
    await expect(ends.nth(1)).to_contain_text("failed")
    # the sub-runs are two lines, not one merged curve; the NaN bucket is a gap in its line
    acc = chart("acc")
    await expect(acc).to_have_attribute("data-lines", "attempt 1 · acc/train\nattempt 1 · acc/val")
    await expect(acc).to_have_attribute("data-points", str(10 + 9))
    await expect(acc.locator(".legend")).to_contain_text("attempt 1 · acc/val")
    await expect(ends.nth(0).get_by_role("cell").nth(3)).to_have_text("—")  # a first attempt
    resumed = ends.nth(1).get_by_role("cell").nth(3)
    await expect(resumed).to_contain_text("checkpoint-500 (step 500, attempt 1)")
    await expect(resumed.get_by_role("listitem")).to_have_text(RESUMED.skipped[0])
    notes = page.get_by_role("list", name="Checkpoints resumed").get_by_role("listitem")
    await expect(notes.nth(0)).to_have_text(
        "attempt 2 resumed from checkpoint-500 (step 500, written by attempt 1)"
    )
    await expect(notes.nth(1)).to_have_text(RESUMED.skipped[0])
    await expect(page.locator("dl.facts")).to_contain_text("2 attempts, a new one after node-lost")
    await page.screenshot(path=screenshots / "01-attempts.png", full_page=True)
    assert not await accessibility_violations(page)

    inspector = page.get_by_role("region", name="Raw scalars")
    await inspector.get_by_label("Source").select_option("train.jsonl#0")
    await inspector.get_by_label("Tag").select_option("train/loss")
    for attempt_no, logged in (("1", "1"), ("2", "2")):
        await inspector.get_by_label("Attempt").select_option(attempt_no)
        await inspector.get_by_label("From step").fill("600")
        await inspector.get_by_role("button", name="Show raw points").click()
        table = inspector.get_by_role("table", name=re.compile(f"attempt {attempt_no}, member 0"))
        row = table.locator("tbody tr").first.get_by_role("cell")
        await expect(row.nth(0)).to_have_text("600")
        await expect(row.nth(1)).to_have_text(logged)
    # a value that is not finite reads as such (the API's "NaN"), in its sub-run's series
    await inspector.get_by_label("Attempt").select_option("1")
    await inspector.get_by_label("Source").select_option("acc/val/events.out.tfevents.1#0")
    await inspector.get_by_label("Tag").select_option("acc")
    await inspector.get_by_label("From step").fill("3")
    await inspector.get_by_role("button", name="Show raw points").click()
    row = inspector.locator("table tbody tr").first.get_by_role("cell")
    await expect(row.nth(0)).to_have_text("3")
    await expect(row.nth(1)).to_have_text("NaN")


async def test_the_job_page_shows_each_members_own_log(
    api_server: Servers, page: Page, screenshots: Path
) -> None:
    """An ended job of two members whose logs were stored (the supervisor keeps every member's):
    the page shows member 0's, and the picker shows member 1's, never the other's."""
    engine = create_engine(api_server.env["TUNEPLANE_DATABASE_URL"])
    job = a_job(owner="admin", state=JobState.FAILED, reason="member 1 failed")
    try:
        async with PostgresUnitOfWork(engine) as uow:
            await uow.jobs.add(job)
            attempt = an_attempt(job, 1, state=AttemptState.FAILED)
            await uow.attempts.add(attempt)
            for index in (0, 1):
                await uow.members.add(a_member(attempt, index, state=MemberState.FAILED))
                await uow.logs.save(attempt.id, index, f"output of rank {index}\n".encode(), False)
            await uow.commit()
    finally:
        await engine.dispose()

    await page.goto(api_server.url + f"/console/#/jobs/{job.id}")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    log = page.get_by_label("Job log")
    await expect(log).to_have_text("output of rank 0\n")
    await page.get_by_label("Member").select_option("1")
    await expect(log).to_have_text("output of rank 1\n")
    await page.screenshot(path=screenshots / "01-member-1.png", full_page=True)
    assert not await accessibility_violations(page)
    await page.get_by_label("Member").select_option("0")
    await expect(log).to_have_text("output of rank 0\n")


async def test_the_fleet_page_says_why_a_pool_takes_no_new_work(
    api_server: Servers, page: Page, screenshots: Path
) -> None:
    """A pool its backend does not report (a Slurm partition that does not exist): the capacity
    sync's mark, written here through the real adapter, is on the Fleet page with its fix."""
    reason = "Slurm has no partition bogus (partitions: debug); fix: create partition bogus"
    engine = create_engine(api_server.env["TUNEPLANE_DATABASE_URL"])
    try:
        async with PostgresUnitOfWork(engine) as uow:
            await uow.fleet.set_pool_unavailable("local", reason)
            await uow.commit()
    finally:
        await engine.dispose()
    await page.goto(api_server.url + "/console/#/fleet")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    pool = page.get_by_role("region", name="Pool local (fleet local)", exact=True)
    await expect(pool).to_contain_text(f"Takes no new work: {reason}")
    await page.screenshot(path=screenshots / "01-unavailable.png", full_page=True)
    assert not await accessibility_violations(page)


async def test_a_refused_fleet_action_is_shown_with_the_apis_reason(
    api_server: Servers, cli: Cli, page: Page, expected_statuses: set[int]
) -> None:
    expected_statuses.add(403)
    cli("admin", "user", "add", "otto", "--team", "default", "--role", "operator")
    otto = cli("admin", "token", "create", "otto").stdout.strip()
    await page.clock.install()  # holds the page's 15 s refresh: the buttons stay as drawn
    await page.goto(api_server.url + "/console/#/fleet")
    await page.get_by_label("API token").fill(otto)
    await page.get_by_label("API token").press("Enter")
    drain = page.get_by_role("button", name="Drain node local")
    await expect(drain).to_be_visible()  # operators may change nodes

    cli("admin", "user", "set", "otto", "--role", "member")  # meanwhile, elsewhere
    as_otto = {"Authorization": f"Bearer {otto}"}

    async def role() -> str:
        answer = await page.request.get(api_server.url + "/v1/whoami", headers=as_otto)
        return str((await answer.json())["role"])

    for _ in range(120):  # the server caches a token's principal a few seconds
        if await role() == "member":
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError("otto is still an operator to the server")
    page.once("dialog", lambda d: d.accept())
    await drain.click()
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("Drain local refused:")
    await expect(alert).to_contain_text("Fix:")  # the API's fix, as given
    assert "schedulable" in cli("fleet", "ls").stdout  # nothing changed
    assert not await accessibility_violations(page)
