"""Explicit state machines for Job, Attempt and Member. Illegal transitions raise.

See docs/lifecycles.md for the drawings. A Job is what the user committed; an Attempt is one try
at running it on a backend; a Member is one process/container of an attempt (a gang has several).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from domain.errors import IllegalTransition


class JobState(StrEnum):
    PENDING = "pending"  # committed, waiting for a launch
    STARTING = "starting"  # an attempt is being launched
    RUNNING = "running"
    STOPPING = "stopping"  # stop requested; waiting until every member is known stopped
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AttemptState(StrEnum):
    LAUNCHING = "launching"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class MemberState(StrEnum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    UNKNOWN = "unknown"  # control contact lost: never taken as proof that it stopped
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.CANCELLED}),
    JobState.STARTING: frozenset(
        # back to PENDING: a gang launch aborted before anything started (queued again)
        {JobState.PENDING, JobState.RUNNING, JobState.STOPPING, JobState.FAILED, JobState.SUCCEEDED}
    ),
    # back to PENDING: its attempt ended and its retry policy starts another
    JobState.RUNNING: frozenset(
        {JobState.PENDING, JobState.STOPPING, JobState.SUCCEEDED, JobState.FAILED}
    ),
    JobState.STOPPING: frozenset({JobState.CANCELLED, JobState.SUCCEEDED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.LAUNCHING: frozenset(
        {AttemptState.RUNNING, AttemptState.STOPPING, AttemptState.FAILED, AttemptState.SUCCEEDED}
    ),
    AttemptState.RUNNING: frozenset(
        {AttemptState.STOPPING, AttemptState.SUCCEEDED, AttemptState.FAILED}
    ),
    AttemptState.STOPPING: frozenset(
        {AttemptState.CANCELLED, AttemptState.SUCCEEDED, AttemptState.FAILED}
    ),
    AttemptState.SUCCEEDED: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.CANCELLED: frozenset(),
}

_MEMBER_FINAL = frozenset({MemberState.SUCCEEDED, MemberState.FAILED, MemberState.STOPPED})
MEMBER_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    MemberState.PENDING: frozenset({MemberState.STARTING, MemberState.STOPPED, MemberState.FAILED}),
    MemberState.STARTING: frozenset({MemberState.RUNNING, MemberState.UNKNOWN} | _MEMBER_FINAL),
    MemberState.RUNNING: frozenset({MemberState.UNKNOWN} | _MEMBER_FINAL),
    # back to STARTING: contact returned and the backend reports it still waiting to start
    MemberState.UNKNOWN: frozenset({MemberState.STARTING, MemberState.RUNNING} | _MEMBER_FINAL),
    MemberState.SUCCEEDED: frozenset(),
    MemberState.FAILED: frozenset(),
    MemberState.STOPPED: frozenset(),
}

JOB_FINAL = frozenset(s for s, nxt in JOB_TRANSITIONS.items() if not nxt)
ATTEMPT_FINAL = frozenset(s for s, nxt in ATTEMPT_TRANSITIONS.items() if not nxt)
MEMBER_FINAL = _MEMBER_FINAL

S = TypeVar("S", JobState, AttemptState, MemberState)


def check_transition(table: dict[S, frozenset[S]], current: S, target: S, what: str) -> S:
    """Return ``target`` if ``current → target`` is an edge of ``table``; raise otherwise.

    Staying in the same state is not a transition and is refused too, so that a caller which
    believes it is moving a record notices a lost race instead of silently rewriting it.
    """
    if target not in table[current]:
        allowed = ", ".join(sorted(table[current])) or "none (final state)"
        raise IllegalTransition(
            f"{what} cannot move from {current} to {target}",
            fix=f"allowed next states from {current}: {allowed}",
        )
    return target
