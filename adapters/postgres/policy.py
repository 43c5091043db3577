"""Users (with their team memberships), teams, queues and API tokens."""

from __future__ import annotations

import builtins
from datetime import datetime

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.rows import fetch_one, insert_new
from adapters.postgres.tables import api_tokens, queues, teams
from domain.auth import LAST_USED_PRECISION, ApiToken, User
from domain.errors import NotFound
from domain.fleet import Queue, Team

_TEAMS_FOUND = text("SELECT name FROM teams WHERE name = ANY(CAST(:names AS text[]))")
# the user row (created_at is kept from its creation), then exactly the given memberships
_PUT_USER = text(
    "WITH u AS ("
    "  INSERT INTO users (name, role, created_at, disabled) "
    "  VALUES (:name, :role, coalesce(CAST(:created_at AS timestamptz), now()), :disabled) "
    "  ON CONFLICT (name) DO UPDATE SET role = excluded.role, disabled = excluded.disabled "
    "  RETURNING name), "
    "gone AS (DELETE FROM team_members WHERE user_name = :name "
    "         AND team <> ALL(CAST(:teams AS text[]))) "
    "INSERT INTO team_members (user_name, team) "
    "SELECT u.name, t FROM u CROSS JOIN unnest(CAST(:teams AS text[])) AS t "
    "ON CONFLICT DO NOTHING"
)
_USERS = (
    "SELECT u.name, u.role, u.created_at, u.disabled, "
    "ARRAY(SELECT m.team FROM team_members m WHERE m.user_name = u.name "
    '      ORDER BY m.team COLLATE "C") '
    "AS teams FROM users u "
)
_USER = text(_USERS + "WHERE u.name = :name")
_ALL_USERS = text(_USERS + 'ORDER BY u.name COLLATE "C"')
# rows locked (FOR UPDATE): a second change of users waits, then re-reads them (read committed
# re-checks the WHERE on the row a racing transaction committed: a demoted admin drops out)
_ENABLED_ADMINS = text(
    _USERS + "WHERE u.role = 'admin' AND NOT u.disabled "
    'ORDER BY u.name COLLATE "C" FOR UPDATE OF u'
)

_PUT_TEAM = pg_insert(teams).on_conflict_do_nothing()
_ALL_TEAMS = select(teams.c.name).order_by(teams.c.name.collate("C"))

# INSERT … SELECT FROM teams: no row when the team is missing (NotFound without an error that
# would abort the transaction)
_PUT_QUEUE = text(
    "INSERT INTO queues (name, team, priority, gpu_quota, job_quota, max_attempts) "
    "SELECT :name, t.name, :priority, :gpu_quota, :job_quota, :max_attempts "
    "FROM teams t WHERE t.name = :team "
    "ON CONFLICT (name) DO UPDATE SET team = excluded.team, priority = excluded.priority, "
    "gpu_quota = excluded.gpu_quota, job_quota = excluded.job_quota, "
    "max_attempts = excluded.max_attempts "
    "RETURNING name"
).bindparams(
    bindparam("gpu_quota", type_=queues.c.gpu_quota.type),
    bindparam("job_quota", type_=queues.c.job_quota.type),
    bindparam("max_attempts", type_=queues.c.max_attempts.type),
)
_QUEUE = select(queues).where(queues.c.name == bindparam("name"))
_ALL_QUEUES = select(queues).order_by(queues.c.name.collate("C"))

_TOKEN_ORDER = (api_tokens.c.name.collate("C"), api_tokens.c.created_at, api_tokens.c.id)
_ALL_TOKENS = select(api_tokens).order_by(*_TOKEN_ORDER)
_TOKENS_OF = (
    select(api_tokens).where(api_tokens.c.name == bindparam("name")).order_by(*_TOKEN_ORDER)
)
# rows locked (FOR UPDATE): a second revocation of an admin's token waits, then re-reads them
_LIVE_ADMIN_TOKENS = text(
    "SELECT t.* FROM api_tokens t JOIN users u ON u.name = t.name "
    "WHERE u.role = 'admin' AND NOT u.disabled AND t.revoked_at IS NULL "
    "AND (t.expires_at IS NULL OR t.expires_at > :now) "
    'ORDER BY t.name COLLATE "C", t.created_at, t.id FOR UPDATE OF t'
)
_REVOKE = text(
    "UPDATE api_tokens SET revoked_at = :now, revoked_by = :by "
    "WHERE id = :id AND revoked_at IS NULL"
)
# a use is written only when the stored one is a minute old: not a write per request
_TOUCH = text(
    "UPDATE api_tokens SET last_used_at = :now WHERE id = :id "
    "AND (last_used_at IS NULL "
    "     OR last_used_at <= CAST(:now AS timestamptz) - CAST(:every AS interval))"
)


def _no_team(name: str) -> NotFound:
    return NotFound(
        f"team {name} does not exist", fix="create it first: tp admin team add", field="team"
    )


class PostgresPolicyRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def put_user(self, user: User) -> None:
        wanted = sorted(set(user.teams))
        with translated(f"store user {user.name}"):
            if wanted:
                found = set((await self._conn.execute(_TEAMS_FOUND, {"names": wanted})).scalars())
                missing = [t for t in wanted if t not in found]
                if missing:
                    raise _no_team(missing[0])
            await self._conn.execute(
                _PUT_USER,
                {
                    "name": user.name,
                    "role": user.role.value,
                    "created_at": user.created_at,
                    "disabled": user.disabled,
                    "teams": wanted,
                },
            )

    async def user(self, name: str) -> User | None:
        with translated(f"get user {name}"):
            row = (await self._conn.execute(_USER, {"name": name})).mappings().first()
        return codec.user_from_row(row) if row else None

    async def users(self) -> builtins.list[User]:
        with translated("list users"):
            rows = (await self._conn.execute(_ALL_USERS)).mappings().all()
        return [codec.user_from_row(r) for r in rows]

    async def enabled_admins(self) -> builtins.list[User]:
        with translated("lock the enabled admins"):
            rows = (await self._conn.execute(_ENABLED_ADMINS)).mappings().all()
        return [codec.user_from_row(r) for r in rows]

    async def put_team(self, team: Team) -> None:
        with translated(f"store team {team.name}"):
            await self._conn.execute(_PUT_TEAM, {"name": team.name})

    async def teams(self) -> builtins.list[Team]:
        with translated("list teams"):
            names = (await self._conn.execute(_ALL_TEAMS)).scalars().all()
        return [Team(n) for n in names]

    async def put_queue(self, queue: Queue) -> None:
        with translated(f"store queue {queue.name}"):
            done = (await self._conn.execute(_PUT_QUEUE, codec.queue_values(queue))).first()
        if done is None:
            raise _no_team(queue.team)

    async def queue(self, name: str) -> Queue | None:
        with translated(f"get queue {name}"):
            row = (await self._conn.execute(_QUEUE, {"name": name})).mappings().first()
        return codec.queue_from_row(row) if row else None

    async def queues(self) -> builtins.list[Queue]:
        with translated("list queues"):
            rows = (await self._conn.execute(_ALL_QUEUES)).mappings().all()
        return [codec.queue_from_row(r) for r in rows]


class PostgresTokenRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, token: ApiToken) -> None:
        await insert_new(self._conn, api_tokens, codec.token_values(token), f"token {token.id}")

    async def by_hash(self, token_hash: str) -> ApiToken | None:
        with translated("look up a token"):
            row = await fetch_one(self._conn, api_tokens, "token_hash", token_hash)
        return codec.token_from_row(row) if row else None

    async def get(self, token_id: str) -> ApiToken | None:
        with translated(f"get token {token_id}"):
            row = await fetch_one(self._conn, api_tokens, "id", token_id)
        return codec.token_from_row(row) if row else None

    async def list(self, user: str | None = None) -> builtins.list[ApiToken]:
        stmt = _ALL_TOKENS if user is None else _TOKENS_OF
        with translated("list tokens"):
            rows = (await self._conn.execute(stmt, {"name": user})).mappings().all()
        return [codec.token_from_row(r) for r in rows]

    async def live_admin_tokens(self, now: datetime) -> builtins.list[ApiToken]:
        with translated("lock the admins' tokens"):
            rows = (await self._conn.execute(_LIVE_ADMIN_TOKENS, {"now": now})).mappings().all()
        return [codec.token_from_row(r) for r in rows]

    async def revoke(self, token_id: str, by: str, now: datetime) -> ApiToken | None:
        with translated(f"revoke token {token_id}"):
            await self._conn.execute(_REVOKE, {"id": token_id, "by": by, "now": now})
        return await self.get(token_id)

    async def touch(self, token_id: str, now: datetime) -> None:
        with translated(f"record a use of token {token_id}"):
            await self._conn.execute(
                _TOUCH, {"id": token_id, "now": now, "every": LAST_USED_PRECISION}
            )

    async def count(self) -> int:
        with translated("count tokens"):
            n = (await self._conn.execute(select(func.count()).select_from(api_tokens))).scalar()
        return int(n or 0)
