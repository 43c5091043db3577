"""Webhook signing secrets at rest (docs/notifications.md#the-secret-at-rest): sealed with the
process's secrets key when made, opened to sign, sealed again under the newest key when keys
rotate (`tp admin secrets reseal`). A clear one (a row from before migration 0027, or written
by an older API process) is sealed when an API process starts and where a delivery meets one.

A secret no key opens is that webhook's problem alone: its deliveries are held (not sent,
not counted as failed sends, shown by `tp webhook ls`), and the log names it and the fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from application.context import Notifications
from domain.errors import Unavailable
from domain.secret_ports import SecretBox, SecretUnreadable
from domain.webhook_ports import WebhookStore
from domain.webhooks import StoredSecret


@dataclass(frozen=True, slots=True)
class SealReport:
    sealed: int = 0  # clear secrets sealed
    resealed: int = 0  # sealed ones sealed again under the newest key
    kept: int = 0  # sealed ones left as they were (they open)
    unreadable: Sequence[str] = field(default_factory=tuple)  # webhooks no key opens


def box(n: Notifications) -> SecretBox:
    if n.secrets is None:
        raise Unavailable(
            "this process has no secrets key to seal webhook secrets with",
            fix="set TUNEPLANE_SECRETS_KEY_FILE (docs/notifications.md#the-secret-at-rest)",
        )
    return n.secrets


def seal(n: Notifications, clear: str) -> StoredSecret:
    return StoredSecret(box(n).seal(clear), sealed=True)


def signing_secret(n: Notifications, subscription_id: str, stored: StoredSecret) -> str:
    """The clear secret to sign with. SecretUnreadable naming the webhook and the fix."""
    if not stored.sealed:
        return stored.value
    try:
        return box(n).open(stored.value)
    except Unavailable as exc:
        raise SecretUnreadable(
            f"the signing secret of webhook {subscription_id} cannot be read: {exc.message}",
            fix=exc.fix,
        ) from None


async def seal_clear_one(n: Notifications, subscription_id: str, stored: StoredSecret) -> bool:
    """Seal one clear secret in place (compare-and-set); True if this call sealed it."""
    if stored.sealed:
        return False
    return await n.store.replace_secret(subscription_id, stored, box(n).seal(stored.value))


async def seal_all(store: WebhookStore, sealer: SecretBox, *, rotate: bool) -> SealReport:
    """Seal every clear secret; with ``rotate``, also seal every sealed one again under the
    newest key (MultiFernet's rotate: the secret is unchanged, receivers notice nothing).
    Without it, each sealed one is checked to open. A secret changed meanwhile (removed, or
    sealed by another process) is left to that change."""
    sealed = resealed = kept = 0
    unreadable: list[str] = []
    for subscription_id, stored in await store.secrets():
        try:
            if not stored.sealed:
                new = sealer.seal(stored.value)
            elif rotate:
                new = sealer.reseal(stored.value)
            else:
                sealer.open(stored.value)
                kept += 1
                continue
        except SecretUnreadable:
            unreadable.append(subscription_id)
            continue
        if not await store.replace_secret(subscription_id, stored, new):
            continue
        if stored.sealed:
            resealed += 1
        else:
            sealed += 1
    return SealReport(sealed, resealed, kept, tuple(unreadable))
