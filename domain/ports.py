"""Ports: the interfaces the application needs from the outside world.

Each is a ``typing.Protocol``; its docstring states the contract every adapter must keep (the
in-memory and PostgreSQL adapters both pass ``tests/contract``). Errors: a missing object is
``None`` unless stated; ``domain.errors.Conflict`` means a lost race (re-read and decide again);
``domain.errors.Unavailable`` means "retry later".
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Literal, Protocol, Self

from domain.auth import ApiToken
from domain.catalog import RuntimePin, RuntimeSpec
from domain.jobs import Attempt, Job, Member, Submission
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.submission import JobSpec, Preview


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class Ids(Protocol):
    def new(self, kind: str) -> str:
        """A fresh, unique, URL-safe id starting with ``kind`` (e.g. ``job-…``)."""
        ...


class PreviewRepository(Protocol):
    async def add(self, preview: Preview) -> None:
        """Store a new preview. Previews are immutable: there is no update."""
        ...

    async def get(self, preview_id: str) -> Preview | None: ...


class SubmissionLedger(Protocol):
    async def claim(self, submission: Submission) -> Submission | None:
        """Record ``submission`` unless its retry key or its preview is already recorded.

        Returns None when this call recorded it. Otherwise returns the stored row that holds the
        same retry key, or failing that the one that holds the same preview. Concurrent claims of
        one retry key or one preview record exactly one row; the losers see the winner's row
        (they wait for the winner's transaction to end).
        """
        ...


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_cursor: str | None


class JobRepository(Protocol):
    async def add(self, job: Job) -> None: ...

    async def get(self, job_id: str) -> Job | None: ...

    async def update(self, job: Job, expected: JobState) -> None:
        """Compare-and-set: store ``job`` only if the stored state is still ``expected``.

        Only the mutable fields change (state, reason, exit code, updated_at; for members also
        the handle); identity fields such as ids, owner and spec are never rewritten.

        Raises Conflict when the stored state differs (another writer won) or NotFound.
        """
        ...

    async def list(
        self,
        *,
        owner: str | None,
        states: Collection[JobState] | None,
        limit: int,
        cursor: str | None,
    ) -> JobPage:
        """Newest first. ``cursor`` is an opaque value from a previous page's ``next_cursor``."""
        ...

    async def claim(self, states: Collection[JobState], limit: int) -> builtins.list[Job]:
        """Oldest first, jobs in ``states``, locked for this unit of work.

        Rows locked by another open unit of work are skipped, so concurrent workers never claim
        the same job.
        """
        ...


class AttemptRepository(Protocol):
    async def add(self, attempt: Attempt) -> None: ...

    async def get(self, attempt_id: str) -> Attempt | None: ...

    async def update(self, attempt: Attempt, expected: AttemptState) -> None:
        """Compare-and-set, as JobRepository.update."""
        ...

    async def for_job(self, job_id: str) -> list[Attempt]:
        """All attempts of a job, by number."""
        ...


class MemberRepository(Protocol):
    async def add(self, member: Member) -> None: ...

    async def update(self, member: Member, expected: MemberState) -> None:
        """Compare-and-set, as JobRepository.update."""
        ...

    async def for_attempt(self, attempt_id: str) -> list[Member]:
        """All members of an attempt, by index."""
        ...

    async def get(self, member_id: str) -> Member | None: ...


class LogRepository(Protocol):
    async def save(self, attempt_id: str, data: bytes, truncated: bool) -> None:
        """Store the final log of an attempt, replacing any earlier copy (idempotent)."""
        ...

    async def get(self, attempt_id: str) -> tuple[bytes, bool] | None:
        """(data, truncated) or None if no final log was stored."""
        ...


class TokenRepository(Protocol):
    async def add(self, token: ApiToken) -> None: ...

    async def by_hash(self, token_hash: str) -> ApiToken | None: ...

    async def count(self) -> int: ...


class UnitOfWork(Protocol):
    """One transaction. Leaving the ``async with`` block without ``commit()`` rolls back."""

    previews: PreviewRepository
    submissions: SubmissionLedger
    jobs: JobRepository
    attempts: AttemptRepository
    members: MemberRepository
    logs: LogRepository
    tokens: TokenRepository

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def commit(self) -> None: ...


UnitOfWorkFactory = Callable[[], UnitOfWork]


class BlobStore(Protocol):
    """Content-addressed storage for source archives (``sha256:<hex>`` keys)."""

    async def put(
        self, chunks: AsyncIterator[bytes], max_size: int, expected: str | None = None
    ) -> tuple[str, int]:
        """Store the stream; return (digest, size). Idempotent for identical content.

        Raises TooLarge past ``max_size`` bytes, and InvalidInput when ``expected`` is given and
        the content's digest differs; in both cases nothing is stored.
        """
        ...

    async def size(self, digest: str) -> int | None:
        """The stored size, or None if absent."""
        ...

    async def read(self, digest: str) -> bytes:
        """The content; raises NotFound if absent."""
        ...


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    job_id: str
    attempt_id: str
    member_id: str
    member_index: int
    spec: JobSpec
    source: bytes | None  # gzip-compressed tar, unpacked into the member's working directory


@dataclass(frozen=True, slots=True)
class Observation:
    """What a backend knows of one member right now."""

    status: Literal["starting", "running", "exited", "missing"]
    exit_code: int | None = None
    reason: str = ""


class ExecutionBackend(Protocol):
    """Runs members. Every method may raise Unavailable ("retry later")."""

    name: str

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        """Resolve a runtime's image to a content digest. Raises InvalidInput if absent."""
        ...

    async def launch(self, request: LaunchRequest) -> str:
        """Start the member; return its handle. Idempotent per member id: a repeated call
        returns the same handle and starts nothing new."""
        ...

    async def observe(self, handle: str) -> Observation: ...

    async def stop(self, handle: str, grace_seconds: float) -> None:
        """Ask the member to stop (SIGTERM, then SIGKILL after the grace). Idempotent."""
        ...

    def logs(self, handle: str, follow: bool) -> AsyncIterator[bytes]:
        """stdout and stderr interleaved, from the start; with ``follow`` until the member exits.

        Raises NotFound when the member is gone (released); the stored log is then authoritative.
        """
        ...

    async def held(self) -> dict[str, str]:
        """member id → handle for every member this backend still holds, running or not.

        Lets the supervisor find members it recorded as finished but never released (the
        process died in between) and release them.
        """
        ...

    async def release(self, handle: str) -> None:
        """Forget a member the caller knows to be stopped (remove its container, even if it is
        somehow still running). Idempotent; missing is fine."""
        ...
