"""The webhooks section of the settings (docs/notifications.md): how the API processes deliver
job state changes. Loaded as ``Settings.webhooks``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from msgspec import Meta

from application.context import Notifications
from domain.secret_ports import SecretBox
from domain.webhook_destinations import Destinations
from domain.webhook_ports import WebhookSender, WebhookStore
from domain.webhooks import Retry
from entrypoints.settings_loader import Positive, SettingError, section, var

Interval = Annotated[float, Meta(gt=0, le=86400)]


def _private(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("allow", "refuse"):
        raise SettingError(
            f"TUNEPLANE_WEBHOOK_PRIVATE={raw!r} is neither allow nor refuse",
            "set refuse where no receiver lives on a private network (10/8, 172.16/12, "
            "192.168/16, 100.64/10, fc00::/7), allow (the default) where some do",
        )
    return value == "allow"


def _on_off(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("on", "off"):
        raise SettingError(
            f"TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK={raw!r} is neither on nor off",
            "set on only where receivers on the API host's loopback are meant (tests, one host)",
        )
    return value == "on"


@section
@dataclass(frozen=True)
class WebhookSettings:
    timeout_seconds: Interval = var(
        10.0,
        env="TUNEPLANE_WEBHOOK_TIMEOUT_SECONDS",
        section="webhooks",
        doc="one delivery's limit, from connecting to the receiver's answer; over it, the "
        "delivery failed and is retried",
    )
    max_attempts: Positive = var(
        12,
        env="TUNEPLANE_WEBHOOK_MAX_ATTEMPTS",
        section="webhooks",
        doc="sends of one change before it is given up (`dead`, shown by `tp webhook ls`)",
    )
    backoff_seconds: Interval = var(
        10.0,
        env="TUNEPLANE_WEBHOOK_BACKOFF_SECONDS",
        section="webhooks",
        doc="the wait after a first failed send; doubled after each next one, with jitter "
        "(½ to 1 of it)",
    )
    backoff_max_seconds: Interval = var(
        3600.0,
        env="TUNEPLANE_WEBHOOK_BACKOFF_MAX_SECONDS",
        section="webhooks",
        doc="the longest wait between two sends of one change",
    )
    poll_seconds: Interval = var(
        5.0,
        env="TUNEPLANE_WEBHOOK_POLL_SECONDS",
        section="webhooks",
        doc="how often the outbox is read without a wake-up (a new change wakes it at once "
        "where `TUNEPLANE_SIGNALS` is on; retries fall due on this poll)",
    )
    allow_loopback: bool = var(
        False,
        env="TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK",
        section="webhooks",
        parse=_on_off,
        default_doc="`off`",
        doc="`on`: webhooks may name this host's loopback (`127.0.0.0/8`, `::1`, `localhost`), "
        "over http too; off, users cannot make the API call its own host's services",
    )
    allow_private: bool = var(
        True,
        env="TUNEPLANE_WEBHOOK_PRIVATE",
        section="webhooks",
        parse=_private,
        default_doc="`allow`",
        doc="`refuse`: webhooks may not go to private networks (`10/8`, `172.16/12`, "
        "`192.168/16`, `100.64/10`, `fc00::/7`), whether named by address or by a name that "
        "resolves there when sent; link-local (cloud metadata), multicast, reserved addresses "
        "are always refused (notifications.md#where-webhooks-may-go)",
    )

    secrets_key_file: Path | None = var(
        None,
        env="TUNEPLANE_SECRETS_KEY_FILE",
        section="webhooks",
        default_doc="unset → `<state>/secrets.key`",
        doc="the key file webhook signing secrets are sealed under (Fernet keys, one a line, "
        "newest first; `tp admin secrets keygen`): give every API process the same file, and "
        "keep a copy apart from the database's backups (notifications.md#the-secret-at-rest)",
    )

    def destinations(self) -> Destinations:
        """The policy the sender judges every resolved address by."""
        return Destinations(allow_loopback=self.allow_loopback, allow_private=self.allow_private)

    def key_path(self, state_dir: Path) -> Path:
        """Where the secrets key file is (``<state>/secrets.key`` unless set)."""
        return (self.secrets_key_file or state_dir / "secrets.key").expanduser()

    def notifications(
        self,
        store: WebhookStore,
        sender: WebhookSender,
        jitter: Callable[[], float],
        secrets: SecretBox | None = None,
    ) -> Notifications:
        return Notifications(
            store=store,
            sender=sender,
            retry=Retry(
                max_attempts=self.max_attempts,
                base=timedelta(seconds=self.backoff_seconds),
                cap=timedelta(seconds=max(self.backoff_max_seconds, self.backoff_seconds)),
            ),
            timeout=timedelta(seconds=self.timeout_seconds),
            poll=timedelta(seconds=self.poll_seconds),
            allow_loopback=self.allow_loopback,
            allow_private=self.allow_private,
            jitter=jitter,
            secrets=secrets,
        )
