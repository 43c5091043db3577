"""How long the console's chart takes to draw 20 runs × 1,000 buckets once the data is in hand
(goal: under 100 ms), against the same for 1 run, in one run (not part of the suite).

A real `tp serve` serves the built console; headless Chromium (Debian's) opens the compare view
of one job whose answers (`/v1/jobs/{id}`, `/metrics`, `/metrics/curve`) Playwright gives from
memory: the curve holds ``RUNS`` attempts of 1,000 buckets each (noisy values, min/max, a NaN
bucket per run). The chart times itself (console/src/charts/chart.ts): `performance.now()` when
a draw begins (the curve answer already parsed: the columns, smoothing, alignment of every run
onto one x axis) to uPlot's `draw` hook (the canvas drawn), in `data-draw-ms`. Each round moves
the smoothing slider (new smoothed values: `setData` on the plot), or switches the min/max
bands (a new plot: every series rebuilt); median and p95 of ``ROUNDS`` rounds of each, for
runs sharing one step grid (the runs of one job) and runs on 20 different grids (20 jobs of
different lengths: 20,000 x values after alignment).

Run: ``.venv/bin/pytest tests/bench/bench_console_render.py -m bench -s`` (``BENCH_ROUNDS``,
default 30). Prints one line per case and the ratios of 20 runs to 1.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
from typing import Any

import pytest
from playwright.async_api import Page, Route, expect

from tests.fixtures.server import Servers

pytestmark = pytest.mark.bench

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "30"))
BUCKETS = 1000


def curve(runs: int, shared_grid: bool) -> dict[str, Any]:
    rnd = random.Random(runs)
    attempts = []
    for r in range(runs):
        width = 10 if shared_grid else 10 + r  # different grids: no x value in common
        points = []
        for i in range(BUCKETS):
            step = i * width
            mean = 5 * math.exp(-i / 300) + rnd.random() * 0.3 + r * 0.1
            nan = i == 500
            wall = 1.7e9 + step
            points.append(
                {
                    "first_step": step,
                    "last_step": step + width - 1,
                    "min": None if nan else mean - 0.2,
                    "max": None if nan else mean + 0.2,
                    "mean": None if nan else mean,
                    "last": "NaN" if nan else mean,
                    "count": width,
                    "first_wall_time": wall,
                    "last_wall_time": wall + width - 1,
                }
            )
        attempts.append(
            {
                "attempt": r + 1,
                "member_id": f"m{r}",
                "source": "train.jsonl#0",
                "shown": [],
                "points": points,
                "run": "",
            }
        )
    return {"tag": "train/loss", "start": 0, "end": BUCKETS * 30, "width": 10,
            "attempts": attempts, "merged": []}  # fmt: skip


METRICS = {
    "canonical": ["train/loss"],
    "collectors": [],
    "primary": [],
    "runs": {"train/loss": [""]},
    "series": [],
    "system": [],
}


async def answer_from_memory(page: Page, body: dict[str, Any]) -> None:
    job = {"state": "succeeded", "id": "job-bench"}

    async def handle(route: Route) -> None:
        url = route.request.url
        data = body if "/metrics/curve" in url else METRICS if url.endswith("/metrics") else job
        await route.fulfill(status=200, content_type="application/json", body=json.dumps(data))

    await page.route("**/v1/jobs/job-bench**", handle)


async def rounds(page: Page, figure: Any, change: Any) -> list[float]:
    times = []
    for i in range(ROUNDS):
        before = int(await figure.get_attribute("data-draws") or 0)
        await change(i)
        await page.wait_for_function(
            f"() => Number(document.querySelector('figure.chart').dataset.draws) > {before}"
        )
        times.append(float(await figure.get_attribute("data-draw-ms") or "nan"))
    return times


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


async def test_render_20_runs_of_1000_buckets(api_server: Servers, page: Page) -> None:
    results: dict[tuple[int, bool, str], tuple[float, float]] = {}
    await page.goto(api_server.url + "/console/#/plugins")
    await page.get_by_label("API token").fill(api_server.token)
    await page.get_by_label("API token").press("Enter")
    await expect(page.get_by_role("heading", level=1)).not_to_have_text("Sign in to TunePlane")
    for shared in (True, False):
        for runs in (1, 20):
            await page.unroute("**/v1/jobs/job-bench**")
            await answer_from_memory(page, curve(runs, shared))
            await page.goto(api_server.url + "/console/#/compare?jobs=job-bench")
            await page.reload()  # a fresh page for each case (the token stays in the tab)
            figure = page.locator('figure.chart[data-tag="train/loss"]')
            await expect(figure).to_have_attribute("data-attempts", str(runs))
            bands = page.get_by_label("Min/max bands")

            async def smooth(i: int) -> None:
                await page.get_by_label("Smoothing").fill(f"{0.5 + (i % 40) / 100:.2f}")

            async def rebuild(i: int) -> None:
                await page.get_by_label("Min/max bands").set_checked(i % 2 == 1)

            results[(runs, shared, "setData")] = summary(await rounds(page, figure, smooth))
            await bands.set_checked(True)
            results[(runs, shared, "rebuild")] = summary(await rounds(page, figure, rebuild))
    for (runs, shared, how), (median, p95) in results.items():
        grid = "one step grid" if shared else "20 grids" if runs > 1 else "one grid"
        print(f"{runs:>2} run(s), {grid:<13} {how:<8} median {median:7.2f} ms  p95 {p95:7.2f} ms")
    for shared in (True, False):
        for how in ("setData", "rebuild"):
            ratio = results[(20, shared, how)][0] / results[(1, shared, how)][0]
            grids = "shared grid" if shared else "own grids"
            print(f"ratio 20 runs / 1 run ({grids}, {how}): {ratio:.1f}")
    assert all(v[0] == v[0] for v in results.values())  # every round drew
