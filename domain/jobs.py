"""Job, Attempt and Member records. Immutable: each change returns a new value.

Every state change goes through ``lifecycle.check_transition`` so that an illegal move raises.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from domain.checkpoints import Resume
from domain.lifecycle import (
    ATTEMPT_TRANSITIONS,
    JOB_TRANSITIONS,
    MEMBER_TRANSITIONS,
    AttemptState,
    JobState,
    MemberState,
    check_transition,
)
from domain.submission import JobSpec


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    preview_id: str
    owner: str
    spec: JobSpec
    state: JobState
    created_at: datetime
    updated_at: datetime
    reason: str = ""
    exit_code: int | None = None
    # pending again after an attempt ended (its retry policy): not admitted before this time
    not_before: datetime | None = None

    def moved(
        self,
        target: JobState,
        now: datetime,
        reason: str = "",
        exit_code: int | None = None,
        not_before: datetime | None = None,
    ) -> Job:
        check_transition(JOB_TRANSITIONS, self.state, target, f"job {self.id}")
        return replace(
            self,
            state=target,
            updated_at=now,
            reason=reason,  # a reason explains its state: replaced or cleared
            exit_code=exit_code if exit_code is not None else self.exit_code,
            not_before=not_before,  # explains a pending state only
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    id: str
    job_id: str
    number: int
    state: AttemptState
    created_at: datetime
    updated_at: datetime
    reason: str = ""
    exit_code: int | None = None
    # why it is ending, as its backend or the control plane classified it (domain/retry.py):
    # node-lost, preempted, launch-failed, requeued; "" until then, and for a plain exit
    cause: str = ""
    # the checkpoint it resumed from and those skipped (docs/checkpoints.md), recorded when its
    # members launched; None: not recorded (a first attempt, or a backend without checkpoints).
    # Written only by AttemptRepository.note_resume: ``update`` leaves it as it is
    resume: Resume | None = None

    def moved(
        self,
        target: AttemptState,
        now: datetime,
        reason: str = "",
        exit_code: int | None = None,
        cause: str = "",
    ) -> Attempt:
        check_transition(ATTEMPT_TRANSITIONS, self.state, target, f"attempt {self.id}")
        return replace(
            self,
            state=target,
            updated_at=now,
            reason=reason,  # a reason explains its state: replaced or cleared
            exit_code=exit_code if exit_code is not None else self.exit_code,
            cause=self.cause or cause,  # the first cause found is the cause
        )

    def caused(self, cause: str, now: datetime) -> Attempt:
        """The same state, with why it is ending (its node fenced, …) unless already known."""
        return self if self.cause else replace(self, cause=cause, updated_at=now)

    @property
    def end(self) -> str:
        """How it ended, for its job's retry policy: cancelled, node-lost, preempted,
        launch-failed, failed (an exit), requeued; "" while it runs or when it succeeded."""
        if self.state is AttemptState.CANCELLED:
            return "cancelled"
        if self.state is AttemptState.FAILED:
            return self.cause or "failed"
        return ""


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    attempt_id: str
    index: int
    state: MemberState
    updated_at: datetime
    handle: str | None = None  # the backend's name for it (container id, pod name, …)
    exit_code: int | None = None
    reason: str = ""
    node: str | None = None  # where its reservation placed it
    role: str = "main"

    def moved(
        self,
        target: MemberState,
        now: datetime,
        reason: str = "",
        exit_code: int | None = None,
        handle: str | None = None,
    ) -> Member:
        check_transition(MEMBER_TRANSITIONS, self.state, target, f"member {self.id}")
        return replace(
            self,
            state=target,
            updated_at=now,
            reason=reason,  # a reason explains its state: replaced or cleared
            exit_code=exit_code if exit_code is not None else self.exit_code,
            handle=handle or self.handle,
        )

    def explained(self, reason: str, now: datetime) -> Member:
        """The same state with the backend's newer reason for it (a pending Slurm job whose
        reason changed, a node that is now lost rather than disconnected): not a transition,
        and no change at all when the reason is the same."""
        if reason == self.reason:
            return self
        return replace(self, reason=reason, updated_at=now)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One job state transition, recorded in the transaction that made it (the timeline).

    ``seq`` counts a job's events from 1; ``state`` is the state entered; ``reason`` is the
    job's reason when the transition set a new one, else empty.
    """

    job_id: str
    seq: int
    at: datetime
    state: JobState
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Submission:
    """The commit ledger row: one retry key ↔ one preview ↔ one job."""

    retry_key: str
    preview_id: str
    digest: str
    job_id: str
    owner: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a commit returns. ``created`` is False when an earlier identical commit made the job."""

    job_id: str
    preview_id: str
    retry_key: str
    created: bool
    job: Job


def attempt_outcome(members: list[Member]) -> tuple[str, str, int | None]:
    """How a finished attempt ended, from its members: (outcome, reason, exit code).

    ``outcome`` is "cancelled" if any member was stopped on request, else "failed" if any member
    failed (the lowest-index failure gives the reason and exit code), else "succeeded".
    """
    if any(m.state is MemberState.STOPPED for m in members):
        return "cancelled", "stopped on request", None
    failed = sorted((m for m in members if m.state is MemberState.FAILED), key=lambda m: m.index)
    if failed:
        first = failed[0]
        return "failed", first.reason or f"member {first.index} failed", first.exit_code
    return "succeeded", "", 0


@dataclass(frozen=True, slots=True)
class JobProgress:
    """What a list of jobs shows beside each job (``JobRepository.progress``): how many
    attempts it has had, when it first ran, and when it last entered ``pending``."""

    job_id: str
    attempts: int
    started_at: datetime | None  # its first entry into running; None: it never ran
    pending_since: datetime | None  # its latest entry into pending (created or requeued)


SEARCH_MAX = 200  # characters of a jobs list's text search (``q=``)


def search_pattern(text: str) -> str:
    """``text`` as a LIKE pattern that matches it anywhere, literally: ``\\``, ``%`` and ``_``
    escaped with a backslash (the pattern's ESCAPE character)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_matches(job: Job, text: str) -> bool:
    """The in-memory twin of the SQL search: a substring of the experiment, the job id or the
    owner, ignoring the case of ASCII letters only (PostgreSQL's ILIKE under the "C" collation,
    which the adapter asks for: the same answer whatever locale the database was made with;
    "É" and "é" are different characters to the search)."""
    wanted = text.translate(_ASCII_LOWER)
    fields = (job.spec.experiment, job.id, job.owner)
    return any(wanted in f.translate(_ASCII_LOWER) for f in fields)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
