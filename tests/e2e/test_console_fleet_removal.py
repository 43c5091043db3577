"""Removing nodes and pools from the console's Fleet page, in headless Chromium against a real
`tp serve`: each after a confirmation that says what goes with it, the API's refusal shown with
its fix (a pool a profile alone names), and a pool's button only once it has no nodes (members
get no buttons: test_console_ops.py). Screenshots are saved under test-artifacts/console/<test>/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Dialog, Page, expect

from tests.e2e.test_walkthrough import Cli
from tests.fixtures.browser import accessibility_violations
from tests.fixtures.server import Servers

pytestmark = pytest.mark.e2e


async def test_an_operator_removes_a_node_then_its_pool_once_no_profile_needs_it(
    api_server: Servers, cli: Cli, page: Page, screenshots: Path, expected_statuses: set[int]
) -> None:
    expected_statuses.add(409)
    cli("fleet", "pool", "add", "spare", "--backend", "node", "--cpus", "8", "--memory-mb", "1024",
        "--gpus", "8", "--gpu-model", "h100")  # fmt: skip
    cli("fleet", "node", "add", "s-0", "--pool", "spare")
    as_admin = {"Authorization": f"Bearer {api_server.token}"}
    answer = await page.request.post(
        api_server.url + "/v1/profiles",
        headers=as_admin,
        data={"name": "big", "request": "h100:8"},  # only pool spare has H100s
    )
    assert answer.ok, await answer.text()
    await page.goto(api_server.url + "/console/#/fleet")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    spare = page.get_by_role("region", name="Pool spare (fleet default)", exact=True)
    await expect(spare.get_by_role("cell", name="s-0", exact=True)).to_be_visible()
    await expect(page.get_by_role("button", name="Remove pool spare")).to_have_count(0)

    asked: list[str] = []

    async def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    page.once("dialog", lambda d: d.dismiss())  # declining changes nothing
    await page.get_by_role("button", name="Remove node s-0").click()
    await expect(spare.get_by_role("cell", name="s-0", exact=True)).to_be_visible()
    page.once("dialog", accept)
    await page.get_by_role("button", name="Remove node s-0").click()
    await expect(page.get_by_role("status")).to_have_text("Node s-0 removed.")
    assert asked == [
        "Remove node s-0? Then its credentials go with it; a daemon must enroll again."
    ]
    await expect(spare).to_contain_text("No nodes")
    assert "s-0" not in cli("fleet", "ls").stdout

    # The pool's button now; the API refuses while profile big names no other pool.
    page.once("dialog", accept)
    await page.get_by_role("button", name="Remove pool spare").click()
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("Remove pool spare refused:")
    await expect(alert).to_contain_text("profile big would name no pool without pool spare")
    await expect(alert).to_contain_text("Fix:")
    await page.screenshot(path=screenshots / "01-refused.png", full_page=True)
    assert not await accessibility_violations(page)
    assert "spare" in cli("fleet", "ls").stdout  # nothing changed

    answer = await page.request.post(
        api_server.url + "/v1/profiles", headers=as_admin, data={"name": "big", "request": "cpu:1"}
    )
    assert answer.ok, await answer.text()
    page.once("dialog", accept)
    await page.get_by_role("button", name="Remove pool spare").click()
    await expect(page.get_by_role("status")).to_have_text("Pool spare removed.")
    assert asked[-1] == "Remove pool spare? Then its checks and join tokens go with it."
    await expect(spare).to_have_count(0)
    assert "spare" not in cli("fleet", "ls").stdout
    await page.screenshot(path=screenshots / "02-removed.png", full_page=True)
    assert not await accessibility_violations(page)
