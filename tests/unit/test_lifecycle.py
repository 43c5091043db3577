"""The Job / Attempt / Member state machines: every edge in the tables, nothing else."""

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import IllegalTransition
from domain.jobs import Member, attempt_outcome
from domain.lifecycle import (
    ATTEMPT_TRANSITIONS,
    JOB_FINAL,
    JOB_TRANSITIONS,
    MEMBER_TRANSITIONS,
    JobState,
    MemberState,
    check_transition,
)
from tests.unit.builders import a_job

pytestmark = pytest.mark.unit
NOW = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.mark.parametrize("table", [JOB_TRANSITIONS, ATTEMPT_TRANSITIONS, MEMBER_TRANSITIONS])
def test_every_state_has_a_row_and_finals_are_reachable(table: dict) -> None:  # type: ignore[type-arg]
    states = set(table)
    assert all(targets <= states for targets in table.values())
    reachable = set().union(*table.values())
    finals = {s for s, t in table.items() if not t}
    assert finals and finals <= reachable


@pytest.mark.parametrize("table", [JOB_TRANSITIONS, ATTEMPT_TRANSITIONS, MEMBER_TRANSITIONS])
def test_exactly_the_listed_edges_are_legal(table: dict) -> None:  # type: ignore[type-arg]
    for current in table:
        for target in table:
            if target in table[current]:
                assert check_transition(table, current, target, "x") is target
            else:
                with pytest.raises(IllegalTransition) as err:
                    check_transition(table, current, target, "x")
                assert str(current) in err.value.message and err.value.fix


def test_job_moves_and_keeps_its_history_fields() -> None:
    job = a_job()
    started = job.moved(JobState.STARTING, NOW)
    done = started.moved(JobState.RUNNING, NOW).moved(JobState.FAILED, NOW, "boom", exit_code=3)
    assert (done.state, done.reason, done.exit_code, done.updated_at) == ("failed", "boom", 3, NOW)
    assert job.state is JobState.PENDING  # immutable: the original is untouched


def test_final_job_cannot_move() -> None:
    job = a_job().moved(JobState.CANCELLED, NOW)
    for target in JobState:
        with pytest.raises(IllegalTransition):
            job.moved(target, NOW)


def test_lost_contact_is_not_a_stop() -> None:
    m = Member("m", "a", 0, MemberState.RUNNING, NOW, handle="h")
    unknown = m.moved(MemberState.UNKNOWN, NOW)
    assert unknown.moved(MemberState.RUNNING, NOW).state is MemberState.RUNNING


def test_a_reason_belongs_to_its_state() -> None:
    m = Member("m", "a", 0, MemberState.RUNNING, NOW, handle="h")
    away = m.moved(MemberState.UNKNOWN, NOW, "node n1 is disconnected")
    assert away.moved(MemberState.RUNNING, NOW).reason == ""
    job = a_job().moved(JobState.STARTING, NOW, "admitted").moved(JobState.RUNNING, NOW)
    assert job.reason == ""
    assert job.moved(JobState.FAILED, NOW, "boom").reason == "boom"


def _member(i: int, state: MemberState, code: int | None = None, reason: str = "") -> Member:
    return Member(f"m{i}", "a", i, state, NOW, exit_code=code, reason=reason)


def test_attempt_outcome() -> None:
    ok = [_member(0, MemberState.SUCCEEDED, 0), _member(1, MemberState.SUCCEEDED, 0)]
    assert attempt_outcome(ok) == ("succeeded", "", 0)
    failed = [
        _member(0, MemberState.SUCCEEDED, 0),
        _member(2, MemberState.FAILED, 7, "oom"),
        _member(1, MemberState.FAILED, 3, "x"),
    ]
    assert attempt_outcome(failed) == ("failed", "x", 3)
    stopped = [_member(0, MemberState.STOPPED, 137), _member(1, MemberState.FAILED, 1)]
    assert attempt_outcome(stopped)[0] == "cancelled"


@given(st.lists(st.sampled_from(list(JobState)), max_size=12))
def test_random_walks_only_follow_edges(targets: list[JobState]) -> None:
    job = a_job()
    for target in targets:
        legal = target in JOB_TRANSITIONS[job.state]
        try:
            job = job.moved(target, NOW)
            assert legal
        except IllegalTransition:
            assert not legal
    if job.state in JOB_FINAL:
        assert not JOB_TRANSITIONS[job.state]
