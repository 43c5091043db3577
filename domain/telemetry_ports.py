"""Ports of the telemetry path: the metrics store and the collector tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from domain.telemetry import Appended, Bucket, MemberScope, SourceBatch, View

AUDIENCE = "telemetry"


@dataclass(frozen=True, slots=True)
class CollectorCounters:
    """What a member's collector skipped so far (cumulative; see proto Counters)."""

    corrupt_records: int = 0
    dropped_records: int = 0
    dropped_bytes: int = 0


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """What the gateway needs to know of a token's member now."""

    job_id: str
    attempt_id: str
    member_index: int
    attempt_state: str
    attempt_ended_at: datetime | None  # None while the attempt runs


@dataclass(frozen=True, slots=True)
class SeriesInfo:
    id: int
    attempt_id: str
    attempt: int  # the attempt's number
    member_id: str
    member: int  # the member's index
    source: str
    tag: str
    first_step: int
    last_step: int
    count: int
    last_value: float
    last_wall: float


@dataclass(frozen=True, slots=True)
class RawPoint:
    step: int
    wall_time: float
    value: float
    offset: int


@dataclass(frozen=True, slots=True)
class TelemetryCounts:
    """Per member: points stored and what its collector skipped."""

    member_id: str
    points: int
    duplicates: int
    corrupt_records: int
    dropped_records: int
    dropped_bytes: int


class MetricsStore(Protocol):
    async def member_status(self, member_id: str) -> MemberStatus | None:
        """The member's job, attempt and whether that attempt has ended; None if unknown."""
        ...

    async def append(
        self,
        scope: MemberScope,
        batches: Sequence[SourceBatch],
        counters: CollectorCounters,
        now: datetime,
    ) -> Appended:
        """Store the points of records not stored before, in one transaction, with rollups."""
        ...

    async def series(self, job_id: str, tags: Sequence[str] | None = None) -> list[SeriesInfo]:
        """The series of a job (all, or those of ``tags``), by tag, attempt, member, source."""
        ...

    async def view(self, series_id: int, view: View) -> list[Bucket]:
        """At most ``end // width - start // width + 1`` buckets (raw points as 1-step ones)."""
        ...

    async def steps_between(
        self, series_id: int, start_time: float, end_time: float
    ) -> tuple[int, int] | None:
        """The first step logged at or after ``start_time`` and the last at or before
        ``end_time`` (seconds since the epoch); None when no point falls between."""
        ...

    async def raw(
        self, series_id: int, start: int, end: int, after_offset: int, limit: int
    ) -> list[RawPoint]:
        """Raw points with ``start <= step <= end`` in (step, offset) order; ``after_offset``
        resumes a page at ``start``: only points of that step past that offset."""
        ...

    async def counts(self, job_id: str) -> list[TelemetryCounts]: ...


@dataclass(frozen=True, slots=True)
class TokenClaims:
    scope: MemberScope
    key_id: str
    expires_at: datetime


class TokenSigner(Protocol):
    async def issue(self, scope: MemberScope, now: datetime, lifetime_seconds: int) -> str: ...


class TokenVerifier(Protocol):
    async def verify(self, token: str, now: datetime) -> TokenClaims:
        """Check the signature, audience and expiry; raise Unauthenticated otherwise."""
        ...
