"""The checkpoint contract's pure rules (domain/checkpoints.py): names, the COMPLETE marker,
the order of checkpoints and which are kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import (
    Checkpoint,
    check_name,
    kept,
    marker_step,
    newest_first,
    outranked,
    step_from_name,
)
from domain.errors import InvalidInput

pytestmark = pytest.mark.unit
T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def cp(attempt: int, name: str, step: int | None, minutes: int = 0) -> Checkpoint:
    files = Manifest.of([ArtifactFile(f"{name}/weights.bin", 10, "ab" * 32)])
    return Checkpoint("job-1", attempt, name, step, files, T0 + timedelta(minutes=minutes))


@pytest.mark.parametrize("name", ["checkpoint-1200", "step_5", "a", "v1.2+run=3@x"])
def test_a_plain_segment_is_a_name(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "-x", ".hidden", "a\0b", "é", "x" * 129, " a"]
)
def test_anything_else_is_refused_with_the_fix(name: str) -> None:
    with pytest.raises(InvalidInput, match="not one plain path segment") as err:
        check_name(name)
    assert err.value.fix and "checkpoint-1200" in err.value.fix


@pytest.mark.parametrize(
    ("text", "step"),
    [("1200", 1200), (" 1200\n", 1200), ("", None), ("step 3", None), ("-4", None),
     ("1" * 19, None), ("12.5", None)],
)  # fmt: skip
def test_the_marker_names_a_step_or_none(text: str, step: int | None) -> None:
    assert marker_step(text) == step


def test_a_step_from_a_trainers_name() -> None:
    assert step_from_name("checkpoint-1200") == 1200
    assert step_from_name("run2-step-50") == 50
    assert step_from_name("final") is None


def test_newest_first_is_by_attempt_then_step_then_time() -> None:
    a1_100, a1_200 = cp(1, "c-100", 100), cp(1, "c-200", 200)
    a2_50 = cp(2, "c-50", 50, minutes=9)  # attempt 2 started again from scratch: still newest
    a1_last = cp(1, "final", None, minutes=1)  # no step: its attempt's last
    assert newest_first([a1_100, a2_50, a1_200, a1_last]) == [a2_50, a1_last, a1_200, a1_100]
    keep, drop = kept([a1_100, a2_50, a1_200, a1_last])
    assert (keep, drop) == ([a2_50, a1_last], [a1_200, a1_100])
    assert kept([], 2) == ([], [])
    with pytest.raises(ValueError):
        kept([a1_100], 0)


def test_a_checkpoint_that_would_be_collected_at_once_is_outranked() -> None:
    """Recorded now, it would be among the newest ``keep`` unless as many recorded ones are
    newer (``newest_first``): then harvesting it would hash files only to drop them."""
    recorded = [cp(1, "checkpoint-300", 300), cp(1, "checkpoint-400", 400)]
    assert outranked(recorded, 1, 200)
    assert not outranked(recorded, 1, 300)  # the same step, recorded later: newer
    assert not outranked(recorded, 1, 500) and not outranked(recorded, 1, None)  # no step: last
    assert not outranked(recorded, 2, 1)  # a later attempt is newer whatever its step
    assert not outranked(recorded[:1], 1, 100)  # fewer than keep recorded: kept
    assert outranked(recorded, 1, 350, keep=1) and not outranked(recorded, 1, 450, keep=1)
