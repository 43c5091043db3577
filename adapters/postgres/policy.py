"""Users (with their team memberships), teams, queues and API tokens."""

from __future__ import annotations

import builtins

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.rows import fetch_one, insert_new
from adapters.postgres.tables import api_tokens, queues, teams
from domain.auth import ApiToken, User
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

    async def count(self) -> int:
        with translated("count tokens"):
            n = (await self._conn.execute(select(func.count()).select_from(api_tokens))).scalar()
        return int(n or 0)
