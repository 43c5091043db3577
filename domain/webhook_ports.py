"""Ports of webhook notifications (docs/notifications.md): the subscriptions and their durable
outbox, and the sender.

The outbox is filled by the database in the transaction that moves a job (PostgreSQL: a trigger
on the job timeline), so no path that changes a job's state can skip it or invent one. Its
rows are timed by the store's own clock (the database's), so the API hosts' clocks never
decide when a row is due."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Protocol

from domain.webhooks import (
    Delivery,
    SendResult,
    StoredSecret,
    Subscription,
    SubscriptionSummary,
)


class WebhookStore(Protocol):
    async def add(self, subscription: Subscription, limit_per_owner: int) -> None:
        """Store it. Conflict if its owner has ``limit_per_owner`` already."""
        ...

    async def get(self, subscription_id: str) -> Subscription | None: ...

    async def list(self, owner: str | None) -> Sequence[SubscriptionSummary]:
        """``owner``'s subscriptions (every one: None), oldest first, with delivery counts."""
        ...

    async def remove(self, subscription_id: str) -> bool:
        """Delete it and its undelivered rows; False if it did not exist."""
        ...

    async def claim(self, limit: int, lease: timedelta) -> Sequence[Delivery]:
        """Up to ``limit`` due rows, each the oldest undelivered one of its (subscription, job),
        so one job's changes reach a receiver in order. A claimed row is not due again for
        ``lease``: a process that dies before recording the outcome leaves it to be resent."""
        ...

    async def delivered(self, delivery_id: int, status: int) -> None: ...

    async def failed(
        self, delivery_id: int, result: SendResult, retry_in: timedelta | None
    ) -> None:
        """Record a failed send: due again after ``retry_in``, or dead (None)."""
        ...

    async def held(self, delivery_id: int, error: str, retry_in: timedelta) -> None:
        """Record that a claimed row was not sent (its secret could not be read): due again
        after ``retry_in``, its error shown, no send counted (it never goes dead for it)."""
        ...

    async def secrets(self) -> Sequence[tuple[str, StoredSecret]]:
        """Every subscription's id and stored secret (sealing and re-sealing them)."""
        ...

    async def replace_secret(self, subscription_id: str, old: StoredSecret, sealed: str) -> bool:
        """Store ``sealed`` as the subscription's secret if it still holds ``old`` (a
        compare-and-set: a secret changed meanwhile is left alone); False if not replaced."""
        ...

    async def prune(self, older_than: timedelta) -> int:
        """Delete delivered and dead rows finished longer ago than ``older_than``."""
        ...


class WebhookSender(Protocol):
    async def send(
        self, url: str, headers: Mapping[str, str], body: bytes, within: timedelta
    ) -> SendResult:
        """POST ``body`` once, answered ``within`` or failed; never raises for the receiver's
        faults (refused, timed out, answered 5xx, redirected) nor for a host whose address
        the destination policy refuses (domain/webhook_destinations.py): they come back as
        the result. Redirects are not followed."""
        ...
