"""Users, teams and queues, and the submission-time queue policy (``choose_queue``).

Who may do what: admins manage users and mint tokens for anyone; any user may mint a token for
themselves; admins and operators manage teams and queues; everyone may list queues and teams.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from application.auth import create_token
from application.context import Context
from domain.auth import Principal, Role, User
from domain.catalog import check_name
from domain.coordination_ports import TOKENS_REVOKED
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from domain.fleet import Queue, Team
from domain.unit_of_work import FleetUnit

MAX_TEAMS_PER_USER = 64


class Keep(Enum):
    """A field an update leaves unchanged (``None`` often means something, e.g. "no cap")."""

    KEEP = "keep"


KEEP = Keep.KEEP


def require(principal: Principal, roles: Iterable[Role], what: str) -> None:
    allowed = tuple(roles)
    if principal.role not in allowed:
        who = " or ".join(f"an {r}" if r[0] in "aeiou" else f"a {r}" for r in allowed)
        raise Forbidden(
            f"user {principal.name} has role {principal.role}, which may not {what}",
            fix=f"ask {who}",
        )


ADMIN = (Role.ADMIN,)
OPERATORS = (Role.ADMIN, Role.OPERATOR)


def _check_teams(teams: Iterable[str], field: str) -> tuple[str, ...]:
    out = tuple(sorted(set(teams)))
    if len(out) > MAX_TEAMS_PER_USER:
        raise InvalidInput(
            f"{len(out)} teams given; a user is in at most {MAX_TEAMS_PER_USER}",
            fix="give fewer teams",
            field=field,
        )
    for team in out:
        check_name(team, "team name", field)
    return out


async def _require_teams(uow: FleetUnit, teams: Iterable[str], field: str) -> None:
    known = {t.name for t in await uow.policy.teams()}
    missing = sorted(set(teams) - known)
    if missing:
        raise NotFound(
            f"no team {', '.join(missing)}",
            fix=f"create it first: `tp admin team add {missing[0]}` (teams: "
            + (", ".join(sorted(known)) or "none")
            + ")",
            field=field,
        )


# users


async def add_user(
    ctx: Context, principal: Principal, name: str, role: Role, teams: Iterable[str] = ()
) -> User:
    """Create a user (admins only). Every team must exist; an existing name is a Conflict."""
    require(principal, ADMIN, "add users")
    check_name(name, "user name", "name")
    team_list = _check_teams(teams, "teams")
    user = User(name, Role(role), team_list, created_at=ctx.clock.now())
    async with ctx.units.fleet() as uow:
        if await uow.policy.user(name) is not None:
            raise Conflict(
                f"user {name} already exists",
                fix=f"change it with `tp admin user set {name}`, or choose another name",
                field="name",
            )
        await _require_teams(uow, team_list, "teams")
        await uow.policy.put_user(user)
        await uow.commit()
    return user


async def update_user(
    ctx: Context,
    principal: Principal,
    name: str,
    *,
    role: Role | None = None,
    teams: Iterable[str] | None = None,
    add_teams: Iterable[str] = (),
    remove_teams: Iterable[str] = (),
    disabled: bool | None = None,
) -> User:
    """Change a user (admins only): its role; its teams (``teams`` replaces the list, then
    ``add_teams`` and ``remove_teams`` apply); or whether it is disabled. It takes effect on
    the next request: the caller's API process drops its token cache (the route does), the
    others on the TOKENS_REVOKED signal sent here, as for a revoked token."""
    require(principal, ADMIN, "change users")
    replace_with = _check_teams(teams, "teams") if teams is not None else None
    added = _check_teams(add_teams, "add_teams")
    removed = set(_check_teams(remove_teams, "remove_teams"))
    if principal.name == name and (disabled or (role is not None and role is not Role.ADMIN)):
        raise InvalidInput(
            "an admin may not disable or demote themselves",
            fix="ask another admin to do it",
            field="role" if role is not None else "disabled",
        )
    async with ctx.units.fleet() as uow:
        # locked first, then the user read: changes of users take turns, so two admins
        # demoting or disabling each other at once cannot both pass
        admins = await uow.policy.enabled_admins()
        old = await uow.policy.user(name)
        if old is None:
            raise NotFound(
                f"no user {name}", fix="see `tp admin user ls`, or add it with `tp admin user add`"
            )
        base = replace_with if replace_with is not None else old.teams
        new_teams = _check_teams((t for t in (*base, *added) if t not in removed), "teams")
        await _require_teams(uow, set(new_teams) - set(old.teams), "teams")
        user = dataclasses.replace(
            old,
            role=Role(role) if role is not None else old.role,
            teams=new_teams,
            disabled=disabled if disabled is not None else old.disabled,
        )
        _keep_an_admin(old, user, admins)
        await uow.policy.put_user(user)
        await uow.commit()
    await ctx.signals.notify(TOKENS_REVOKED)  # cached principals carry the old role and teams
    return user


def _enabled_admin(user: User) -> bool:
    return user.role is Role.ADMIN and not user.disabled


def _keep_an_admin(old: User, new: User, admins: list[User]) -> None:
    """Refuse a change that leaves no enabled admin (``admins``: the enabled admins, locked)."""
    if not _enabled_admin(old) or _enabled_admin(new):
        return
    if any(a.name != old.name for a in admins):
        return
    what = "disabled" if new.disabled else f"given role {new.role}"
    raise Conflict(
        f"user {old.name} is the last enabled admin; {what}, nobody could manage users and "
        "tokens any more",
        fix=f"make another user an admin first (`tp admin user set OTHER --role admin`), then "
        f"change {old.name}",
        field="disabled" if new.disabled else "role",
    )


async def list_users(ctx: Context, principal: Principal) -> list[User]:
    require(principal, OPERATORS, "list users")
    async with ctx.units.fleet() as uow:
        return await uow.policy.users()


async def create_token_for(ctx: Context, principal: Principal, user: str) -> str:
    """A new token for ``user``: admins for anyone, anyone else only for themselves."""
    if principal.name != user:
        require(principal, ADMIN, "create tokens for other users")
    return await create_token(ctx, user)


# teams


async def add_team(ctx: Context, principal: Principal, name: str) -> Team:
    """Create a team (admins and operators). Adding an existing team is a Conflict."""
    require(principal, OPERATORS, "add teams")
    check_name(name, "team name", "name")
    async with ctx.units.fleet() as uow:
        if name in {t.name for t in await uow.policy.teams()}:
            raise Conflict(f"team {name} already exists", fix="choose another name", field="name")
        await uow.policy.put_team(Team(name))
        await uow.commit()
    return Team(name)


async def list_teams(ctx: Context) -> list[Team]:
    async with ctx.units.fleet() as uow:
        return await uow.policy.teams()


# queues


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """A queue with what its live reservations hold now."""

    queue: Queue
    gpus_in_use: int = 0
    jobs_in_use: int = 0


async def add_queue(ctx: Context, principal: Principal, queue: Queue) -> Queue:
    """Create a queue (admins and operators). Its team must exist; an existing name is a
    Conflict."""
    require(principal, OPERATORS, "add queues")
    queue.check()
    async with ctx.units.fleet() as uow:
        if await uow.policy.queue(queue.name) is not None:
            raise Conflict(
                f"queue {queue.name} already exists",
                fix=f"change it with `tp queue set {queue.name}`",
                field="name",
            )
        await _require_teams(uow, [queue.team], "team")
        await uow.policy.put_queue(queue)
        await uow.commit()
    return queue


async def update_queue(
    ctx: Context,
    principal: Principal,
    name: str,
    *,
    team: str | Keep = KEEP,
    priority: int | Keep = KEEP,
    gpu_quota: int | Keep | None = KEEP,
    job_quota: int | Keep | None = KEEP,
    max_attempts: int | Keep | None = KEEP,
) -> Queue:
    """Change some fields of a queue (admins and operators); ``None`` quota means no cap.
    Jobs already holding reservations keep them; the new quotas apply to later admissions, a
    new ``max_attempts`` to later submissions."""
    require(principal, OPERATORS, "change queues")
    async with ctx.units.fleet() as uow:
        old = await uow.policy.queue(name)
        if old is None:
            raise NotFound(f"no queue {name}", fix="see `tp queue ls`, or add it: `tp queue add`")
        queue = Queue(
            name,
            old.team if isinstance(team, Keep) else team,
            old.priority if isinstance(priority, Keep) else priority,
            old.gpu_quota if isinstance(gpu_quota, Keep) else gpu_quota,
            old.job_quota if isinstance(job_quota, Keep) else job_quota,
            old.max_attempts if isinstance(max_attempts, Keep) else max_attempts,
        ).check()
        if queue.team != old.team:
            await _require_teams(uow, [queue.team], "team")
        await uow.policy.put_queue(queue)
        await uow.commit()
    return queue


async def list_queues(ctx: Context) -> list[QueueUsage]:
    """Every queue, by name, with the GPUs and jobs its live reservations hold."""
    async with ctx.units.fleet() as uow:
        queues = await uow.policy.queues()
        live = await uow.reservations.live()
    gpus: dict[str, int] = {}
    jobs: dict[str, int] = {}
    for r in live:
        gpus[r.queue] = gpus.get(r.queue, 0) + r.gpus
        jobs[r.queue] = jobs.get(r.queue, 0) + 1
    return [QueueUsage(q, gpus.get(q.name, 0), jobs.get(q.name, 0)) for q in queues]


async def choose_queue(ctx: Context, principal: Principal, requested: str | None) -> Queue:
    """The queue a submission goes to. A named queue must exist and belong to one of the
    principal's teams (admins and operators may use any). With no name: ``default`` if the
    principal may use it, else their only usable queue, else InvalidInput asking for one."""
    async with ctx.units.fleet() as uow:
        queues = await uow.policy.queues()
        user = await uow.policy.user(principal.name)
    teams = set(user.teams) if user else set(principal.teams)
    privileged = principal.role in OPERATORS
    usable = [q for q in queues if privileged or q.team in teams]
    if requested is not None:
        found = next((q for q in queues if q.name == requested), None)
        if found is None:
            raise NotFound(
                f"no queue {requested}",
                fix="choose one of: "
                + (", ".join(q.name for q in usable) or "none")
                + " (see `tp queue ls`)",
                field="intent.queue",
            )
        if found not in usable:
            raise Forbidden(
                f"user {principal.name} is not in team {found.team}, which owns queue {found.name}",
                fix=f"ask an admin to add you to team {found.team} "
                f"(`tp admin user set {principal.name} --add-team {found.team}`), or choose "
                "another queue: " + (", ".join(q.name for q in usable) or "none"),
                field="intent.queue",
            )
        return found
    default = next((q for q in usable if q.name == "default"), None)
    if default is not None:
        return default
    if len(usable) == 1:
        return usable[0]
    raise InvalidInput(
        "no queue given and no single queue to default to"
        if usable
        else f"user {principal.name} may use no queue",
        fix="pass --queue, one of: " + ", ".join(q.name for q in usable)
        if usable
        else "ask an admin to add you to a team that owns a queue (`tp queue ls`)",
        field="intent.queue",
    )
