"""The text sparkline of `tp job metrics` and the runs of a source (pure domain code)."""

from __future__ import annotations

import math

import pytest

from domain.telemetry import run_of, sparkline

pytestmark = pytest.mark.unit


def test_a_sparkline_uses_the_width_asked_for_and_keeps_a_spike() -> None:
    peaks = [1.0] * 1000
    peaks[517] = 50.0  # one bucket's max: a spike between the characters' other values
    line = sparkline(peaks, 40)
    assert len(line) == 40
    assert line.count("█") == 1 and set(line) == {"▁", "█"}
    assert len(sparkline(peaks, 7)) == 7 and "█" in sparkline(peaks, 7)


def test_a_sparkline_of_fewer_values_than_its_width_draws_one_each() -> None:
    assert sparkline([1.0, 2.0, 3.0], 24) == "▁▅█"
    assert sparkline([2.0, 2.0], 24) == "▄▄"
    assert sparkline([], 24) == "" and sparkline([1.0], 0) == ""


def test_a_sparkline_skips_values_that_are_not_finite() -> None:
    assert sparkline([1.0, math.nan, math.inf, 3.0, -math.inf], 10) == "▁█"


@pytest.mark.parametrize(
    ("source", "run"),
    [
        ("events.out.tfevents.1#0", ""),
        ("loss_train/events.out.tfevents.1#0", "loss_train"),
        ("rank0/a/train.jsonl#2", "rank0/a"),
        ("system#0", ""),
        ("odd#name.jsonl#1", ""),
    ],
)
def test_the_run_of_a_source_is_its_directory(source: str, run: str) -> None:
    assert run_of(source) == run
