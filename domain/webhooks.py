"""Webhook notifications of job state changes (docs/notifications.md): what a subscription is,
the checks on its URL, the body each format sends, the signature and the back-off schedule.

Pure: the clock, the secret and the jitter come in as arguments."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from domain.errors import InvalidInput
from domain.lifecycle import JobState
from domain.webhook_destinations import Destinations, ip_literal

MAX_URL_LENGTH = 2048
MAX_SUBSCRIPTIONS_PER_OWNER = 50  # each is a row the outbox trigger matches per job event
SIGNATURE_HEADER = "TunePlane-Signature"
EVENT_ID_HEADER = "TunePlane-Event-Id"
SUBSCRIPTION_HEADER = "TunePlane-Webhook-Id"
REPLAY_TOLERANCE = timedelta(minutes=5)  # what receivers are told to accept (docs)
STATE_CHANGED = "job.state_changed"
TEST_EVENT = "webhook.test"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


@dataclass(frozen=True, slots=True)
class StoredSecret:
    """A webhook's signing secret as the store keeps it: sealed (``domain.secret_ports``), or
    still clear where a row was written before migration 0027 (or by an older API process);
    the API seals a clear one when it starts and where a delivery meets one. Never printed:
    its repr hides the value."""

    value: str = field(repr=False)
    sealed: bool = True

    def __repr__(self) -> str:
        return f"StoredSecret({'sealed' if self.sealed else 'clear'}, <hidden>)"


class Scope(StrEnum):
    USER = "user"  # the jobs a user owns
    TEAM = "team"  # the jobs in any queue of a team
    QUEUE = "queue"  # the jobs in one queue


class Format(StrEnum):
    TUNEPLANE = "tuneplane"  # the JSON event below
    SLACK = "slack"  # {"text": "..."}: a Slack (or Mattermost, Rocket.Chat) incoming webhook


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # not yet delivered; due at next_at
    DELIVERED = "delivered"  # the receiver answered 2xx
    DEAD = "dead"  # refused or unreachable max_attempts times


@dataclass(frozen=True, slots=True)
class Subscription:
    id: str
    owner: str  # who made it (it is theirs to list, test, remove)
    scope: Scope
    target: str  # the user, team or queue named by scope
    url: str
    states: tuple[JobState, ...]  # empty: every state
    format: Format
    created_at: datetime
    secret: StoredSecret  # signs every body; sealed at rest, shown in clear once, when made


@dataclass(frozen=True, slots=True)
class SubscriptionSummary:
    """A subscription as listed (never its secret), with its deliveries so far."""

    subscription: Subscription
    pending: int = 0
    delivered: int = 0
    dead: int = 0
    last_status: int | None = None
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class JobChange:
    """One job state change, as the outbox keeps it (the job's row at that moment)."""

    job_id: str
    seq: int  # the job's event number (1: committed), as in `tp job events`
    state: JobState
    previous: JobState | None
    reason: str
    owner: str
    queue: str
    at: datetime

    @property
    def event_id(self) -> str:
        """Unique per job state change, the same on every resend: receivers' idempotency key."""
        return f"{self.job_id}.{self.seq}"


@dataclass(frozen=True, slots=True)
class Delivery:
    """An outbox row claimed for sending: the change, and where and how to send it."""

    id: int
    subscription_id: str
    url: str
    secret: StoredSecret
    format: Format
    change: JobChange
    attempts: int  # failed sends so far


@dataclass(frozen=True, slots=True)
class SendResult:
    status: int | None  # the receiver's HTTP status; None: no answer (refused, timed out)
    error: str = ""  # why it failed, when it did (bounded, one line)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class Retry:
    """How deliveries are retried: exponential back-off with jitter, ``max_attempts`` in all."""

    max_attempts: int = 12
    base: timedelta = timedelta(seconds=10)
    cap: timedelta = timedelta(hours=1)

    def delay(self, failed: int, jitter: float) -> timedelta:
        """The wait after the ``failed``-th failed send (1, 2, …): ``base · 2^(failed-1)``, at
        most ``cap``, scaled into [½, 1] by ``jitter`` ∈ [0, 1) so retries spread out."""
        exponent = min(max(failed, 1) - 1, 40)
        full: timedelta = min(self.base * (2**exponent), self.cap)
        return full * (0.5 + 0.5 * min(max(jitter, 0.0), 1.0))

    def gives_up(self, failed: int) -> bool:
        return failed >= self.max_attempts


def check_url(url: object, *, allow_loopback: bool, allow_private: bool = True) -> str:
    """``url`` if a webhook may be sent to it: https (http only to a loopback address, and
    loopback only where the operator allows it), a host, no credentials, no fragment, at most
    2,048 characters, nothing but printable ASCII, and a literal address only where the
    destination policy allows it (domain/webhook_destinations.py; a name's addresses are
    judged when it is sent to). InvalidInput naming the problem otherwise."""
    field = "url"
    if not isinstance(url, str):
        raise InvalidInput("the webhook URL is not text", fix="give an https:// URL", field=field)
    if len(url) > MAX_URL_LENGTH:
        raise InvalidInput(
            f"the webhook URL is {len(url)} characters long, over {MAX_URL_LENGTH}",
            fix="give a shorter URL", field=field,
        )  # fmt: skip
    if not url.isascii() or any(not 0x21 <= ord(c) <= 0x7E for c in url):
        raise InvalidInput(
            "the webhook URL holds a space, a control character (NUL, CR, LF …) or non-ASCII",
            fix="percent-encode it (an internationalised host name in its xn-- form)",
            field=field,
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(
            f"the webhook URL cannot be parsed: {exc}", fix="give https://HOST/PATH", field=field
        ) from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise InvalidInput(
            f"the webhook URL {url!r} is not an https:// URL with a host",
            fix="give https://HOST/PATH", field=field,
        )  # fmt: skip
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(
            "the webhook URL holds credentials (user:password@); they would be stored and shown",
            fix="leave them out: receivers authenticate the body by its signature",
            field=field,
        )
    if parts.fragment or url.endswith("#"):
        raise InvalidInput(
            "the webhook URL has a #fragment, which is never sent", fix="leave it out",
            field=field,
        )  # fmt: skip
    if port == 0:
        raise InvalidInput("the webhook URL's port is 0", fix="give a port 1-65535", field=field)
    _check_host(parts.hostname, Destinations(allow_loopback, allow_private))
    loopback = is_loopback(parts.hostname)
    if loopback and not allow_loopback:
        raise InvalidInput(
            f"the webhook URL's host {parts.hostname!r} is this control plane's own loopback",
            fix="give a host the control plane reaches over the network (an operator allows "
            "loopback receivers with TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK=on)",
            field=field,
        )
    if parts.scheme == "http" and not loopback:
        raise InvalidInput(
            f"the webhook URL {url!r} is plain http: its body would cross the network unsealed",
            fix="give an https:// URL", field=field,
        )  # fmt: skip
    return url


NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")


def _check_host(host: str, destinations: Destinations) -> None:
    """A literal address the policy allows, or a name that is no IPv4 address in disguise
    (``2130706433``, ``127.1``, ``0x7f.0.0.1``: resolvers read them as addresses)."""
    literal = ip_literal(host)
    if literal is not None:
        verdict = destinations.judge(literal)
        if not verdict.allowed:
            raise InvalidInput(
                f"the webhook URL's host {verdict.reason}", fix=verdict.fix, field="url"
            )
        return
    if NUMERIC_LABEL.fullmatch(host.lower().rstrip(".").rpartition(".")[2]):
        raise InvalidInput(
            f"the webhook URL's host {host!r} is neither a host name (whose last label is "
            "never a number) nor an IPv4 address written as four decimal numbers",
            fix="give a host name, or the address as a.b.c.d", field="url",
        )  # fmt: skip


def is_loopback(host: str) -> bool:
    """A loopback host name or address (127.0.0.0/8, ::1, localhost)."""
    name = host.strip("[]").lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def parse_states(values: Iterable[object]) -> tuple[JobState, ...]:
    """Job states named by their values, in the lifecycle's order, each once."""
    wanted: set[JobState] = set()
    for value in values:
        try:
            wanted.add(JobState(str(value).strip().lower()))
        except ValueError:
            raise InvalidInput(
                f"{str(value)[:40]!r} is not a job state",
                fix="give some of: " + ", ".join(s.value for s in JobState),
                field="states",
            ) from None
    return tuple(s for s in JobState if s in wanted)


def wants(subscription: Subscription, state: JobState) -> bool:
    return not subscription.states or state in subscription.states


def event(change: JobChange) -> dict[str, object]:
    """The ``tuneplane`` format's event (docs/notifications.md#the-event)."""
    return {
        "id": change.event_id,
        "type": STATE_CHANGED,
        "created_at": change.at.isoformat(),
        "job": {
            "id": change.job_id,
            "owner": change.owner,
            "queue": change.queue,
            "state": change.state.value,
            "previous_state": change.previous.value if change.previous else None,
            "reason": change.reason,
            "seq": change.seq,
        },
    }


def ping_event(event_id: str, subscription: Subscription, at: datetime) -> dict[str, object]:
    """What `tp webhook test` sends: no job, only proof the receiver and the secret work."""
    return {
        "id": event_id,
        "type": TEST_EVENT,
        "created_at": at.isoformat(),
        "webhook": {"id": subscription.id, "scope": subscription.scope.value,
                    "target": subscription.target},
    }  # fmt: skip


def slack_text(payload: dict[str, object]) -> str:
    job = payload.get("job")
    if not isinstance(job, dict):
        return f"TunePlane: test of webhook {payload.get('id')}: this receiver works."
    text = (
        f"TunePlane: job {job['id']} ({job['owner']}, queue {job['queue']}) is now *{job['state']}*"
    )
    if job.get("previous_state"):
        text += f" (was {job['previous_state']})"
    return text + (f": {job['reason']}" if job.get("reason") else "")


def body(payload: dict[str, object], fmt: Format) -> bytes:
    """The bytes sent (and signed): compact JSON, keys sorted."""
    value: dict[str, object] = payload if fmt is Format.TUNEPLANE else {"text": slack_text(payload)}
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def signature(secret: str, timestamp: int, payload: bytes) -> str:
    """HMAC-SHA256 of ``"{timestamp}." + body`` with the secret, hex."""
    message = str(timestamp).encode() + b"." + payload
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, payload: bytes) -> str:
    """``t=<unix seconds>,v1=<hex>``."""
    return f"t={timestamp},v1={signature(secret, timestamp, payload)}"


def verify(
    secret: str, header: str, payload: bytes, now: int, tolerance: timedelta = REPLAY_TOLERANCE
) -> bool:
    """What a receiver does (docs/notifications.md#verifying-a-delivery): the header's ``t``
    is within ``tolerance`` of ``now`` and one of its ``v1`` is the body's signature."""
    fields = [part.partition("=") for part in header.split(",")]
    stamps = [v for k, _, v in fields if k.strip() == "t"]
    given = [v.strip() for k, _, v in fields if k.strip() == "v1"]
    if len(stamps) != 1 or not stamps[0].strip().isdigit() or not given:
        return False
    timestamp = int(stamps[0])
    if abs(now - timestamp) > tolerance.total_seconds():
        return False
    expected = signature(secret, timestamp, payload)
    return any(hmac.compare_digest(expected, g) for g in given)


def headers(
    secret: str, event_id: str, subscription_id: str, timestamp: int, payload: bytes
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "TunePlane-Webhooks/1",
        SIGNATURE_HEADER: signature_header(secret, timestamp, payload),
        EVENT_ID_HEADER: event_id,
        SUBSCRIPTION_HEADER: subscription_id,
    }


def one_line(text: str, limit: int = 500) -> str:
    """An error as stored and shown: one line, bounded."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
