"""A member's reason belongs to its state (issue 19, item 3): whatever the backend reports next,
a member never keeps what an earlier state said ("Slurm does not answer", "node n1 is
disconnected"), and one that stays in its state shows the backend's current reason for it
(item 4: a pending Slurm job's own reason)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.jobs import Member
from domain.lifecycle import MEMBER_FINAL, MemberState
from domain.ports import Observation
from domain.progress import member_after

pytestmark = pytest.mark.unit
NOW = datetime(2026, 12, 4, tzinfo=UTC)
DOWN = "Slurm does not answer: slurmrestd at unix:/x cannot be reached; jobs stay queued"


def starting() -> Member:
    return Member("m", "a", 1, MemberState.STARTING, NOW, handle="7:1:a")


def test_a_slurm_member_back_from_unknown_says_what_its_state_is() -> None:
    m = member_after(
        starting(),
        Observation("starting", reason="Slurm job 7 pending: Priority"),
        False,
        None,
        NOW,
    )
    assert (m.state, m.reason) == ("starting", "Slurm job 7 pending: Priority")
    m = member_after(
        m, Observation("starting", reason="Slurm job 7 pending: Resources"), False, None, NOW
    )
    assert (m.state, m.reason) == ("starting", "Slurm job 7 pending: Resources")
    m = member_after(m, Observation("unknown", reason=DOWN), False, None, NOW)
    assert (m.state, m.reason) == ("unknown", DOWN)
    m = member_after(
        m, Observation("starting", reason="Slurm job 7 pending: Resources"), False, None, NOW
    )
    assert (m.state, m.reason) == ("starting", "Slurm job 7 pending: Resources")  # was: unknown
    m = member_after(m, Observation("running"), False, None, NOW)
    assert (m.state, m.reason) == ("running", "")
    m = member_after(m, Observation("unknown", reason=DOWN), False, None, NOW)
    m = member_after(m, Observation("running"), False, None, NOW)
    assert (m.state, m.reason) == ("running", "")
    m = member_after(m, Observation("exited", exit_code=0), False, None, NOW)
    assert (m.state, m.reason) == ("succeeded", "")


def test_an_unchanged_reason_changes_nothing() -> None:
    m = member_after(starting(), Observation("starting", reason="pending"), False, None, NOW)
    assert member_after(m, Observation("starting", reason="pending"), False, None, NOW) is m


OBSERVED = st.lists(
    st.tuples(
        st.sampled_from(["starting", "running", "unknown", "exited"]),
        st.sampled_from(["", "why a", "why b"]),
    ),
    max_size=12,
)


@given(OBSERVED)
def test_every_reason_is_the_latest_observations(observed: list[tuple[str, str]]) -> None:
    m = starting()
    for status, reason in observed:
        if status == "starting" and m.state is MemberState.RUNNING:
            continue  # a running member is not reported starting again
        obs = Observation(status, exit_code=1 if status == "exited" else None, reason=reason)  # type: ignore[arg-type]
        m = member_after(m, obs, False, None, NOW)
        if m.state in MEMBER_FINAL:
            assert m.reason == (reason or "exited with code 1")
            return
        expected = reason or ("control contact lost" if status == "unknown" else "")
        assert (m.state, m.reason) == (status, expected)


def test_an_end_tuneplane_asked_for_is_never_called_an_outside_end() -> None:
    """Issue 19, item 6: a backend may report TunePlane's own stop as it reports an outside
    one (a deleted Kubernetes Job, `docker stop`); a stop asked, or a gang stopped after a
    failure, is recorded as such."""
    running = starting().moved(MemberState.RUNNING, NOW)
    gone = Observation("missing", reason="cancelled outside TunePlane: its Job was deleted")
    killed = Observation("exited", 143, "cancelled outside TunePlane: docker stop (SIGTERM)")
    for obs in (gone, killed):
        stopped = member_after(running, obs, True, None, NOW)
        assert (stopped.state, stopped.reason) == ("stopped", "stopped on request")
        failed = member_after(running, obs, False, "member 0 failed", NOW)
        assert (failed.state, failed.reason) == ("failed", "stopped: member 0 failed")
        outside = member_after(running, obs, False, None, NOW)
        assert (outside.state, outside.reason) == ("failed", obs.reason)
    plain = member_after(running, Observation("missing"), False, None, NOW)
    assert plain.reason == "cancelled outside TunePlane: its container disappeared from the engine"
