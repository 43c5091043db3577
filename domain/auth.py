"""Users, principals and roles. A token names its user; the role and teams are the user's.
Tokens are stored only as their sha256 hash."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


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
    revoked: bool = False


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: a user's name, role and teams, as read with its token."""

    name: str
    role: Role
    teams: tuple[str, ...] = ()

    @property
    def can_submit(self) -> bool:
        return self.role in (Role.ADMIN, Role.OPERATOR, Role.MEMBER)

    @property
    def sees_all_jobs(self) -> bool:
        return self.role in (Role.ADMIN, Role.OPERATOR, Role.VIEWER)
