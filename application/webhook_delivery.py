"""The webhook deliverer (docs/notifications.md#delivery): a loop in every API process that
claims due outbox rows, sends each signed (all of a pass at once, each bounded by the timeout,
so a hanging receiver delays no other), and records the outcome: delivered on 2xx, else due
again after an exponential back-off with jitter, dead after ``max_attempts``.

At least once: a process that dies between a send and its record leaves the row claimed; the
claim's lease runs out and another pass sends it again. Receivers deduplicate by the event id
(``TunePlane-Event-Id``). Several API processes may run it: claims skip each other's rows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta

from application import webhook_secrets
from application.context import Context, Notifications
from domain.coordination_ports import WEBHOOK_OUTBOX
from domain.errors import TunePlaneError
from domain.secret_ports import SecretUnreadable
from domain.webhooks import Delivery, SendResult, body, event, headers, one_line

log = logging.getLogger("tuneplane.webhooks")
PRUNE_EVERY = timedelta(minutes=10)
HOLD = timedelta(minutes=1)  # a row whose secret no key opens is tried again this much later
SAY_HELD_EVERY = timedelta(minutes=10)  # such a webhook is logged at most this often


class Deliverer:
    def __init__(self, ctx: Context, notifications: Notifications) -> None:
        self._ctx = ctx
        self._n = notifications
        self._wake = asyncio.Event()
        self._since_prune = PRUNE_EVERY  # prune at the first pass
        self.sent = 0  # sends attempted by this process (tests, logs)
        self._held_said: dict[str, datetime] = {}  # webhook -> when its hold was last logged

    @property
    def lease(self) -> timedelta:
        """How long a claimed row waits for this process's record before it is due again."""
        return self._n.timeout * 2 + timedelta(seconds=1)

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Deliver until cancelled; a pass that fails (the database away) is logged and the
        next one tries again."""
        self._ctx.signals.subscribe(WEBHOOK_OUTBOX, self.wake)
        while True:
            try:
                busy = await self.deliver_due()
            except TunePlaneError as exc:
                log.warning("webhook delivery pass failed: %s", exc)
                busy = False
            except Exception:  # a bug must not end delivery for the process's life
                log.exception("webhook delivery pass failed")
                busy = False
            if busy:  # a full batch: more may be due at once
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._n.poll.total_seconds())
            self._since_prune += self._n.poll

    async def deliver_due(self) -> bool:
        """One pass: claim, send, record. True when the batch was full."""
        store = self._n.store
        if self._since_prune >= PRUNE_EVERY:
            self._since_prune = timedelta(0)
            await store.prune(self._n.retention)
        claimed = await store.claim(self._n.batch, self.lease)
        if claimed:
            await asyncio.gather(*(self._deliver(d) for d in claimed))
        return len(claimed) >= self._n.batch

    async def _deliver(self, delivery: Delivery) -> None:
        change = delivery.change
        try:
            secret = webhook_secrets.signing_secret(
                self._n, delivery.subscription_id, delivery.secret
            )
        except SecretUnreadable as exc:  # never sent unsigned or with another secret
            await self._hold(delivery, exc)
            return
        if not delivery.secret.sealed:  # written before 0027 or by an older API process
            await self._seal(delivery)
        payload = body(event(change), delivery.format)
        now = int(self._ctx.clock.now().timestamp())
        sent = headers(secret, change.event_id, delivery.subscription_id, now, payload)
        try:
            result = await asyncio.wait_for(
                self._n.sender.send(delivery.url, sent, payload, self._n.timeout),
                self._n.timeout.total_seconds() + 1,
            )
        except TimeoutError:
            result = SendResult(None, f"no answer in {self._n.timeout.total_seconds():g} s")
        self.sent += 1
        try:
            if result.ok:
                assert result.status is not None
                await self._n.store.delivered(delivery.id, result.status)
                return
            failed = delivery.attempts + 1
            retry = self._n.retry
            wait = None if retry.gives_up(failed) else retry.delay(failed, self._n.jitter())
            error = one_line(result.error or f"HTTP {result.status}")
            await self._n.store.failed(delivery.id, SendResult(result.status, error), wait)
            if wait is None:
                log.warning(
                    "webhook %s: event %s dead after %d attempts: %s",
                    delivery.subscription_id, change.event_id, failed, error,
                )  # fmt: skip
        except TunePlaneError as exc:  # the row stays claimed: resent once its lease ends
            log.warning("webhook %s: outcome not recorded: %s", delivery.subscription_id, exc)

    async def _hold(self, delivery: Delivery, exc: SecretUnreadable) -> None:
        """Not sent: due again after HOLD, no send counted (it never goes dead for a key an
        operator can put back), the error on the row for `tp webhook ls`."""
        now, said = self._ctx.clock.now(), self._held_said.get(delivery.subscription_id)
        if said is None or now - said >= SAY_HELD_EVERY:  # one line per webhook, not per row
            self._held_said[delivery.subscription_id] = now
            log.error(
                "webhook %s: event %s not sent (its deliveries are held): %s (fix: %s)",
                delivery.subscription_id, delivery.change.event_id, exc.message, exc.fix,
            )  # fmt: skip
        try:
            await self._n.store.held(delivery.id, one_line(f"not sent: {exc.message}"), HOLD)
        except TunePlaneError as failed:  # the row stays claimed: due again once its lease ends
            log.warning("webhook %s: hold not recorded: %s", delivery.subscription_id, failed)

    async def _seal(self, delivery: Delivery) -> None:
        try:
            await webhook_secrets.seal_clear_one(self._n, delivery.subscription_id, delivery.secret)
        except TunePlaneError as exc:  # sent all the same; sealed at the next start
            log.warning("webhook %s: secret not sealed: %s", delivery.subscription_id, exc)
