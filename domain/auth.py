"""Users, principals and roles. A token names its user; the role and teams are the user's.
Tokens are stored only as their sha256 hash."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from domain.errors import InvalidInput

# an expiry is 1 minute to 5 years ahead; a token without one never expires
MIN_TOKEN_LIFETIME = timedelta(minutes=1)
MAX_TOKEN_LIFETIME = timedelta(days=5 * 365)
MAX_LABEL_CHARS = 200
# last_used_at is written at most this often per token (a request does not write)
LAST_USED_PRECISION = timedelta(minutes=1)


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    MEMBER = "member"
    VIEWER = "viewer"


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: Role
    teams: tuple[str, ...] = ()
    created_at: datetime | None = None
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class ApiToken:
    id: str
    name: str  # the user it belongs to; the role is the user's (``User.role``)
    token_hash: str  # sha256 hex of the secret; the secret itself is never stored
    created_at: datetime
    label: str = ""  # what the token is for, the user's words
    expires_at: datetime | None = None  # None: never
    last_used_at: datetime | None = None  # to LAST_USED_PRECISION; None: never used
    revoked_at: datetime | None = None
    revoked_by: str | None = None  # the user who revoked it

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def usable(self, now: datetime) -> bool:
        """Neither revoked nor expired: it authenticates its user."""
        return not self.revoked and not self.expired(now)

    def needs_touch(self, now: datetime) -> bool:
        """Whether its last use is older than the precision kept (so it is to be written)."""
        return self.last_used_at is None or now - self.last_used_at >= LAST_USED_PRECISION


def token_expiry(
    now: datetime, *, in_seconds: int | None = None, at: datetime | None = None
) -> datetime | None:
    """When a new token expires: ``in_seconds`` from ``now`` (the server's clock, so a client's
    skew cannot shorten or stretch it) or ``at``; None (never) when neither is given. Between
    MIN_TOKEN_LIFETIME and MAX_TOKEN_LIFETIME ahead, else InvalidInput."""
    if in_seconds is not None and at is not None:
        raise InvalidInput(
            "expires_in_seconds and expires_at contradict",
            fix="give one of them",
            field="expires_at",
        )
    where = "expires_in_seconds"
    if at is not None:
        where = "expires_at"
        if at.tzinfo is None:
            raise InvalidInput(
                f"expiry {at.isoformat()} has no time zone",
                fix="give a time zone, e.g. 2027-01-31T00:00:00Z",
                field=where,
            )
        lifetime = at - now
    elif in_seconds is not None:  # capped first: timedelta overflows past ~2.7 million years
        lifetime = timedelta(seconds=max(min(in_seconds, 2**40), -(2**40)))
    else:
        return None
    if lifetime < MIN_TOKEN_LIFETIME:
        raise InvalidInput(
            "a token would expire at once or in the past"
            if lifetime <= timedelta(0)
            else "a token's lifetime is at least a minute",
            fix="give an expiry from 1 minute to 5 years ahead (e.g. --expires 30d)",
            field=where,
        )
    if lifetime > MAX_TOKEN_LIFETIME:
        raise InvalidInput(
            "a token's lifetime is at most 5 years",
            fix="give an expiry up to 5 years ahead (e.g. --expires 1y), or none: a token "
            "without --expires never expires and is revoked by hand",
            field=where,
        )
    return now + lifetime


def check_label(label: str) -> str:
    """A token's label: up to MAX_LABEL_CHARS printable characters."""
    if len(label) > MAX_LABEL_CHARS:
        raise InvalidInput(
            f"a label of {len(label)} characters is too long",
            fix=f"give at most {MAX_LABEL_CHARS} characters",
            field="label",
        )
    if any(not c.isprintable() for c in label):
        raise InvalidInput(
            "the label holds control characters", fix="give printable text", field="label"
        )
    return label


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: a user's name, role and teams, as read with its token."""

    name: str
    role: Role
    teams: tuple[str, ...] = ()
    # the token it authenticated with ("" where none, e.g. tests); not part of who it is
    token_id: str = field(default="", compare=False)

    @property
    def can_submit(self) -> bool:
        return self.role in (Role.ADMIN, Role.OPERATOR, Role.MEMBER)

    @property
    def sees_all_jobs(self) -> bool:
        return self.role in (Role.ADMIN, Role.OPERATOR, Role.VIEWER)
