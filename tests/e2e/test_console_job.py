"""The job page in headless Chromium against one real `tp serve` shared by the module (real
PostgreSQL, the real container engine for the local backend's jobs): the attempts band of a
two-attempt job, the log's search and Follow on a running job, the bounded log of an ended
one with its whole copy downloadable, an artifact downloaded byte for byte, and the System
group beside the training charts. Jobs that need a second attempt or system series are stored
through the PostgreSQL adapters the server reads (a second attempt otherwise needs a node lost;
system series a node daemon: tests/e2e/test_system_metrics.py drives that path for real).
Each page state is checked with axe-core in light and dark; screenshots under
test-artifacts/console/<test>/."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from adapters.postgres.engine import create_engine
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from domain.artifacts import ArtifactFile, ArtifactRecord, Manifest
from domain.jobs import Attempt, Job, Member
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.retry import RetryPolicy
from domain.telemetry import MemberScope
from domain.telemetry_ports import CollectorCounters
from tests.contract.builders import a_job, a_member, a_spec, an_attempt
from tests.e2e.test_walkthrough import Cli, hello_workspace, job_id_in
from tests.fixtures.browser import accessibility_violations
from tests.fixtures.server import Servers
from tests.support import http
from tests.support.points import source_batch

pytestmark = pytest.mark.e2e

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def server(module_api_server: Servers) -> Iterator[Servers]:
    yield module_api_server


@pytest.fixture(scope="module")
def jobs_cli(server: Servers, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return hello_workspace(server.url, server.token, tmp_path_factory.mktemp("cli"))


def submit(cli: Cli, command: str) -> str:
    out = cli("submit", "hello", "--profile", "cpu:1", "--set", f"command={command}", "--yes")
    return job_id_in(out.stdout)


async def open_job(page: Page, server: Servers, job_id: str) -> None:
    await page.goto(server.url + f"/console/#/jobs/{job_id}")
    await page.get_by_label("API token").fill(server.token)
    await page.get_by_label("API token").press("Enter")
    await expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()


async def clean_in_light_and_dark(page: Page) -> None:
    assert not await accessibility_violations(page)
    await page.emulate_media(color_scheme="dark")
    assert not await accessibility_violations(page)
    await page.emulate_media(color_scheme="light")


async def store(
    server: Servers,
    job: Job,
    attempts: list[Attempt],
    members: list[Member],
    records: list[ArtifactRecord] = [],  # noqa: B006 (never changed)
) -> None:
    """A job, its attempts, members and manifests, through the server's own PostgreSQL
    adapters."""
    engine = create_engine(server.env["TUNEPLANE_DATABASE_URL"])
    try:
        async with PostgresUnitOfWork(engine) as uow:
            await uow.jobs.add(job)
            for attempt in attempts:
                await uow.attempts.add(attempt)
            for member in members:
                await uow.members.add(member)
            for record in records:
                await uow.artifacts.record(record)
            await uow.commit()
    finally:
        await engine.dispose()


async def test_the_attempts_band_says_how_each_ended_and_the_backoff(
    server: Servers, page: Page, screenshots: Path
) -> None:
    """Attempt 1 lost its node after 40 s; attempt 2 began 30 s later and succeeded without
    writing a file. One band per attempt, their facts reachable by keyboard; "Timeline" shown
    once; the Artifacts section says what the completed member left (nothing), not that
    nothing was recorded."""
    retry = RetryPolicy.parse({"max_attempts": 2, "on": ["node-lost"]})
    job = a_job(owner="admin", state=JobState.SUCCEEDED, spec=a_spec(retry=retry),
                created_at=T0, updated_at=T0 + timedelta(seconds=100))  # fmt: skip
    first = an_attempt(job, 1, state=AttemptState.FAILED, cause="node-lost", reason="node n1 lost",
                       created_at=T0, updated_at=T0 + timedelta(seconds=40))  # fmt: skip
    second = an_attempt(job, 2, state=AttemptState.SUCCEEDED, created_at=T0 + timedelta(seconds=70),
                        updated_at=T0 + timedelta(seconds=100))  # fmt: skip
    m1 = a_member(first, 0, state=MemberState.FAILED)
    m2 = a_member(second, 0, state=MemberState.SUCCEEDED, exit_code=0)
    empty = ArtifactRecord(m2.id, job.id, second.id, 2, 0, Manifest(()), T0)
    await store(server, job, [first, second], [m1, m2], [empty])

    await open_job(page, server, job.id)
    band = page.locator("figure.band")
    await expect(band).to_have_attribute("data-attempts", "2")
    segments = band.locator(".band-segment")
    await expect(segments.nth(0)).to_have_attribute("data-outcome", "node-lost")
    await expect(segments.nth(0)).to_contain_text("#1 node-lost")
    await expect(segments.nth(1)).to_contain_text("#2 succeeded")
    await expect(band.locator(".band-gap")).to_have_text("30 s")  # the backoff between them
    # by keyboard: each segment is focusable and named with its facts (the tooltip says the same)
    await segments.nth(0).focus()
    await expect(segments.nth(0)).to_be_focused()
    name = await segments.nth(0).get_attribute("aria-label")
    assert name is not None and "(40 s), ended node-lost: node n1 lost" in name, name
    assert "attempt 2 started 30 s later" in name, name
    assert await segments.nth(0).get_attribute("title") == name
    await page.keyboard.press("Tab")
    await expect(segments.nth(1)).to_be_focused()
    # "Timeline" once, naming its table
    await expect(page.get_by_text("Timeline", exact=True)).to_have_count(1)
    await expect(page.get_by_role("table", name="Timeline")).to_be_visible()
    artifacts = page.get_by_role("region", name="Artifacts")
    await expect(artifacts).to_contain_text(
        "Attempt 2 member 0 completed and left no files in its output directory"
    )
    await expect(artifacts).not_to_contain_text("No output files recorded")
    await page.screenshot(path=screenshots / "01-band.png", full_page=True)
    await clean_in_light_and_dark(page)
    await page.set_viewport_size({"width": 820, "height": 1180})  # a tablet
    await expect(segments.nth(1)).to_be_visible()
    await page.screenshot(path=screenshots / "02-band-tablet.png", full_page=True)


async def test_a_file_kept_on_a_node_that_is_away_says_so_and_saves_nothing(
    server: Servers, page: Page, expected_statuses: set[int]
) -> None:
    """A file a node keeps has its Download button too (its node sends it through the control
    plane: tests/e2e/test_node_artifacts.py); when the node cannot, the alert says why."""
    expected_statuses.add(503)  # the download below
    job = a_job(owner="admin", state=JobState.SUCCEEDED, created_at=T0, updated_at=T0)
    attempt = an_attempt(job, 1, state=AttemptState.SUCCEEDED, created_at=T0, updated_at=T0)
    member = a_member(attempt, 0, state=MemberState.SUCCEEDED, exit_code=0)
    files = Manifest.of([ArtifactFile("ckpt/model.pt", 11, "ab" * 32)])
    kept = ArtifactRecord(member.id, job.id, attempt.id, 1, 0, files, T0, "n-away")
    await store(server, job, [attempt], [member], [kept])
    await open_job(page, server, job.id)
    row = page.get_by_role("row").filter(has_text="ckpt/model.pt")
    await expect(row).to_contain_text("node n-away")
    await row.get_by_role("button", name="Download ckpt/model.pt (attempt 1, member 0)").click()
    alert = page.get_by_role("alert").filter(has_text="ckpt/model.pt")
    await expect(alert).to_contain_text("node n-away is gone from the fleet")
    await expect(page.get_by_role("status").filter(has_text="Downloaded")).to_have_count(0)


async def test_the_log_of_a_running_job_is_searched_as_it_arrives_and_followed(
    server: Servers, jobs_cli: Cli, page: Page, screenshots: Path
) -> None:
    job_id = submit(
        jobs_cli, 'i=0; while true; do i=$((i+1)); echo "Tick $i loss=0.$i"; sleep 0.05; done'
    )
    jobs_cli.wait_state(job_id, {"running"}, timeout=120)
    try:
        await open_job(page, server, job_id)
        log = page.get_by_label("Job log")
        await expect(log).to_contain_text("Tick 40 ")
        follow = page.get_by_role("button", name="Follow")
        await expect(follow).to_have_attribute("aria-pressed", "true")
        search = page.get_by_label("Search log")
        count = page.locator(".log-count")
        await search.fill("tick")  # case-insensitive
        first = int((await count.text_content() or "0").split()[0])
        assert first >= 40
        # new lines are searched as they arrive
        await expect(count).not_to_have_text(re.compile(rf"^{first} match"))
        await search.press("Enter")
        await expect(count).to_have_text(re.compile(r"^1 of \d+$"))
        await expect(log.locator("mark.current")).to_have_text("Tick")
        await expect(follow).to_have_attribute("aria-pressed", "false")  # reading a match
        await search.press("Shift+Enter")  # from the first back round to the last
        await expect(count).not_to_have_text(re.compile(r"^1 of "))
        await expect(log.locator("mark.current")).to_have_text("Tick")
        # back at the bottom: Follow again, and new lines keep it there
        await follow.click()
        await expect(follow).to_have_attribute("aria-pressed", "true")
        await page.wait_for_function(
            "() => { const el = document.querySelector('pre.logs');"
            " return el.scrollTop + el.clientHeight >= el.scrollHeight - 4; }"
        )
        # scrolling up pauses it; scrolling back to the bottom resumes it
        await log.evaluate("el => el.scrollTo(0, 0)")
        await expect(follow).to_have_attribute("aria-pressed", "false")
        await log.evaluate("el => el.scrollTo(0, el.scrollHeight)")
        await expect(follow).to_have_attribute("aria-pressed", "true")
        # a regular expression, and a bad one explained
        await page.get_by_label("Regular expression").check()
        await search.fill(r"loss=0\.1\d\b")
        await expect(count).to_have_text("10 matches")  # 10 … 19
        await search.fill("loss=(")
        alert = page.get_by_role("alert")
        await expect(alert).to_contain_text("Not a valid regular expression")
        await expect(alert).to_contain_text('untick "Regular expression"')
        await expect(search).to_have_attribute("aria-invalid", "true")
        await search.fill("Tick 3\\b")
        await expect(log.locator("mark").first).to_have_text("Tick 3")
        await page.screenshot(path=screenshots / "01-search-follow.png")
        await clean_in_light_and_dark(page)
    finally:
        jobs_cli("job", "stop", job_id)


async def test_an_ended_jobs_long_log_is_bounded_and_its_file_downloads(
    server: Servers, jobs_cli: Cli, page: Page, screenshots: Path
) -> None:
    """6,000 lines: the page keeps the last 5,000 and says 1,000 were dropped; the whole log and
    the job's output file download through the token (fetch, Blob, object URL), the file byte
    for byte the one the job wrote."""
    model = '"$TUNEPLANE_OUTPUT_DIR/model"'
    job_id = submit(jobs_cli, f'seq 1 6000 | sed "s/^/row /"; mkdir -p {model};'
                    f' head -c 300000 /dev/urandom > {model}/weights.bin')  # fmt: skip
    job = jobs_cli.wait_state(job_id, {"succeeded", "failed"}, timeout=120)
    assert job["state"] == "succeeded", job
    whole_log = http.get(f"{server.url}/v1/jobs/{job_id}/logs", headers=server.headers).text
    lines = whole_log.split("\n")[:-1]  # the runner's own lines too, if any
    dropped = len(lines) - 5000
    assert dropped >= 1000
    await open_job(page, server, job_id)
    log = page.get_by_label("Job log")
    await expect(log).to_contain_text("row 6000")
    note = f"Showing the last 5,000 lines: {dropped:,} earlier lines were dropped"
    await expect(page.get_by_text(note)).to_be_visible()
    shown = await log.text_content() or ""
    assert shown.startswith(lines[dropped] + "\n") and "\nrow 1000\n" not in shown
    async with page.expect_download() as whole:
        await page.get_by_role("button", name="Download the whole log").first.click()
    saved = await (await whole.value).path()
    assert Path(saved).read_text() == whole_log  # noqa: ASYNC240  # every line, the dropped ones too
    await page.get_by_label("Search log").fill("ROW 59")  # rows 59 and 590-599 were dropped
    await expect(page.locator(".log-count")).to_have_text("100 matches")  # 5900-5999

    written = (server.state_dir / "outputs" / job_id).rglob("weights.bin")
    wrote = next(written).read_bytes()
    row = page.get_by_role("row").filter(has_text="model/weights.bin")
    async with page.expect_download() as got:
        await row.get_by_role(
            "button", name="Download model/weights.bin (attempt 1, member 0)"
        ).click()
    download = await got.value
    assert download.suggested_filename == "weights.bin"
    assert Path(await download.path()).read_bytes() == wrote  # noqa: ASYNC240
    await expect(
        page.get_by_role("status").filter(has_text="Downloaded model/weights.bin")
    ).to_contain_text("SHA-256 checked")
    await page.screenshot(path=screenshots / "01-bounded-log-and-download.png", full_page=True)
    await clean_in_light_and_dark(page)
    # the same file through the CLI
    out = jobs_cli(
        "artifacts", "get", job_id, "model/weights.bin", "-o", str(jobs_cli.cwd / "w.bin")
    )
    assert hashlib.sha256(wrote).hexdigest() in out.stdout + out.stderr
    assert (jobs_cli.cwd / "w.bin").read_bytes() == wrote


async def boxes(page: Page) -> tuple[dict[str, float], dict[str, float]]:
    """The training and System sections' boxes, read in one frame (the page may scroll between
    two separate reads while the rest of it loads)."""
    found = await page.evaluate(
        "() => ['section.training', 'section.system'].map((q) => {"
        " const r = document.querySelector(q).getBoundingClientRect();"
        " return {x: r.x, y: r.y, width: r.width, height: r.height}; })"
    )
    return found[0], found[1]


async def test_the_system_group_sits_beside_the_training_charts(
    server: Servers, page: Page, screenshots: Path
) -> None:
    """Member 0's system source (as its node's collector ships it, system#0) and a training
    curve: two columns at 1280 px, one above the other on a tablet."""
    job = a_job(owner="admin", state=JobState.SUCCEEDED)
    attempt = an_attempt(job, 1, state=AttemptState.SUCCEEDED)
    member = a_member(attempt, 0, state=MemberState.SUCCEEDED, exit_code=0)
    await store(server, job, [attempt], [member])
    pool = await create_pool(server.env["TUNEPLANE_DATABASE_URL"])
    try:
        steps = range(0, 50)
        n = len(steps)
        walls = [1.7e9 + s for s in steps]
        batches = [
            source_batch("train.jsonl#0", "jsonl", ["train/loss"] * n, list(steps), steps, walls,
                         [1.0 / (s + 1) for s in steps]),
            source_batch("system#0", "jsonl",
                         ["sys/cpu/utilization"] * n + ["sys/memory/used_mb"] * n,
                         list(range(2 * n)), [*steps, *steps], walls * 2, [0.5] * n + [512.0] * n),
        ]  # fmt: skip
        await PostgresMetrics(pool).append(
            MemberScope(job.id, attempt.id, member.id, 0),
            batches,
            CollectorCounters(),
            datetime.now(UTC),
        )
    finally:
        await pool.close()

    await open_job(page, server, job.id)
    training = page.get_by_role("region", name="Metrics")
    system = page.get_by_role("region", name="System")
    loss = training.get_by_role("img", name="Line chart of train/loss by step")
    cpu = system.get_by_role("img", name="Line chart of sys/cpu/utilization by step")
    await expect(loss).to_be_visible()
    await expect(cpu).to_be_visible()
    await expect(training.get_by_role("img", name="sys/cpu/utilization")).to_have_count(0)
    t, s = await boxes(page)
    assert s["x"] >= t["x"] + t["width"] - 1 and abs(s["y"] - t["y"]) < 1, (t, s)
    await page.screenshot(path=screenshots / "01-system-beside.png", full_page=True)
    await clean_in_light_and_dark(page)
    await page.set_viewport_size({"width": 820, "height": 1180})  # a tablet: one column
    t, s = await boxes(page)
    assert s["y"] >= t["y"] + t["height"] - 1, (t, s)
    await page.screenshot(path=screenshots / "02-system-tablet.png", full_page=True)
