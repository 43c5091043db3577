"""In-memory users, teams, queues and API tokens (twin of adapters/postgres/policy.py)."""

from __future__ import annotations

import builtins
from dataclasses import replace
from datetime import datetime

from adapters.memory.db import Tx, require
from domain.auth import ApiToken, Role, User
from domain.errors import NotFound
from domain.fleet import Queue, Team


class MemoryTokenRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, token: ApiToken) -> None:
        require(self._tx, "users", token.name, "user")
        await self._tx.insert("api_tokens", token, f"token {token.id}")

    async def by_hash(self, token_hash: str) -> ApiToken | None:
        found: ApiToken | None = self._tx.find("api_tokens", "token_hash", token_hash)
        return found

    async def get(self, token_id: str) -> ApiToken | None:
        found: ApiToken | None = self._tx.get("api_tokens", token_id)
        return found

    async def list(self, user: str | None = None) -> builtins.list[ApiToken]:
        rows: list[ApiToken] = self._tx.select(
            "api_tokens", lambda t: user is None or t.name == user
        )
        return sorted(rows, key=lambda t: (t.name, t.created_at, t.id))

    async def live_admin_tokens(self, now: datetime) -> builtins.list[ApiToken]:
        await self._tx.lock(("api_tokens", "admins", None))  # one admin revocation at a time

        def admin(t: ApiToken) -> bool:
            user: User | None = self._tx.get("users", t.name)
            return user is not None and user.role == Role.ADMIN and not user.disabled

        return [t for t in await self.list() if t.usable(now) and admin(t)]

    async def revoke(self, token_id: str, by: str, now: datetime) -> ApiToken | None:
        await self._tx.lock(("api_tokens", "pk", token_id))
        token: ApiToken | None = self._tx.get("api_tokens", token_id)
        if token is None or token.revoked:
            return token
        token = replace(token, revoked_at=now, revoked_by=by)
        self._tx.write("api_tokens", token)
        return token

    async def touch(self, token_id: str, now: datetime) -> None:
        await self._tx.lock(("api_tokens", "pk", token_id))
        token: ApiToken | None = self._tx.get("api_tokens", token_id)
        if token is not None and token.needs_touch(now):
            self._tx.write("api_tokens", replace(token, last_used_at=now))

    async def count(self) -> int:
        return self._tx.count("api_tokens")


class MemoryPolicyRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def put_user(self, user: User) -> None:
        for team in user.teams:
            if self._tx.get("teams", team) is None:
                raise NotFound(f"team {team} does not exist", fix="create it: tp admin team add")
        await self._tx.lock(("users", "pk", user.name))
        old: User | None = self._tx.get("users", user.name)
        created = old.created_at if old is not None else user.created_at
        self._tx.write(
            "users", replace(user, teams=tuple(sorted(set(user.teams))), created_at=created)
        )

    async def user(self, name: str) -> User | None:
        found: User | None = self._tx.get("users", name)
        return found

    async def users(self) -> builtins.list[User]:
        rows: list[User] = self._tx.select("users", lambda u: True)
        return sorted(rows, key=lambda u: u.name)

    async def enabled_admins(self) -> builtins.list[User]:
        await self._tx.lock(("users", "admins", None))  # one change of the admins at a time
        return [u for u in await self.users() if u.role == Role.ADMIN and not u.disabled]

    async def put_team(self, team: Team) -> None:
        await self._tx.lock(("teams", "pk", team.name))
        if self._tx.get("teams", team.name) is None:
            self._tx.write("teams", team)

    async def teams(self) -> builtins.list[Team]:
        rows: list[Team] = self._tx.select("teams", lambda t: True)
        return sorted(rows, key=lambda t: t.name)

    async def put_queue(self, queue: Queue) -> None:
        if self._tx.get("teams", queue.team) is None:
            raise NotFound(f"team {queue.team} does not exist", fix="create it: tp admin team add")
        await self._tx.lock(("queues", "pk", queue.name))
        self._tx.write("queues", queue)

    async def queue(self, name: str) -> Queue | None:
        found: Queue | None = self._tx.get("queues", name)
        return found

    async def queues(self) -> builtins.list[Queue]:
        rows: list[Queue] = self._tx.select("queues", lambda q: True)
        return sorted(rows, key=lambda q: q.name)
