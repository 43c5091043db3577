"""The retry policy (experiment.toml's ``[retry]``, ``--retry N``) and the pure decision "retry
or end" over an attempt history (domain/retry.py; issue 22)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from domain.errors import InvalidInput
from domain.retry import AttemptEnd, End, Retry, RetryPolicy, decide

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
