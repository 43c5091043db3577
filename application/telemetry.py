"""The telemetry gateway's use case: who may append what, and storing it.

A collector token speaks for one member of one attempt. Every batch names its attempt and
member; a batch for anything else is refused before anything is written, as is a batch whose
token expired or whose attempt ended more than ``grace`` ago (the grace lets a collector ship
the last lines a member wrote before it exited).

The member's status is read at most once per ``STATUS_SECONDS`` per member while its attempt
runs (not once per batch: at thousands of streams, a query per batch cost as much as storing
it). That changes no answer while ``STATUS_SECONDS`` is below the grace: an attempt seen running
at ``t`` that ended at ``e >= t`` has ``now - e <= now - t``, within the grace, so a fresh read
would accept the batch too. An ended attempt's status is read every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from domain.errors import Forbidden, Unauthenticated
from domain.ports import Clock
from domain.telemetry import Appended, MemberScope, SourceBatch
from domain.telemetry_ports import (
    CollectorCounters,
    MemberStatus,
    MetricsStore,
    TokenClaims,
    TokenSigner,
    TokenVerifier,
)

DEFAULT_GRACE = timedelta(minutes=10)
STATUS_SECONDS = 60.0
MAX_REMEMBERED = 100_000  # members whose status is kept; all forgotten beyond


class TelemetryIngest:
    def __init__(
        self,
        store: MetricsStore,
        verifier: TokenVerifier,
        clock: Clock,
        *,
        grace: timedelta = DEFAULT_GRACE,
    ) -> None:
        self.store = store
        self.verifier = verifier
        self.clock = clock
        self.grace = grace
        self.fresh = min(timedelta(seconds=STATUS_SECONDS), grace)
        self._running: dict[str, tuple[MemberStatus, datetime]] = {}  # member -> (status, read)

    async def authenticate(self, token: str) -> TokenClaims:
        if not token:
            raise Unauthenticated(
                "no collector token",
                fix="send the member's token in the authorization metadata (Bearer)",
            )
        return await self.verifier.verify(token, self.clock.now())

    async def append(
        self,
        claims: TokenClaims,
        attempt_id: str,
        member_id: str,
        batches: Sequence[SourceBatch],
        counters: CollectorCounters,
    ) -> Appended:
        now = self.clock.now()
        scope = claims.scope
        if claims.expires_at <= now:
            raise Unauthenticated(
                "the collector token expired", fix="give the collector the member's newer token"
            )
        if (attempt_id, member_id) != (scope.attempt_id, scope.member_id):
            raise Forbidden(
                f"this token may write member {scope.member_id} of attempt {scope.attempt_id}"
                f" only, not member {member_id!r} of attempt {attempt_id!r}",
                fix="use each member's own token for its metrics",
            )
        status = await self._status(member_id, now)
        if status is None or (status.job_id, status.attempt_id) != (
            scope.job_id,
            scope.attempt_id,
        ):
            raise Forbidden(
                f"member {member_id} does not exist in attempt {scope.attempt_id}",
                fix="use the token issued for this member's launch",
            )
        ended = status.attempt_ended_at
        if ended is not None and now - ended > self.grace:
            raise Forbidden(
                f"attempt {scope.attempt_id} ended at {ended:%Y-%m-%d %H:%M:%S}Z: its collector"
                " tokens are no longer accepted",
                fix="metrics written after an attempt ended are not collected",
            )
        for batch in batches:
            batch.check()
        return await self.store.append(scope, batches, counters, now)

    async def _status(self, member_id: str, now: datetime) -> MemberStatus | None:
        known = self._running.get(member_id)
        if known is not None and timedelta(0) <= now - known[1] < self.fresh:
            return known[0]
        status = await self.store.member_status(member_id)
        if status is not None and status.attempt_ended_at is None:
            if len(self._running) >= MAX_REMEMBERED:
                self._running.clear()
            self._running[member_id] = (status, now)
        else:
            self._running.pop(member_id, None)
        return status


async def collector_token(
    signer: TokenSigner, scope: MemberScope, now: datetime, lifetime: timedelta
) -> str:
    """A token for the collector of ``scope`` (never given to the workload)."""
    return await signer.issue(scope, now, int(lifetime.total_seconds()))
