"""Retry policies and the decision "retry or end" after an attempt ended.

Pure: the policy comes from the intent (``[retry]`` in experiment.toml, or ``--retry N``), capped
by the queue's ``max_attempts`` when the submission is resolved, and is part of the preview's
digest; the history comes from the job's attempts, the time from the caller. The supervisor (and
the gang coordinator, for a launch that failed) apply ``decide`` through
``domain.progress.retried`` in the transaction that records an attempt's end
(docs/lifecycles.md#retries).

How an attempt ended, as the backends classify it:

- ``node-lost``: its node was fenced (never a lost connection alone), or its engine restarted
  without it;
- ``preempted``: the backend's scheduler took it back (Kueue eviction, Slurm requeue);
- ``launch-failed``: a member could not be started;
- ``failed``: a member exited non-zero (``exit_code``);
- ``cancelled``: its user stopped it, which never retries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from domain.errors import InvalidInput

CANCELLED = "cancelled"
# an attempt whose launch was aborted for no fault of the job (a coordinator restart, a node
# busy for a while) and queued again: not one of the job's attempts for its retry policy
REQUEUED = "requeued"
NODE_LOST = "node-lost"
PREEMPTED = "preempted"
LAUNCH_FAILED = "launch-failed"
RETRYABLE = (NODE_LOST, PREEMPTED, LAUNCH_FAILED, "failed")
ENDS = (*RETRYABLE, CANCELLED)
MAX_ATTEMPTS = 100
MAX_BACKOFF_SECONDS = 24 * 3600
KEYS = ("max_attempts", "on", "exit_codes", "backoff_seconds", "max_backoff_seconds")


def _bad(key: str, problem: str, fix: str) -> InvalidInput:
    return InvalidInput(f"[retry] {key} {problem}", fix=fix, field=f"retry.{key}")


def _whole(value: object, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(key, f"is {value!r}, not a whole number from {low} to {high}",
                   f"write {key} = a whole number from {low} to {high}")  # fmt: skip
    return value


def _seconds(value: object, key: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_BACKOFF_SECONDS  # NaN fails this too
    ):
        raise _bad(key, f"is {value!r}, not a number of seconds from 0 to {MAX_BACKOFF_SECONDS}",
                   f"write {key} = seconds, e.g. 30")  # fmt: skip
    return float(value)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_attempts`` in all (1: no retry, the default); a new attempt after an end in ``on``
    (after ``failed`` only for ``exit_codes`` when some are listed), ``backoff_seconds`` after
    the end, doubling per attempt, at most ``max_backoff_seconds``."""

    max_attempts: int = 1
    on: frozenset[str] = field(default_factory=lambda: frozenset(RETRYABLE))
    exit_codes: frozenset[int] = frozenset()
    backoff_seconds: float = 30.0
    max_backoff_seconds: float = 600.0

    @classmethod
    def attempts(cls, n: int) -> RetryPolicy:
        """``tp submit --retry N``: N attempts in all, on every end but a user's stop."""
        return cls(max_attempts=_whole(n, "max_attempts", 1, MAX_ATTEMPTS))

    @classmethod
    def parse(cls, table: Mapping[str, object]) -> RetryPolicy:
        """The ``[retry]`` table of experiment.toml; InvalidInput naming the key and the fix."""
        unknown = sorted(set(table) - set(KEYS))
        if unknown:
            raise _bad(unknown[0], "is not a retry setting", f"use only {', '.join(KEYS)}")
        d = cls()
        attempts = _whole(table.get("max_attempts", d.max_attempts), "max_attempts", 1,
                          MAX_ATTEMPTS)  # fmt: skip
        on = table.get("on", sorted(RETRYABLE))
        if not isinstance(on, list) or not on or not all(isinstance(e, str) for e in on):
            raise _bad("on", f"is {on!r}, not a list of ends",
                       f"list some of {', '.join(RETRYABLE)}")  # fmt: skip
        for end in on:
            if end not in RETRYABLE:
                why = "a user's stop never retries" if end == CANCELLED else "is not an end"
                raise _bad("on", f"names {end!r}: {why}", f"list some of {', '.join(RETRYABLE)}")
        codes = table.get("exit_codes", [])
        if not isinstance(codes, list):
            raise _bad("exit_codes", f"is {codes!r}, not a list", "write exit_codes = [1, 137]")
        exit_codes = frozenset(_whole(c, "exit_codes", 1, 255) for c in codes)
        if exit_codes and "failed" not in on:
            raise _bad("exit_codes", "are listed but on does not retry failed",
                       'add "failed" to on, or drop exit_codes')  # fmt: skip
        backoff = _seconds(table.get("backoff_seconds", d.backoff_seconds), "backoff_seconds")
        cap = _seconds(table.get("max_backoff_seconds", d.max_backoff_seconds),
                       "max_backoff_seconds")  # fmt: skip
        if cap < backoff:
            raise _bad("max_backoff_seconds", f"({cap:g}) is below backoff_seconds ({backoff:g})",
                       "make max_backoff_seconds at least backoff_seconds")  # fmt: skip
        return cls(attempts, frozenset(on), exit_codes, backoff, cap)

    @property
    def retries(self) -> bool:
        return self.max_attempts > 1

    def capped(self, cap: int | None) -> RetryPolicy:
        """At most ``cap`` attempts in all (a queue's ``max_attempts``; None: no cap)."""
        if cap is None or cap >= self.max_attempts:
            return self
        return replace(self, max_attempts=max(cap, 1))

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "on": sorted(self.on),
            "exit_codes": sorted(self.exit_codes),
            "backoff_seconds": self.backoff_seconds,
            "max_backoff_seconds": self.max_backoff_seconds,
        }

    def words(self) -> str:
        """``4 attempts on node-lost, preempted; backoff 30 s doubling to 600 s`` (or
        ``no retry``), for the preview and `tp job status`."""
        if not self.retries:
            return "no retry (1 attempt)"
        on = ", ".join(e for e in RETRYABLE if e in self.on)
        if self.exit_codes:
            codes = ", ".join(str(c) for c in sorted(self.exit_codes))
            on = on.replace("failed", f"failed with exit code {codes}")
        return (
            f"{self.max_attempts} attempts, a new one after {on}; backoff "
            f"{self.backoff_seconds:g} s doubling to {self.max_backoff_seconds:g} s"
        )

    def backoff(self, attempts_ended: int) -> timedelta:
        """The wait after the ``attempts_ended``-th attempt ended: doubling, capped."""
        seconds = self.backoff_seconds * 2.0 ** min(max(attempts_ended - 1, 0), 62)
        return timedelta(seconds=min(seconds, self.max_backoff_seconds))


NO_RETRY = RetryPolicy()  # one attempt: the default


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    kind: str  # one of ENDS
    ended_at: datetime
    exit_code: int | None = None
    reason: str = ""  # in words, e.g. "node n3 fenced"

    def __post_init__(self) -> None:
        if self.kind not in ENDS:
            raise ValueError(f"an attempt ends as one of {', '.join(ENDS)}, not {self.kind!r}")


@dataclass(frozen=True, slots=True)
class Retry:
    attempt: int  # the number of the attempt to start (2, 3, …)
    not_before: datetime
    why: str


@dataclass(frozen=True, slots=True)
class End:
    why: str


def decide(
    policy: RetryPolicy, history: Sequence[AttemptEnd], queue_cap: int | None = None
) -> Retry | End:
    """After the last attempt of ``history`` ended: start another (and not before when), or let
    the job end. ``queue_cap``: the most attempts the job's queue allows."""
    if not history:
        raise ValueError("no attempt has ended yet")
    last, n = history[-1], len(history)
    said = f"attempt {n} {last.kind}" + (f" ({last.reason})" if last.reason else "")
    if last.kind == CANCELLED:
        return End(f"{said}: a stop by its user is never retried")
    if last.kind not in policy.on:
        return End(f"{said}: the retry policy does not retry {last.kind}")
    if last.kind == "failed" and policy.exit_codes and last.exit_code not in policy.exit_codes:
        codes = ", ".join(str(c) for c in sorted(policy.exit_codes))
        return End(f"{said} with exit code {last.exit_code}: retried only on {codes}")
    cap = policy.max_attempts if queue_cap is None else min(policy.max_attempts, queue_cap)
    if n >= cap:
        whose = "its queue's" if cap < policy.max_attempts else "its policy's"
        return End(f"{said}: that was the last of {whose} {cap} attempts")
    not_before = last.ended_at + policy.backoff(n)
    return Retry(n + 1, not_before, f"{said}; attempt {n + 1} waits for backoff until "
                 f"{not_before:%H:%M:%S}")  # fmt: skip
