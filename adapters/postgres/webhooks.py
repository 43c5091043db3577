"""Webhook subscriptions and their outbox in PostgreSQL (``domain.webhook_ports.WebhookStore``).

Not part of the unit of work, and with no in-memory twin: the outbox is filled by the
``webhook_outbox_fill`` trigger (migration 0026) in the transaction that moves a job, so it is
only as durable as PostgreSQL makes it; this store keeps its own short transactions for the
subscriptions and the deliverer's claims and records, timed by the database's clock."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.errors import translated
from adapters.postgres.webhook_tables import webhook_outbox, webhook_subscriptions
from domain.errors import Conflict
from domain.lifecycle import JobState
from domain.webhooks import (
    Delivery,
    DeliveryStatus,
    Format,
    JobChange,
    Scope,
    SendResult,
    StoredSecret,
    Subscription,
    SubscriptionSummary,
)

# The oldest undelivered row of each (subscription, job), due now, not locked by another
# claimer; moved on by the lease so it is not claimed again while it is being sent.
_CLAIM = text("""
WITH due AS (
  SELECT o.id FROM webhook_outbox o
  WHERE o.status = 'pending' AND o.next_at <= now()
    AND NOT EXISTS (
      SELECT 1 FROM webhook_outbox e
      WHERE e.subscription_id = o.subscription_id AND e.job_id = o.job_id
        AND e.status = 'pending' AND e.id < o.id)
  ORDER BY o.next_at, o.id
  LIMIT :limit
  FOR UPDATE OF o SKIP LOCKED
)
UPDATE webhook_outbox w SET next_at = now() + make_interval(secs => :lease)
FROM due, webhook_subscriptions s
WHERE w.id = due.id AND s.id = w.subscription_id
RETURNING w.id, w.subscription_id, w.job_id, w.seq, w.state, w.previous_state, w.reason,
          w.owner, w.queue, w.at, w.attempts, s.url, s.secret, s.sealed_secret, s.format
""")

# each subscription's latest outcome: its newest finished row, else its newest failed (or held) send
_LAST = text("""
SELECT DISTINCT ON (subscription_id) subscription_id, last_status, last_error
FROM webhook_outbox
WHERE subscription_id = ANY(:ids) AND (attempts > 0 OR status = 'delivered' OR last_error <> '')
ORDER BY subscription_id, finished_at DESC NULLS FIRST, id DESC
""")


def _secret(row: Any) -> StoredSecret:
    sealed = row["sealed_secret"]
    if sealed is not None:
        return StoredSecret(sealed, sealed=True)
    return StoredSecret(row["secret"], sealed=False)


def _subscription(row: Any) -> Subscription:
    return Subscription(
        id=row["id"],
        owner=row["owner"],
        scope=Scope(row["scope"]),
        target=row["target"],
        url=row["url"],
        states=tuple(JobState(s) for s in row["states"]),
        format=Format(row["format"]),
        created_at=row["created_at"],
        secret=_secret(row),
    )


def _delivery(row: Any) -> Delivery:
    previous = row["previous_state"]
    return Delivery(
        id=row["id"],
        subscription_id=row["subscription_id"],
        url=row["url"],
        secret=_secret(row),
        format=Format(row["format"]),
        attempts=row["attempts"],
        change=JobChange(
            job_id=row["job_id"],
            seq=row["seq"],
            state=JobState(row["state"]),
            previous=JobState(previous) if previous else None,
            reason=row["reason"],
            owner=row["owner"],
            queue=row["queue"],
            at=row["at"],
        ),
    )


def _columns(secret: StoredSecret) -> dict[str, str | None]:
    if secret.sealed:
        return {"secret": None, "sealed_secret": secret.value}
    return {"secret": secret.value, "sealed_secret": None}


class PostgresWebhooks:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(self, subscription: Subscription, limit_per_owner: int) -> None:
        s = subscription
        with translated(f"add webhook {s.id}"):
            async with self._engine.begin() as conn:
                # one owner's adds are serialised, so two at once cannot both pass the count
                await conn.execute(
                    select(func.pg_advisory_xact_lock(func.hashtext("webhooks:" + s.owner)))
                )
                count = await conn.scalar(
                    select(func.count())
                    .select_from(webhook_subscriptions)
                    .where(webhook_subscriptions.c.owner == s.owner)
                )
                if (count or 0) >= limit_per_owner:
                    raise Conflict(
                        f"user {s.owner} has {count} webhooks, the most one may have",
                        fix="remove one first (`tp webhook ls`, `tp webhook rm ID`)",
                    )
                await conn.execute(
                    webhook_subscriptions.insert().values(
                        id=s.id, owner=s.owner, scope=s.scope.value, target=s.target,
                        url=s.url, states=[x.value for x in s.states], format=s.format.value,
                        created_at=s.created_at, **_columns(s.secret),
                    )
                )  # fmt: skip

    async def get(self, subscription_id: str) -> Subscription | None:
        query = select(webhook_subscriptions).where(webhook_subscriptions.c.id == subscription_id)
        with translated(f"get webhook {subscription_id}"):
            async with self._engine.connect() as conn:
                row = (await conn.execute(query)).mappings().first()
        return _subscription(row) if row else None

    async def list(self, owner: str | None) -> builtins.list[SubscriptionSummary]:
        subs = webhook_subscriptions
        query = select(subs).order_by(subs.c.created_at, subs.c.id)
        if owner is not None:
            query = query.where(subs.c.owner == owner)
        o = webhook_outbox
        counts = select(o.c.subscription_id, o.c.status, func.count().label("n")).group_by(
            o.c.subscription_id, o.c.status
        )
        with translated("list webhooks"):
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).mappings().all()
                ids = [r["id"] for r in rows]
                tally: dict[tuple[str, str], int] = {}
                latest: dict[str, tuple[int | None, str]] = {}
                if ids:
                    for r in await conn.execute(counts.where(o.c.subscription_id.in_(ids))):
                        tally[(r.subscription_id, r.status)] = int(r.n)
                    for r in await conn.execute(_LAST, {"ids": ids}):
                        latest[r.subscription_id] = (r.last_status, r.last_error)
        return [
            SubscriptionSummary(
                _subscription(r),
                pending=tally.get((r["id"], DeliveryStatus.PENDING.value), 0),
                delivered=tally.get((r["id"], DeliveryStatus.DELIVERED.value), 0),
                dead=tally.get((r["id"], DeliveryStatus.DEAD.value), 0),
                last_status=latest.get(r["id"], (None, ""))[0],
                last_error=latest.get(r["id"], (None, ""))[1],
            )
            for r in rows
        ]

    async def remove(self, subscription_id: str) -> bool:
        subs = webhook_subscriptions
        with translated(f"remove webhook {subscription_id}"):
            async with self._engine.begin() as conn:
                done = await conn.execute(
                    delete(subs).where(subs.c.id == subscription_id).returning(subs.c.id)
                )
                return done.first() is not None

    async def claim(self, limit: int, lease: timedelta) -> Sequence[Delivery]:
        with translated("claim webhook deliveries"):
            async with self._engine.begin() as conn:
                rows = await conn.execute(_CLAIM, {"limit": limit, "lease": lease.total_seconds()})
                return sorted((_delivery(r) for r in rows.mappings()), key=lambda d: d.id)

    async def delivered(self, delivery_id: int, status: int) -> None:
        await self._finish(
            delivery_id,
            status=DeliveryStatus.DELIVERED.value,
            last_status=status,
            last_error="",
            finished_at=func.now(),
        )

    async def failed(
        self, delivery_id: int, result: SendResult, retry_in: timedelta | None
    ) -> None:
        values: dict[str, Any] = {
            "attempts": webhook_outbox.c.attempts + 1,
            "last_status": result.status,
            "last_error": result.error,
        }
        if retry_in is None:
            values.update(status=DeliveryStatus.DEAD.value, finished_at=func.now())
        else:
            values["next_at"] = func.now() + func.make_interval(
                0, 0, 0, 0, 0, 0, retry_in.total_seconds()
            )
        await self._finish(delivery_id, **values)

    async def _finish(self, delivery_id: int, **values: Any) -> None:
        o = webhook_outbox
        query = (
            update(o)
            .where(o.c.id == delivery_id, o.c.status == DeliveryStatus.PENDING.value)
            .values(**values)
        )
        with translated(f"record webhook delivery {delivery_id}"):
            async with self._engine.begin() as conn:
                await conn.execute(query)

    async def held(self, delivery_id: int, error: str, retry_in: timedelta) -> None:
        await self._finish(
            delivery_id,
            last_error=error,
            next_at=func.now() + func.make_interval(0, 0, 0, 0, 0, 0, retry_in.total_seconds()),
        )

    async def secrets(self) -> builtins.list[tuple[str, StoredSecret]]:
        s = webhook_subscriptions
        query = select(s.c.id, s.c.secret, s.c.sealed_secret).order_by(s.c.id)
        with translated("read the webhook secrets"):
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).mappings().all()
        return [(r["id"], _secret(r)) for r in rows]

    async def replace_secret(self, subscription_id: str, old: StoredSecret, sealed: str) -> bool:
        s = webhook_subscriptions
        held = s.c.sealed_secret if old.sealed else s.c.secret
        query = (
            update(s)
            .where(s.c.id == subscription_id, held == old.value)
            .values(secret=None, sealed_secret=sealed)
            .returning(s.c.id)
        )
        with translated(f"seal the secret of webhook {subscription_id}"):
            async with self._engine.begin() as conn:
                return (await conn.execute(query)).first() is not None

    async def prune(self, older_than: timedelta) -> int:
        o = webhook_outbox
        cutoff = func.now() - func.make_interval(0, 0, 0, 0, 0, 0, older_than.total_seconds())
        query = delete(o).where(
            o.c.status != DeliveryStatus.PENDING.value, o.c.finished_at < cutoff
        )
        with translated("prune the webhook outbox"):
            async with self._engine.begin() as conn:
                return int((await conn.execute(query)).rowcount)
