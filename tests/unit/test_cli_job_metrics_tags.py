"""Which metrics `tp job metrics` asks curves for: a curve is member 0's series, so `--all`
lists member 0's tags only (a tag that only member 1 had reported yet made the command exit 3
with "has no metric" although the summary listed it)."""

from __future__ import annotations

from typing import Any

import pytest

from entrypoints.cli.job_metrics import chosen_tags

pytestmark = pytest.mark.unit


def series(member: int, tag: str, source: str = "events.out.tfevents.1") -> dict[str, Any]:
    return {"member": member, "tag": tag, "source": source, "attempt": 1}


SUMMARY = {
    "canonical": ["train/loss"],
    "system": ["sys/cpu/percent"],
    "series": [
        series(0, "train/loss"),
        series(0, "eval/acc"),
        series(1, "train/accuracy"),  # member 1 only, so far
        series(0, "sys/cpu/percent", source="system#0"),
    ],
}


def test_all_is_every_training_tag_of_member_0_then_the_system_group() -> None:
    assert chosen_tags(SUMMARY, all_tags=True) == ["eval/acc", "train/loss", "sys/cpu/percent"]


def test_without_all_the_canonical_tags_then_the_system_group() -> None:
    assert chosen_tags(SUMMARY, all_tags=False) == ["train/loss", "sys/cpu/percent"]
