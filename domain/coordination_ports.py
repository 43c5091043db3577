"""Ports by which control-plane processes coordinate: wake-up hints and the scheduling lease."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

NODE_WORK = "node_work"  # a launch began, was decided, or a member is to stop: gateways re-read
LAUNCH_NEWS = "launch_news"  # a node voted or reported: the coordinator re-reads
# a job state change was put in the webhook outbox (sent by the database, in its commit)
WEBHOOK_OUTBOX = "webhook_outbox"
# a token was revoked, or a user changed (role, teams, disabled): API processes drop their token
# caches (a cached lookup holds the user's role and teams)
TOKENS_REVOKED = "tokens_revoked"


class Signals(Protocol):
    """Wake-up hints between processes ("there may be news about TOPIC"). A hint carries no
    state: whoever is woken re-reads the database, and every loop still polls, so a lost or
    extra hint costs latency, never correctness. Send it after the commit it announces."""

    async def notify(self, topic: str) -> None:
        """Tell every subscriber of ``topic`` (in any process); never raises."""
        ...

    def subscribe(self, topic: str, wake: Callable[[], None]) -> None:
        """Call ``wake`` (on the event loop, quickly) whenever ``topic`` is notified."""
        ...


class NoSignals:
    """No hints: every loop relies on its poll (the simulator and most tests)."""

    async def notify(self, topic: str) -> None:
        return None

    def subscribe(self, topic: str, wake: Callable[[], None]) -> None:
        return None


NO_SIGNALS = NoSignals()


class LeaderLease(Protocol):
    """Leadership of the scheduling loop among control-plane processes."""

    async def acquire(self) -> bool:
        """Try to become, or check that this process still is, the leader. Never blocks.
        Exactly one holder at a time; a holder that dies loses it."""
        ...

    async def release(self) -> None:
        """Give up leadership (idempotent)."""
        ...
