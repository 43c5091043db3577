"""A member whose workload is gone while TunePlane stops it ends with the same reason on every
backend (docs/backends.md, outcome table): a stop removes a Kubernetes workload, so its members
are seen `missing`, where a container engine shows them `exited`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.jobs import Member
from domain.lifecycle import MemberState
from domain.ports import Observation
from domain.progress import member_after

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def running() -> Member:
    return Member("m", "a", 1, MemberState.RUNNING, NOW, handle="h")


def test_missing_while_stopping_on_request_says_so() -> None:
    after = member_after(running(), Observation("missing"), True, None, NOW)
    assert (after.state, after.reason) == (MemberState.STOPPED, "stopped on request")
    exited = member_after(running(), Observation("exited", 143), True, None, NOW)
    assert exited.reason == after.reason  # the same words as a member seen exiting


def test_missing_while_the_gang_is_stopped_after_a_failure_names_the_failure() -> None:
    after = member_after(running(), Observation("missing"), False, "member 0 failed", NOW)
    assert (after.state, after.reason) == (MemberState.FAILED, "stopped: member 0 failed")


def test_missing_on_its_own_keeps_the_backends_reason_or_the_default() -> None:
    gone = member_after(running(), Observation("missing"), False, None, NOW)
    assert (gone.state, gone.reason) == (
        MemberState.FAILED,
        "cancelled outside TunePlane: its container disappeared from the engine",
    )
    said = member_after(
        running(), Observation("missing", None, "its Job was deleted"), False, None, NOW
    )
    assert said.reason == "its Job was deleted"


@pytest.mark.parametrize(
    "code, words",
    [(3, "exited with code 3"), (143, "killed by SIGTERM"), (137, "killed by SIGKILL"),
     (200, "exited with code 200"), (128, "exited with code 128")],
)  # fmt: skip
def test_an_exit_without_a_reason_reads_the_same_everywhere(code: int, words: str) -> None:
    """Kubernetes reports a container killed by SIGTERM as exit 143 and no reason; Docker's
    adapter says "killed by SIGTERM": the default words now say it for every backend."""
    after = member_after(running(), Observation("exited", code), False, None, NOW)
    assert (after.state, after.exit_code, after.reason) == (MemberState.FAILED, code, words)
