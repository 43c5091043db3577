"""The web console in headless Chromium against a real `tp serve` with a real job: sign in with
the keyboard (a refused token first), the Fleet page, the job in the Jobs list and its filters,
the job's page with its log, a reload that keeps the session, and signing out. Screenshots are
saved under test-artifacts/console/<test>/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from entrypoints.api.console import CSP, DEFAULT_DIST
from tests.e2e.test_node_backend import Factory, cli_for, submit
from tests.e2e.test_telemetry_e2e import wait_for
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.browser import accessibility_violations
from tests.fixtures.server import Servers

pytestmark = pytest.mark.e2e
EXAMPLE_PLUGIN = Path(__file__).resolve().parents[2] / "docs/examples/plugins/exact-match"


def submit_job(cli: Cli) -> str:
    cli("new", "hello", "--method", "custom/custom")
    (cli.cwd / "hello" / "train.sh").write_text(
        "echo 'hello from the console test'\necho ok > \"$TUNEPLANE_OUTPUT_DIR/report.txt\"\n"
    )
    out = cli("submit", "hello", "--profile", "cpu:1", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, timeout=120)
    assert job["state"] == "succeeded", job
    return job_id


async def test_sign_in_fleet_jobs_and_a_job(
    api_server: Servers, cli: Cli, page: Page, screenshots: Path
) -> None:
    assert (DEFAULT_DIST / "index.html").is_file(), (
        "the console is not built; fix: bash -c 'source deploy/dev/setup.sh'"
    )
    job_id = submit_job(cli)
    cli("plugin", "publish", str(EXAMPLE_PLUGIN))

    response = await page.goto(api_server.url + "/console/")
    assert response is not None and response.status == 200
    assert response.headers["content-security-policy"] == CSP

    # Sign in: a labelled field, Enter submits; a refused token is announced, not kept.
    field = page.get_by_label("API token")
    await expect(field).to_be_focused()
    await expect(field).to_have_attribute("type", "password")
    await field.fill("not-a-token")
    await field.press("Enter")
    await expect(page.get_by_role("alert")).to_contain_text("refused")
    assert await page.evaluate("sessionStorage.length") == 0
    await page.screenshot(path=screenshots / "01-refused.png")
    assert not await accessibility_violations(page)
    await field.fill(api_server.token)
    await field.press("Enter")

    # Fleet: the local pool, who is signed in, the navigation landmark.
    await expect(page.get_by_role("heading", name="Fleet", level=1)).to_be_visible()
    await expect(page.get_by_role("heading", level=2).first).to_contain_text("Pool")
    await expect(page.locator("#who")).to_contain_text("admin")
    await expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    await page.screenshot(path=screenshots / "02-fleet.png", full_page=True)
    assert not await accessibility_violations(page)

    # Jobs: the job is listed with its state; filters narrow the list.
    await page.get_by_role("link", name="Jobs").focus()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Jobs", level=1)).to_be_visible()
    await expect(page.locator("main")).to_be_focused()  # the new view, not the menu
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=job_id))
    await expect(row).to_contain_text("succeeded")
    await expect(row).to_contain_text("hello")
    await page.screenshot(path=screenshots / "03-jobs.png", full_page=True)
    assert not await accessibility_violations(page)
    await page.get_by_label("Owner").fill("somebody-else")
    await page.get_by_label("Owner").press("Enter")
    await expect(page.get_by_text("No jobs match")).to_be_visible()
    assert "owner=somebody-else" in page.url
    await page.get_by_label("Owner").fill("")
    await page.get_by_label("State").select_option("succeeded")
    await page.get_by_role("button", name="Apply").click()
    await expect(page.get_by_role("link", name=job_id)).to_be_visible()

    # Pages of the list, from the API's cursor: a second (newer) job, one job per page.
    newer = job_id_in(cli("submit", "hello", "--profile", "cpu:1", "--yes").stdout)
    cli.wait_state(newer, {"succeeded", "failed"}, timeout=120)
    await page.goto(api_server.url + "/console/#/jobs?limit=1&everyone=true")
    await expect(page.get_by_role("link", name=newer)).to_be_visible()
    await expect(page.get_by_role("link", name=job_id)).to_have_count(0)
    async with page.expect_response(lambda r: "cursor=" in r.url and "/v1/jobs?" in r.url):
        await page.get_by_role("link", name="Next page").click()
    await expect(page.get_by_role("link", name=job_id)).to_be_visible()
    assert "cursor=" in page.url and "everyone=true" in page.url
    await expect(page.get_by_role("link", name="Next page")).to_have_count(0)
    await page.get_by_role("link", name="First page").click()
    await expect(page.get_by_role("link", name=newer)).to_be_visible()
    # The queue filter goes to the API too.
    async with page.expect_response(lambda r: "queue=nowhere" in r.url) as filtered:
        await page.goto(api_server.url + "/console/#/jobs?queue=nowhere")
    assert (await filtered.value).ok
    await expect(page.get_by_text("No jobs match")).to_be_visible()
    await page.goto(api_server.url + "/console/#/jobs?queue=default&state=succeeded")

    # The job's page: its facts, timeline, members, log; the stop button is off for an ended job.
    await page.get_by_role("link", name=job_id).click()
    await expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()
    await expect(page.get_by_label("Job log")).to_contain_text("hello from the console test")
    await expect(page.get_by_role("table", name="Members by attempt")).to_contain_text("succeeded")
    await expect(page.get_by_role("button", name="Stop job")).to_be_disabled()
    timeline = page.get_by_role("table", name="Timeline")
    steps = [
        s.strip() for s in await timeline.locator("tbody tr td:first-child").all_text_contents()
    ]
    # a job this short may end before the supervisor sees it running (starting → succeeded)
    assert steps[:3] == ["previewed", "committed", "admitted"], steps
    assert steps[-1] == "succeeded" and set(steps[3:-1]) <= {"running"}, steps
    events = json.loads(cli("job", "events", job_id, "--json").stdout)["events"]
    assert [e["stage"] for e in events] == steps  # the same history as the CLI's
    assert "admitted" in cli("job", "events", job_id).stdout
    # the CLI's list filters are the API's too
    assert job_id in cli("job", "ls", "--all", "--queue", "default", "--owner", "admin").stdout
    assert job_id not in cli("job", "ls", "--all", "--queue", "nowhere").stdout
    outputs = page.get_by_role("region", name="Artifacts").get_by_role("table", name="Output files")
    report = outputs.get_by_role("row").filter(has_text="report.txt")
    await expect(report).to_contain_text("3 B")  # "ok\n"
    await expect(report).to_contain_text("control plane")  # the local backend keeps them
    await expect(report.locator("code")).to_have_text("dc51b8c96c2d")  # sha256 of "ok\n", short
    await expect(page.get_by_role("region", name="Raw scalars")).to_contain_text("No series")
    await page.screenshot(path=screenshots / "04-job.png", full_page=True)
    assert not await accessibility_violations(page)

    # Plugins: every group, the published one under its purpose with where it executes.
    await page.get_by_role("link", name="Plugins").click()
    await expect(page.get_by_role("heading", name="Plugins", level=1)).to_be_visible()
    plugin = page.get_by_role("table", name="Plugins for evaluation").get_by_role("row").nth(1)
    await expect(plugin).to_contain_text("exact-match")
    await expect(plugin).to_contain_text("workload")
    await expect(plugin).to_contain_text("read-outputs")
    await expect(plugin).to_contain_text("enabled")
    await page.screenshot(path=screenshots / "05-plugins.png", full_page=True)
    assert not await accessibility_violations(page)
    await page.go_back()

    # A reload keeps the session (sessionStorage) and the route; signing out forgets the token.
    await page.reload()
    await expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_label("API token")).to_be_visible()
    assert await page.evaluate("sessionStorage.length") == 0
    assert re.search(r"#/login$", page.url)

    # The token never reaches the page's markup.
    assert api_server.token not in await page.content()
    for shot in ("01-refused", "02-fleet", "03-jobs", "04-job", "05-plugins"):
        assert (screenshots / f"{shot}.png").stat().st_size > 0


STEPS = 3000  # more than the 1,000 buckets a chart asks for: the first view is bucketed
JSONL = (
    'd="$TUNEPLANE_METRICS_DIR"; test -d "$d" || exit 3; '
    f"for i in $(seq 0 {STEPS - 1}); do "
    'printf \'{"step": %d, "metrics": {"train/loss": %d}}\\n\' $i $((100000 / (i + 10))); '
    'done > "$d/train.jsonl"; echo wrote'
)


@pytest.mark.slow
async def test_a_job_chart_zooms_with_a_bounded_query(
    node_cluster_factory: Factory, tmp_path: Path, page: Page, screenshots: Path
) -> None:
    cluster = await node_cluster_factory(1)
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, JSONL, profile="nodes/cpu:0.5")
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job["state"] == "succeeded", (job, cli("job", "logs", job_id).stdout)
    wait_for(
        lambda: [
            s for s in cluster.api("GET", f"/v1/jobs/{job_id}/metrics")["series"]
            if s["tag"] == "train/loss" and s["count"] == STEPS
        ],
        60,
        "every point of train/loss",
    )  # fmt: skip
    job_series = cluster.api("GET", f"/v1/jobs/{job_id}/metrics")["series"]

    await page.clock.install()  # the Fleet page's refresh timer runs on this clock
    await page.goto(cluster.servers.url + "/console/#/fleet")
    await page.get_by_label("API token").fill(cluster.servers.token)
    await page.get_by_label("API token").press("Enter")
    nodes = page.get_by_role("table", name=f"Nodes of pool {cluster.pool}")
    node = nodes.get_by_role("row").filter(has_text="connected")
    await expect(node).to_have_count(1)
    await expect(node.get_by_role("cell").last).not_to_have_text("—")  # a heartbeat time
    await page.screenshot(path=screenshots / "01-fleet-nodes.png", full_page=True)
    async with page.expect_response(lambda r: r.url.endswith("/v1/fleet")):
        await page.clock.fast_forward(16_000)  # the page refreshes itself every 15 s
    await expect(node).to_have_count(1)

    async with page.expect_response(lambda r: "/metrics/curve?" in r.url) as first:
        await page.goto(cluster.servers.url + f"/console/#/jobs/{job_id}")
    assert "points=1000" in (await first.value).url
    chart = page.get_by_role("img", name="Line chart of train/loss by step")
    await expect(chart).to_be_visible()
    await expect(chart.locator("canvas")).to_have_count(1)
    member = job["attempts"][0]["members"][0]
    members = page.get_by_role("table", name="Members by attempt")
    await expect(members).to_contain_text(member["node"])  # where it ran
    await page.screenshot(path=screenshots / "02-chart.png", full_page=True)
    assert not await accessibility_violations(page)

    # Drag over the middle of the plot: the chart asks for that step range only.
    over = chart.locator(".u-over")
    await over.scroll_into_view_if_needed()
    box = await over.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    async with page.expect_response(lambda r: "/metrics/curve?" in r.url) as zoomed:
        await page.mouse.move(box["x"] + box["width"] * 0.4, y)
        await page.mouse.down()
        await page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
        await page.mouse.up()
    response = await zoomed.value
    assert response.ok
    body = await response.json()
    assert 0 < body["start"] < body["end"] < STEPS - 1, body
    assert body["end"] - body["start"] < STEPS / 2
    assert body["width"] == 1  # a narrower range comes back at full resolution
    await page.screenshot(path=screenshots / "03-zoomed.png", full_page=True)
    figure = page.locator("figure.chart")
    await expect(figure).to_have_attribute("data-attempts", "1")  # one line per attempt
    await expect(figure.locator(".legend")).to_contain_text("attempt 1")

    # The raw scalar inspector: attempt, member, source and tag; the points as logged.
    inspector = page.get_by_role("region", name="Raw scalars")
    await inspector.get_by_label("Attempt").select_option("1")
    await inspector.get_by_label("Member").select_option("0")
    [source] = {s["source"] for s in job_series if s["tag"] == "train/loss"}
    await inspector.get_by_label("Source").select_option(source)
    await inspector.get_by_label("Tag").select_option("train/loss")
    await inspector.get_by_label("From step").fill("100")
    async with page.expect_response(lambda r: "/metrics/raw?" in r.url) as raw:
        await inspector.get_by_role("button", name="Show raw points").click()
    assert "limit=100" in (await raw.value).url  # a bounded page
    points = inspector.get_by_role("table", name=re.compile(r"^Raw points of train.loss"))
    first_row = points.locator("tbody tr").first.get_by_role("cell")
    await expect(first_row.nth(0)).to_have_text("100")
    await expect(first_row.nth(1)).to_have_text(str(100000 // 110))  # the value the job wrote
    await expect(points.locator("tbody tr")).to_have_count(100)
    await inspector.get_by_role("button", name="Next raw points").click()
    await expect(first_row.nth(0)).to_have_text("200")
    await page.screenshot(path=screenshots / "04-raw.png", full_page=True)
    assert not await accessibility_violations(page)


async def test_a_running_jobs_live_log_and_stop(
    api_server: Servers, cli: Cli, page: Page, screenshots: Path
) -> None:
    cli("new", "sleeper", "--method", "custom/custom")
    out = cli(
        "submit", "sleeper", "--profile", "cpu:1",
        "--set", "command=echo started; sleep 2; echo still here; sleep 600", "--yes",
    )  # fmt: skip
    job_id = job_id_in(out.stdout)
    cli.wait_state(job_id, {"running"})

    await page.goto(api_server.url + f"/console/#/jobs/{job_id}")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_role("button", name="Sign in").click()
    log = page.get_by_label("Job log")
    await expect(log).to_contain_text("started")
    await expect(log).to_contain_text("still here")  # 2 s later: usually through the open stream
    timeline = page.get_by_role("table", name="Timeline")
    await expect(timeline).to_contain_text("running")
    await page.screenshot(path=screenshots / "01-running.png", full_page=True)
    assert not await accessibility_violations(page)

    page.once("dialog", lambda d: d.accept())  # "Stop job …?"
    await page.get_by_role("button", name="Stop job").click()
    job = cli.wait_state(job_id, {"cancelled"}, timeout=60)
    assert job["attempts"][0]["members"][0]["state"] == "stopped"
    # No reload: the page draws itself again when the job has ended (its log stream closes).
    await expect(page.locator(".facts")).to_contain_text("cancelled", timeout=30_000)
    await expect(page.get_by_role("button", name="Stop job")).to_be_disabled()
    await expect(log).to_contain_text("still here")
    steps = await timeline.locator("tbody tr td:first-child").all_text_contents()
    assert steps[-2:] == ["stopping", "cancelled"], steps
    await expect(timeline).to_contain_text("stop requested by admin")
    await page.screenshot(path=screenshots / "02-stopped.png", full_page=True)


async def test_submit_dialog_previews_then_commits_that_preview(
    api_server: Servers, cli: Cli, page: Page, screenshots: Path, expected_statuses: set[int]
) -> None:
    expected_statuses.add(422)  # the bad profile below
    await page.goto(api_server.url + "/console/#/submit")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    await expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    await page.get_by_label("Method").select_option("custom/custom")
    await page.get_by_label("Experiment").fill("from-console")
    await page.get_by_label("Profile").fill("cpu:1")
    command = page.get_by_label("command (required)")
    await command.fill("echo submitted from the console")

    # A bad profile is refused at preview, with the API's reason; nothing is created.
    await page.get_by_label("Profile").fill("no-such-profile")
    await command.press("Enter")
    await expect(page.get_by_role("alert")).to_contain_text("Preview refused")
    await page.get_by_label("Profile").fill("cpu:1")
    await page.get_by_role("button", name="Preview").click()

    preview = page.get_by_role("region", name="Preview")
    await expect(preview).to_contain_text("sha256:")
    await expect(page.get_by_label("What will run")).to_contain_text("submitted from the console")
    listed = await page.request.get(api_server.url + "/v1/jobs", headers=api_server.headers)
    assert (await listed.json())["jobs"] == []
    await page.screenshot(path=screenshots / "01-preview.png", full_page=True)
    assert not await accessibility_violations(page)
    preview_id = (await preview.locator("dd").first.text_content()) or ""
    digest = (await preview.locator("dd code").text_content()) or ""
    facts = {
        ((await dt.text_content()) or ""): ((await dt.locator("+ dd").text_content()) or "")
        for dt in await preview.locator("dt").all()
    }
    assert facts["Fleet / pool"] == "fleet local, pool local", facts
    assert facts["Backend"] == "local" and facts["Queue"] == "default", facts
    assert facts["CPU request"] == "1 CPU in pool local (fleet local)", facts
    assert "GPU request" not in facts, facts  # a CPU job never says GPU
    assert facts["Runtime"].startswith("busybox ("), facts
    assert facts["Estimated wait"] == "none: it would start at once", facts

    # A double click commits once: the button is off after the first, and the triple is one job.
    await page.get_by_role("button", name="Confirm and submit").dblclick()
    await expect(page.get_by_role("heading", name=re.compile(r"^Job job-"))).to_be_visible()
    job_id = page.url.rsplit("/", 1)[-1]
    job = cli.wait_state(job_id, {"succeeded", "failed"})
    assert job["state"] == "succeeded", job
    assert "submitted from the console" in cli("job", "logs", job_id).stdout
    retry_key = await page.evaluate(f"sessionStorage.getItem('tuneplane.retry.{preview_id}')")
    assert retry_key

    # The same triple again (a retry after a lost answer) is the same job, not a second one.
    again = await page.request.post(
        api_server.url + "/v1/jobs",
        headers=api_server.headers,
        data={"preview_id": preview_id, "digest": digest, "retry_key": retry_key},
    )
    assert again.status == 200 and (await again.json())["job_id"] == job_id, await again.text()
    listed = await page.request.get(api_server.url + "/v1/jobs", headers=api_server.headers)
    assert [j["id"] for j in (await listed.json())["jobs"]] == [job_id]
    await page.screenshot(path=screenshots / "02-submitted.png", full_page=True)
