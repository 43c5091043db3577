"""Users, teams, queues, tokens and the submission-time queue policy, over in-memory adapters."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from application import policy, submissions
from application.auth import authenticate, bootstrap_admin, create_token
from application.context import Context
from application.scheduler import Scheduler
from domain.auth import Principal, Role
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthenticated
from domain.fleet import Pool, Queue
from tests.support.context import ADMIN, ALICE, LOCAL_POOL, VIEWER, memory_context
from tests.unit.builders import T0, an_intent

pytestmark = pytest.mark.unit
OPERATOR = Principal("olga", Role.OPERATOR)


A = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path, pools=(LOCAL_POOL, A))


async def place(ctx: Context, profile: str, queue: str | None = None) -> str:
    """Submit as alice and run one scheduling pass; the job holds a reservation after it."""
    intent = an_intent(profiles=(profile,), queue=queue)
    preview = await submissions.create_preview(ctx, ALICE, intent)
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    assert receipt.job_id in (await Scheduler(ctx).pass_once()).reserved
    return receipt.job_id


async def test_users_are_added_by_admins_into_existing_teams(ctx: Context) -> None:
    with pytest.raises(Forbidden) as err:
        await policy.add_user(ctx, ALICE, "carol", Role.MEMBER, ["default"])
    assert "ask an admin" in err.value.fix
    with pytest.raises(NotFound) as nf:
        await policy.add_user(ctx, ADMIN, "carol", Role.MEMBER, ["research"])
    assert nf.value.field == "teams" and "tp admin team add research" in nf.value.fix
    with pytest.raises(InvalidInput):
        await policy.add_user(ctx, ADMIN, "Carol!", Role.MEMBER)
    await policy.add_team(ctx, OPERATOR, "research")
    carol = await policy.add_user(ctx, ADMIN, "carol", Role.MEMBER, ["research", "default"])
    assert carol.teams == ("default", "research") and carol.created_at == T0
    with pytest.raises(Conflict):
        await policy.add_user(ctx, ADMIN, "carol", Role.VIEWER)
    names = [u.name for u in await policy.list_users(ctx, OPERATOR)]
    assert names == sorted(names) and "carol" in names
    with pytest.raises(Forbidden):
        await policy.list_users(ctx, ALICE)


async def test_update_user_teams_role_and_disable(ctx: Context) -> None:
    await policy.add_team(ctx, ADMIN, "research")
    u = await policy.update_user(ctx, ADMIN, "alice", add_teams=["research"])
    assert u.teams == ("default", "research")
    u = await policy.update_user(ctx, ADMIN, "alice", remove_teams=["default"], role=Role.VIEWER)
    assert (u.teams, u.role) == (("research",), Role.VIEWER)
    u = await policy.update_user(ctx, ADMIN, "alice", teams=["default"], role=Role.MEMBER)
    assert u.teams == ("default",)
    with pytest.raises(NotFound):
        await policy.update_user(ctx, ADMIN, "alice", add_teams=["nope"])
    with pytest.raises(NotFound):
        await policy.update_user(ctx, ADMIN, "nobody", disabled=True)
    with pytest.raises(InvalidInput):  # an admin cannot lock themselves out
        await policy.update_user(ctx, ADMIN, "admin", disabled=True)
    with pytest.raises(Forbidden):
        await policy.update_user(ctx, OPERATOR, "alice", disabled=True)


async def test_no_change_leaves_no_enabled_admin(ctx: Context) -> None:
    """adm9 demotes admin, then admin (its role still cached as admin) tries to demote or
    disable adm9, the last enabled admin: refused, naming the problem and the fix."""
    await policy.add_user(ctx, ADMIN, "adm9", Role.ADMIN)
    adm9 = Principal("adm9", Role.ADMIN)
    await policy.update_user(ctx, adm9, "admin", role=Role.MEMBER)
    for change in ({"role": Role.OPERATOR}, {"disabled": True}):
        with pytest.raises(Conflict) as refused:
            await policy.update_user(ctx, ADMIN, "adm9", **change)
        assert "adm9 is the last enabled admin" in refused.value.message
        assert "tp admin user set OTHER --role admin" in refused.value.fix
        assert refused.value.field == next(iter(change))
    await policy.update_user(ctx, ADMIN, "adm9", add_teams=["default"])  # teams: allowed
    await policy.update_user(ctx, adm9, "admin", role=Role.ADMIN)
    await policy.update_user(ctx, ADMIN, "adm9", disabled=True)  # admin is left: allowed


async def test_tokens_follow_the_user(ctx: Context) -> None:
    token = await policy.create_token_for(ctx, ADMIN, "alice")
    me = await authenticate(ctx, token)
    assert me == Principal("alice", Role.MEMBER, ("default",))
    await policy.update_user(ctx, ADMIN, "alice", role=Role.VIEWER)
    assert (await authenticate(ctx, token)).role is Role.VIEWER  # the role is the user's
    await policy.update_user(ctx, ADMIN, "alice", disabled=True)
    with pytest.raises(Unauthenticated) as err:
        await authenticate(ctx, token)
    assert "disabled" in err.value.message and "--enable" in err.value.fix
    with pytest.raises(InvalidInput):  # no new token for a disabled user
        await create_token(ctx, "alice")
    await policy.update_user(ctx, ADMIN, "alice", disabled=False)
    assert (await authenticate(ctx, token)).name == "alice"
    # anyone for themselves; only admins for others
    assert await policy.create_token_for(ctx, ALICE, "alice")
    with pytest.raises(Forbidden):
        await policy.create_token_for(ctx, ALICE, "bob")
    with pytest.raises(NotFound) as nf:
        await policy.create_token_for(ctx, ADMIN, "nobody")
    assert "tp admin user add nobody" in nf.value.fix


async def test_bootstrap_creates_the_default_team_queue_and_admin(tmp_path: Path) -> None:
    from adapters.memory import MemoryStore, MemoryUnitOfWork

    ctx = memory_context(tmp_path)
    empty = MemoryStore()
    ctx = type(ctx)(**{**{f: getattr(ctx, f) for f in ctx.__dataclass_fields__},
                       "uow": lambda: MemoryUnitOfWork(empty)})  # fmt: skip
    token = await bootstrap_admin(ctx)
    assert token and await bootstrap_admin(ctx) is None
    me = await authenticate(ctx, token)
    assert me == Principal("admin", Role.ADMIN, ("default",))
    queues = await policy.list_queues(ctx)
    assert [(u.queue, u.gpus_in_use, u.jobs_in_use) for u in queues] == [
        (Queue("default", "default"), 0, 0)
    ]
    assert [t.name for t in await policy.list_teams(ctx)] == ["default"]


async def test_queues_add_update_and_usage(ctx: Context) -> None:
    await policy.add_team(ctx, ADMIN, "research")
    with pytest.raises(Forbidden):
        await policy.add_queue(ctx, ALICE, Queue("r", "research"))
    with pytest.raises(NotFound) as nf:
        await policy.add_queue(ctx, OPERATOR, Queue("r", "nope"))
    assert nf.value.field == "team"
    with pytest.raises(InvalidInput) as bad:
        await policy.add_queue(ctx, OPERATOR, Queue("r", "research", gpu_quota=-1))
    assert bad.value.field == "gpu_quota"
    q = await policy.add_queue(ctx, OPERATOR, Queue("r", "research", 5, 16, 4))
    with pytest.raises(Conflict):
        await policy.add_queue(ctx, OPERATOR, q)
    q = await policy.update_queue(ctx, OPERATOR, "r", gpu_quota=None, priority=10)
    assert q == Queue("r", "research", 10, None, 4)
    with pytest.raises(NotFound):
        await policy.update_queue(ctx, OPERATOR, "nope", priority=1)
    with pytest.raises(InvalidInput):
        await policy.update_queue(ctx, OPERATOR, "r", priority=5000)

    await policy.update_user(ctx, ADMIN, "alice", add_teams=["research"])
    for profile in ("h200:2", "h200:1"):
        await place(ctx, profile, queue="r")
    usage = {u.queue.name: (u.gpus_in_use, u.jobs_in_use) for u in await policy.list_queues(ctx)}
    assert usage == {"default": (0, 0), "r": (3, 2)}


async def test_choose_queue(ctx: Context) -> None:
    assert (await policy.choose_queue(ctx, ALICE, None)).name == "default"
    await policy.add_team(ctx, ADMIN, "research")
    await policy.add_queue(ctx, ADMIN, Queue("research", "research"))
    with pytest.raises(Forbidden) as err:
        await policy.choose_queue(ctx, ALICE, "research")
    assert "team research" in err.value.message and "--add-team research" in err.value.fix
    assert (await policy.choose_queue(ctx, OPERATOR, "research")).name == "research"
    with pytest.raises(NotFound) as nf:
        await policy.choose_queue(ctx, ALICE, "nope")
    assert "default" in nf.value.fix and nf.value.field == "intent.queue"
    # no default queue for her: the only usable queue, else ask for --queue
    await policy.update_user(ctx, ADMIN, "alice", teams=["research"])
    assert (await policy.choose_queue(ctx, ALICE, None)).name == "research"
    await policy.add_queue(ctx, ADMIN, Queue("research-2", "research"))
    with pytest.raises(InvalidInput) as many:
        await policy.choose_queue(ctx, ALICE, None)
    assert "--queue" in many.value.fix and "research-2" in many.value.fix
    await policy.update_user(ctx, ADMIN, "alice", teams=[])
    with pytest.raises(InvalidInput) as none:
        await policy.choose_queue(ctx, ALICE, None)
    assert "may use no queue" in none.value.message
    assert (await policy.choose_queue(ctx, VIEWER, None)).name == "default"
