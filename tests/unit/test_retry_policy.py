"""The retry policy (experiment.toml's ``[retry]``, ``--retry N``) and the pure decision "retry
or end" over an attempt history (domain/retry.py; issue 22)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from domain.errors import InvalidInput
from domain.jobs import Attempt
from domain.lifecycle import AttemptState
from domain.retry import AttemptEnd, End, Retry, RetryPolicy, decide
from tests.unit.builders import a_spec, an_intent
from tests.unit.test_submission import CATALOG

pytestmark = pytest.mark.unit
T0 = datetime(2026, 12, 5, 14, 0, 0, tzinfo=UTC)


def ended(kind: str, minutes: int = 0, code: int | None = None, why: str = "") -> AttemptEnd:
    return AttemptEnd(kind, T0 + timedelta(minutes=minutes), code, why)


def test_no_retry_table_means_one_attempt() -> None:
    policy = RetryPolicy.parse({})
    assert policy.max_attempts == 1
    end = decide(policy, [ended("node-lost")])
    assert isinstance(end, End) and "last of its policy's 1 attempts" in end.why


def test_a_fenced_node_retries_after_a_doubling_capped_backoff() -> None:
    policy = RetryPolicy.parse({"max_attempts": 4, "backoff_seconds": 30,
                                "max_backoff_seconds": 90})  # fmt: skip
    history = [ended("node-lost", 0, why="node n3 fenced")]
    first = decide(policy, history)
    assert first == Retry(2, T0 + timedelta(seconds=30),
                          "attempt 1 node-lost (node n3 fenced); attempt 2 waits for backoff "
                          "until 14:00:30")  # fmt: skip
    history.append(ended("preempted", 10))
    second = decide(policy, history)
    assert isinstance(second, Retry) and second.attempt == 3
    assert second.not_before == T0 + timedelta(minutes=10, seconds=60)  # doubled
    history.append(ended("failed", 20, code=1))
    third = decide(policy, history)
    assert isinstance(third, Retry)
    assert third.not_before == T0 + timedelta(minutes=20, seconds=90)  # 120, capped at 90
    history.append(ended("failed", 30, code=1))
    assert decide(policy, history) == End(
        "attempt 4 failed: that was the last of its policy's 4 attempts"
    )


def test_a_users_stop_never_retries() -> None:
    policy = RetryPolicy.attempts(5)
    assert decide(policy, [ended("cancelled")]) == End(
        "attempt 1 cancelled: a stop by its user is never retried"
    )


def test_only_the_ends_and_exit_codes_the_policy_names_retry() -> None:
    policy = RetryPolicy.parse({"max_attempts": 3, "on": ["failed"], "exit_codes": [137]})
    assert isinstance(decide(policy, [ended("failed", code=137)]), Retry)
    assert decide(policy, [ended("failed", code=1)]) == End(
        "attempt 1 failed with exit code 1: retried only on 137"
    )
    assert decide(policy, [ended("node-lost")]) == End(
        "attempt 1 node-lost: the retry policy does not retry node-lost"
    )


def test_the_queue_caps_the_attempts() -> None:
    policy = RetryPolicy.attempts(10)
    history = [ended("preempted", 0), ended("preempted", 1)]
    assert isinstance(decide(policy, history, queue_cap=3), Retry)
    assert decide(policy, history, queue_cap=2) == End(
        "attempt 2 preempted: that was the last of its queue's 2 attempts"
    )


def test_a_long_history_never_overflows_the_backoff() -> None:
    policy = RetryPolicy.attempts(100)
    history = [ended("failed", i, code=1) for i in range(99)]
    got = decide(policy, history)
    assert isinstance(got, Retry)
    assert got.not_before == history[-1].ended_at + timedelta(seconds=600)


@pytest.mark.parametrize(
    ("table", "field", "words"),
    [
        ({"max_attempts": 0}, "retry.max_attempts", "not a whole number from 1 to 100"),
        ({"max_attempts": -3}, "retry.max_attempts", "not a whole number"),
        ({"max_attempts": 101}, "retry.max_attempts", "not a whole number"),
        ({"max_attempts": True}, "retry.max_attempts", "not a whole number"),
        ({"max_attempts": "4"}, "retry.max_attempts", "not a whole number"),
        ({"max_attempts": 2.5}, "retry.max_attempts", "not a whole number"),
        ({"on": []}, "retry.on", "not a list of ends"),
        ({"on": "failed"}, "retry.on", "not a list of ends"),
        ({"on": ["cancelled"]}, "retry.on", "a user's stop never retries"),
        ({"on": ["failed\x00"]}, "retry.on", "is not an end"),
        ({"on": [{"deeply": {"nested": []}}]}, "retry.on", "not a list of ends"),
        ({"exit_codes": [0]}, "retry.exit_codes", "not a whole number from 1 to 255"),
        ({"exit_codes": [256]}, "retry.exit_codes", "not a whole number"),
        ({"exit_codes": 1}, "retry.exit_codes", "not a list"),
        ({"on": ["node-lost"], "exit_codes": [1]}, "retry.exit_codes", "does not retry failed"),
        ({"backoff_seconds": -1}, "retry.backoff_seconds", "not a number of seconds"),
        ({"backoff_seconds": float("nan")}, "retry.backoff_seconds", "not a number of seconds"),
        ({"backoff_seconds": float("inf")}, "retry.backoff_seconds", "not a number of seconds"),
        ({"backoff_seconds": 60, "max_backoff_seconds": 10}, "retry.max_backoff_seconds",
         "is below backoff_seconds"),
        ({"max_atempts": 3}, "retry.max_atempts", "is not a retry setting"),
    ],
)  # fmt: skip
def test_a_bad_retry_table_is_refused_naming_the_key_and_the_fix(
    table: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        RetryPolicy.parse(table)
    assert caught.value.field == field
    assert words in caught.value.message
    assert caught.value.fix


def test_retry_n_is_checked_too() -> None:
    assert RetryPolicy.attempts(3).on == frozenset(
        {"node-lost", "preempted", "launch-failed", "failed"}
    )
    with pytest.raises(InvalidInput):
        RetryPolicy.attempts(0)


def test_an_unknown_end_or_an_empty_history_is_a_bug_not_a_decision() -> None:
    with pytest.raises(ValueError, match="not 'lost'"):
        AttemptEnd("lost", T0)
    with pytest.raises(ValueError, match="no attempt"):
        decide(RetryPolicy(), [])


def test_a_policy_round_trips_is_capped_and_said_in_words() -> None:
    policy = RetryPolicy.parse({"max_attempts": 4, "on": ["failed", "node-lost"],
                                "exit_codes": [137, 1], "backoff_seconds": 5})  # fmt: skip
    assert RetryPolicy.parse(policy.to_dict()) == policy
    assert policy.to_dict()["exit_codes"] == [1, 137] and policy.to_dict()["on"] == [
        "failed",
        "node-lost",
    ]
    assert policy.capped(None) is policy and policy.capped(9) is policy
    assert policy.capped(2).max_attempts == 2 and policy.capped(0).max_attempts == 1
    assert policy.words() == (
        "4 attempts, a new one after node-lost, failed with exit code 1, 137; backoff 5 s "
        "doubling to 600 s"
    )
    assert RetryPolicy().words() == "no retry (1 attempt)"


def test_the_preview_digest_of_a_submission_without_retry_is_what_it_was() -> None:
    from domain.submission import SubmissionIntent

    plain = SubmissionIntent("e", "custom/custom", ("cpu:1",), {"command": "x"})
    assert "retry" not in plain.to_dict() and "retry" not in a_spec().to_dict()
    asked = replace(plain, retry=RetryPolicy.attempts(3))
    assert SubmissionIntent.from_dict(asked.to_dict()) == asked
    spec = a_spec(retry=RetryPolicy.attempts(3))
    assert type(spec).from_dict(spec.to_dict()) == spec


def test_resolving_caps_the_policy_by_the_queue() -> None:
    from domain.submission import resolve

    intent = an_intent(retry=RetryPolicy.attempts(5))
    spec = a_spec()
    args = (CATALOG, spec.runtime, spec.roles, "local", "default")
    assert resolve(intent, *args).retry.max_attempts == 5
    assert resolve(intent, *args, max_attempts=2).retry.max_attempts == 2
    assert resolve(an_intent(), *args, max_attempts=2).retry.max_attempts == 1


def _attempt(n: int, state: AttemptState, cause: str = "", minutes: int = 0) -> Attempt:
    at = T0 + timedelta(minutes=minutes)
    return Attempt(f"att-{n}", "job-1", n, state, at, at, "member 0 exited with code 1", 1, cause)


def test_an_attempt_knows_how_it_ended_and_keeps_its_first_cause() -> None:
    running = _attempt(1, AttemptState.RUNNING)
    assert running.end == "" and _attempt(1, AttemptState.SUCCEEDED).end == ""
    lost = running.caused("node-lost", T0)
    assert lost.caused("preempted", T0) is lost  # the first cause found is the cause
    assert lost.moved(AttemptState.FAILED, T0, "x", cause="launch-failed").end == "node-lost"
    assert running.moved(AttemptState.FAILED, T0, "x").end == "failed"
    stopping = running.moved(AttemptState.STOPPING, T0)
    assert stopping.moved(AttemptState.CANCELLED, T0).end == "cancelled"


def test_retried_puts_the_job_back_to_pending_or_lets_it_end() -> None:
    from domain.jobs import Job
    from domain.lifecycle import JobState
    from domain.progress import retried

    policy = RetryPolicy.parse({"max_attempts": 2, "backoff_seconds": 60})
    job = Job("job-1", "pv-1", "alice", a_spec(retry=policy), JobState.RUNNING, T0, T0)
    ended = job.moved(JobState.FAILED, T0, "member 0 exited with code 1", 1)
    first = _attempt(1, AttemptState.FAILED)
    again = retried(job, ended, [first], T0)
    assert again.state is JobState.PENDING and again.not_before == T0 + timedelta(seconds=60)
    assert again.moved(JobState.STARTING, T0).not_before is None  # admitted: no longer waits
    last = retried(job, ended, [first, _attempt(2, AttemptState.FAILED, minutes=5)], T0)
    assert last.state is JobState.FAILED and "last of its policy's 2 attempts" in last.reason
    requeued = _attempt(2, AttemptState.FAILED, "requeued")  # not counted
    assert retried(job, ended, [first, requeued], T0).state is JobState.PENDING
    stopping = job.moved(JobState.STOPPING, T0)
    assert retried(stopping, ended, [first], T0) is ended  # a stop never retries
    plain = Job("job-2", "pv-2", "alice", a_spec(), JobState.RUNNING, T0, T0)
    assert retried(plain, ended, [first], T0) is ended  # no policy: the job's own reason
