"""Care across every page of the console, in headless Chromium against one real `tp serve`
shared by the module: each page (sign-in, Fleet, Jobs, a job, Plugins, Submit with a preview)
at 1280 px in the light scheme and at a tablet's 820x1180 in the dark one, with no page-level
horizontal scroll (wide tables scroll in their own container) and axe-core's WCAG 2 A/AA rules
clean in both schemes; the keyboard-only path sign-in → Submit → preview → confirm → the job,
with a visible focus at each step; and no literal colour in the console's sources (every colour
is a variable of style.css, so the dark scheme reaches everything).
Screenshots are saved under test-artifacts/console/<test>/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.fixtures.browser import ROOT, accessibility_violations
from tests.fixtures.server import Servers

pytestmark = pytest.mark.e2e
SIZES = [("1280", 1280, 900, "light"), ("tablet", 820, 1180, "dark")]
# a hex colour, or a colour function of literal numbers (not one built from a variable's value)
LITERAL_COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}\b|\b(?:rgb|rgba|hsl|hsla)\(\s*[\d.]")
COMMENT = re.compile(r"^\s*(?://|/\*|\*)")


async def a_job(page: Page, server: Servers) -> str:
    """A finished job of the module's server, made through the API."""
    body = {"experiment": "care", "method": "custom/custom", "profile": "cpu:1",
            "params": {"command": "echo cared for"}}  # fmt: skip
    made = await page.request.post(server.url + "/v1/previews", data=body, headers=server.headers)
    preview = await made.json()
    triple = {"preview_id": preview["id"], "digest": preview["digest"], "retry_key": "care-" * 4}
    commit = await page.request.post(server.url + "/v1/jobs", data=triple, headers=server.headers)
    job_id: str = (await commit.json())["job_id"]
    return job_id


async def no_page_scroll(page: Page) -> None:
    """The page itself never scrolls sideways: what is wider scrolls in its own container."""
    wide = await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    if wide > 0:  # name the widest elements, for the fix
        culprits = await page.evaluate(
            "Array.from(document.querySelectorAll('main *')).filter(e => e.getBoundingClientRect()"
            ".right > innerWidth).slice(0, 4).map(e => e.tagName + '.' + e.className + ' '"
            " + Math.round(e.getBoundingClientRect().right) + ' ' +"
            " (e.getAttribute('aria-label') || e.textContent.slice(0, 40)))"
        )
        raise AssertionError(f"{page.url}: the page scrolls {wide} px sideways: {culprits}")


async def test_every_page_fits_1280_and_a_tablet_in_light_and_dark_with_axe_clean(
    module_api_server: Servers, page: Page, screenshots: Path
) -> None:
    server = module_api_server
    job_id = await a_job(page, server)
    backgrounds: dict[str, str] = {}
    for label, width, height, scheme in SIZES:
        await page.set_viewport_size({"width": width, "height": height})
        await page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        await page.goto(server.url + "/console/#/fleet")
        await page.evaluate("sessionStorage.clear()")
        await page.reload()
        await expect(page.get_by_label("API token")).to_be_focused()
        followed = await page.evaluate(f"matchMedia('(prefers-color-scheme: {scheme})').matches")
        assert followed, scheme
        backgrounds[scheme] = await page.evaluate(
            "getComputedStyle(document.documentElement).backgroundColor"
        )
        await no_page_scroll(page)
        await page.screenshot(path=screenshots / f"{label}-{scheme}-sign-in.png", full_page=True)
        violations = await accessibility_violations(page)
        assert not violations, (label, scheme, "sign-in", violations)
        await page.get_by_label("API token").fill(server.token)
        await page.get_by_label("API token").press("Enter")
        pages = [
            ("fleet", "#/fleet", page.get_by_role("heading", name="Fleet", level=1)),
            ("jobs", "#/jobs", page.get_by_role("link", name=job_id)),
            ("job", f"#/jobs/{job_id}", page.get_by_label("Job log")),
            ("plugins", "#/plugins", page.get_by_role("heading", name="Plugins", level=1)),
            ("submit", "#/submit", page.get_by_role("button", name="Preview")),
        ]
        for name, route, ready in pages:
            await page.goto(f"{server.url}/console/{route}")
            await expect(ready).to_be_visible()
            if name == "job":
                await expect(page.get_by_label("Job log")).to_contain_text("cared for")
            if name == "submit":
                await page.get_by_label("Method").select_option("custom/custom")
                await page.get_by_label("command (required)").fill("echo preview")
                await page.get_by_role("button", name="Preview").click()
                await expect(page.locator("#preview-summary")).to_contain_text("1 CPU in pool")
                await page.get_by_text("The spec as JSON").click()
            await no_page_scroll(page)
            await page.screenshot(path=screenshots / f"{label}-{scheme}-{name}.png", full_page=True)
            violations = await accessibility_violations(page)
            assert not violations, (label, scheme, name, violations)
    assert backgrounds["light"] != backgrounds["dark"], backgrounds  # the scheme is followed


async def focus_shows(page: Page) -> None:
    """The focused element draws a visible outline (style.css's :focus-visible)."""
    outline = await page.evaluate(
        "(() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, s.outlineWidth]; })()"
    )
    assert outline[0] != "none" and outline[1] != "0px", outline


async def tab_to(page: Page, name: str, limit: int = 60) -> None:
    """Press Tab until the focused element's accessible text is ``name``."""
    for _ in range(limit):
        await page.keyboard.press("Tab")
        text = await page.evaluate(
            "(() => { const e = document.activeElement; return (e.getAttribute('aria-label')"
            " || e.labels?.[0]?.textContent || e.textContent || '').trim(); })()"
        )
        if text == name:
            await focus_shows(page)
            return
    raise AssertionError(f"{name!r} is not reachable with Tab")


async def test_keyboard_only_from_sign_in_to_submit_to_the_job(
    module_api_server: Servers, page: Page, screenshots: Path
) -> None:
    server = module_api_server
    await page.goto(server.url + "/console/")
    await expect(page.get_by_label("API token")).to_be_focused()
    await page.keyboard.type(server.token)
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Fleet", level=1)).to_be_visible()

    # The skip link comes first and moves to the content; the menu follows.
    await page.evaluate("document.activeElement.blur()")  # Tab starts again from the top
    await tab_to(page, "Skip to content")
    await expect(page.get_by_role("link", name="Skip to content")).to_be_visible()
    await tab_to(page, "Submit")
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Submit a job")).to_be_visible()
    await expect(page.locator("main")).to_be_focused()

    await tab_to(page, "Method")
    await page.keyboard.type("custom/custom")  # a select takes typed text
    await tab_to(page, "command (required)")
    await page.keyboard.type("echo by keyboard")
    await page.keyboard.press("Enter")  # submits the form: Preview
    await expect(page.locator("#preview-summary")).to_contain_text("1 CPU in pool local")
    await expect(page.get_by_role("button", name="Confirm and submit")).to_be_focused()
    await focus_shows(page)
    await page.screenshot(path=screenshots / "01-preview.png", full_page=True)
    await page.keyboard.press("Shift+Tab")
    await expect(page.get_by_text("The spec as JSON")).to_be_focused()
    await page.keyboard.press("Space")
    await expect(page.get_by_label("What will run")).to_be_visible()
    await page.keyboard.press("Escape")
    await expect(page.get_by_label("What will run")).to_be_hidden()
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Confirm and submit")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name=re.compile(r"^Job job-"))).to_be_visible()
    await expect(page.get_by_label("Job log")).to_contain_text("by keyboard")
    await page.screenshot(path=screenshots / "02-job.png", full_page=True)


def test_no_literal_colour_in_the_console_sources() -> None:
    """Every colour is a CSS variable (style.css's theme, charts.css's line palette), defined
    once for light and once for dark."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "console" / "src").rglob("*")):
        if path.suffix not in (".ts", ".css") or path.name == "api-schema.d.ts":
            continue
        name = str(path.relative_to(ROOT))
        for number, line in enumerate(path.read_text().splitlines(), 1):
            defines = path.suffix == ".css" and line.strip().startswith("--")
            if LITERAL_COLOUR.search(line) and not defines and not COMMENT.match(line):
                found.setdefault(name, []).append(f"{name}:{number}: {line.strip()}")
    new = [line for lines in found.values() for line in lines]
    assert not new, "literal colours (use style.css's variables):\n" + "\n".join(new)
