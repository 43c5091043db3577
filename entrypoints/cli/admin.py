"""`tp admin …`: users, tokens and teams; and the operator's explicit decisions about nodes and
reservations the control plane cannot see (`node lost`, `reservation release`)."""

from __future__ import annotations

from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.client import Api, connect, seg
from entrypoints.cli.lazy import lazy

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")]
Reason = Annotated[str, Parameter(name="--reason", help="why (kept with the members' end)")]

admin_app = App(name="admin", help="Users, tokens and teams; explicit operator decisions.")
user_app = App(name="user", help="Users: a role (admin, operator, member, viewer) and teams.")
team_app = App(name="team", help="Teams: who may use which queues.")
node_app = App(name="node", help="Explicit decisions about nodes.")
reservation_app = App(name="reservation", help="Explicit decisions about reservations.")
blobs_app = App(name="blobs", help="The blob store: source archives, Job Capsules, plugins.")
ROLES = ("admin", "operator", "member", "viewer")
MAX_GRACE_HOURS = 24 * 365 * 100  # a century: beyond it nothing would ever be collected


def send(api: Api, method: str, path: str, body: Any = None) -> Any:
    """PUT or PATCH (``Api`` has ``get`` and ``post``); the answer's JSON."""
    resp = api.request(method, path, json=body)
    try:
        return resp.json() if resp.content else None
    except ValueError:
        return None


def _role(role: str) -> str:
    if role not in ROLES:
        raise InvalidInput(
            f"unknown role {role!r}", fix="use one of: " + ", ".join(ROLES), field="--role"
        )
    return role


def _user_line(u: dict[str, Any]) -> str:
    teams = ", ".join(u.get("teams") or []) or "no teams"
    state = " (disabled)" if u.get("disabled") else ""
    return f"user {u.get('name')}: {u.get('role')}, teams {teams}{state}"


@user_app.command(name="add")
def user_add(
    name: str,
    /,
    *,
    role: Annotated[str, Parameter(name="--role")] = "member",
    team: Annotated[tuple[str, ...], Parameter(name="--team")] = (),
) -> int:
    """Create a user (admins). Then give it a token: `tp admin token create NAME`.

    Parameters
    ----------
    name
        The user's name: lower-case letters, digits, '.', '_' or '-'.
    role
        admin, operator, member (submits jobs) or viewer (reads everything).
    team
        A team the user is in (repeatable); it may use the team's queues.
    """
    with connect() as api:
        _, user = api.post("/v1/users", {"name": name, "role": _role(role), "teams": list(team)})
    output.out.print(f"created {_user_line(user)}", markup=False)
    output.info(f"next: tp admin token create {name}")
    return 0


@user_app.command(name="ls")
def user_ls(*, json: JsonFlag = False) -> int:
    """List users with their role and teams (admins and operators)."""
    with connect() as api:
        users = api.get("/v1/users")
    if json:
        output.print_json(users)
        return 0
    output.table(
        ["USER", "ROLE", "TEAMS", "DISABLED", "CREATED"],
        [
            (u.get("name"), u.get("role"), ", ".join(u.get("teams") or []),
             "yes" if u.get("disabled") else "", output.short_time(u.get("created_at")))
            for u in users
        ],
    )  # fmt: skip
    return 0


@user_app.command(name="set")
def user_set(
    name: str,
    /,
    *,
    role: Annotated[str | None, Parameter(name="--role")] = None,
    team: Annotated[tuple[str, ...], Parameter(name="--team")] = (),
    add_team: Annotated[tuple[str, ...], Parameter(name="--add-team")] = (),
    remove_team: Annotated[tuple[str, ...], Parameter(name="--remove-team")] = (),
    no_teams: Annotated[bool, Parameter(name="--no-teams")] = False,
    disable: Annotated[bool, Parameter(name="--disable")] = False,
    enable: Annotated[bool, Parameter(name="--enable")] = False,
) -> int:
    """Change a user (admins): role, teams, or disable it (its tokens stop working).

    Parameters
    ----------
    role
        The new role: admin, operator, member or viewer.
    team
        Replace the user's teams with these (repeatable).
    add_team
        Add the user to a team (repeatable).
    remove_team
        Remove the user from a team (repeatable).
    no_teams
        Remove the user from every team.
    disable
        Disable the user: every token of it stops working on its next request.
    enable
        Enable a disabled user again.
    """
    if disable and enable:
        raise InvalidInput("--disable and --enable contradict", fix="give one", field="--enable")
    if team and no_teams:
        raise InvalidInput("--team and --no-teams contradict", fix="give one", field="--team")
    body: dict[str, Any] = {"add_teams": list(add_team), "remove_teams": list(remove_team)}
    if role is not None:
        body["role"] = _role(role)
    if team or no_teams:
        body["teams"] = list(team)
    if disable or enable:
        body["disabled"] = disable
    with connect() as api:
        user = send(api, "PATCH", f"/v1/users/{seg(name)}", body)
    output.out.print(_user_line(user), markup=False)
    return 0


@team_app.command(name="add")
def team_add(name: str, /) -> int:
    """Create a team (admins and operators).

    Parameters
    ----------
    name
        The team's name.
    """
    with connect() as api:
        api.post("/v1/teams", {"name": name})
    output.out.print(f"created team {name}", markup=False)
    return 0


@team_app.command(name="ls")
def team_ls(*, json: JsonFlag = False) -> int:
    """List teams."""
    with connect() as api:
        teams = api.get("/v1/teams")
    if json:
        output.print_json(teams)
        return 0
    output.table(["TEAM"], [(t.get("name"),) for t in teams])
    return 0


@node_app.command(name="lost")
def node_lost(name: str, /, *, reason: Reason) -> int:
    """Declare a node lost (operators): fence it and record its unfinished members as failed.
    For a node you know is gone; its reservations are released once every member is known
    stopped.

    Parameters
    ----------
    name
        The node (see `tp fleet ls`).
    """
    with connect() as api:
        _, answer = api.post(f"/v1/nodes/{seg(name)}/lost", {"reason": reason})
    output.out.print(
        f"node {name} declared lost; {answer.get('members_failed', 0)} member(s) recorded failed",
        markup=False,
    )
    return 0


@reservation_app.command(name="release")
def reservation_release(attempt_id: str, /, *, reason: Reason) -> int:
    """Release an attempt's reservation after confirming its members stopped (operators):
    records them failed with the reason and ends the attempt and job.

    Parameters
    ----------
    attempt_id
        The attempt (see `tp job status ID`).
    """
    with connect() as api:
        _, answer = api.post(f"/v1/attempts/{seg(attempt_id)}/release", {"reason": reason})
    done = "released" if answer.get("released") else "held no reservation; nothing to release"
    output.out.print(f"attempt {attempt_id}: {done}", markup=False)
    return 0


@blobs_app.command(name="collect")
def blobs_collect(
    *,
    dry_run: Annotated[
        bool, Parameter(name="--dry-run", help="Only count what would be deleted.")
    ] = False,
    grace_hours: Annotated[
        float | None,
        Parameter(name="--grace-hours", help="Keep blobs younger than this (default: server's)."),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Delete the blobs nothing refers to any more (admins): archives and capsules of previews
    never confirmed, archives never used. Jobs, live previews and plugins keep theirs. `tp serve`
    also does this every TUNEPLANE_BLOB_GC_SECONDS.
    """
    if grace_hours is not None and not 0 <= grace_hours <= MAX_GRACE_HOURS:
        raise InvalidInput(
            f"--grace-hours {grace_hours} is out of range",
            fix=f"give 0 to {MAX_GRACE_HOURS} hours",
            field="--grace-hours",
        )
    body: dict[str, Any] = {"dry_run": dry_run}
    if grace_hours is not None:
        body["grace_seconds"] = round(grace_hours * 3600)
    with connect() as api:
        _, answer = api.post("/v1/admin/blobs/collect", body)
    if json:
        output.print_json(answer)
        return 0
    verb = "would delete" if dry_run else "deleted"
    mib = answer["freed_bytes"] / 2**20
    output.out.print(
        f"{verb} {answer['deleted']} blob(s), {mib:.1f} MiB; kept {answer['kept']}", markup=False
    )
    for digest in answer["deleted_digests"]:
        output.out.print(f"  {digest}", markup=False)
    return 0


admin_app.command(user_app)
admin_app.command(team_app)
admin_app.command(node_app)
admin_app.command(reservation_app)
admin_app.command(blobs_app)
lazy(
    admin_app,
    "token",
    "tokens:token_app",
    "API tokens: create, list and revoke (admins: anyone's).",
)
lazy(
    admin_app,
    "bootstrap",
    "tokens:bootstrap",
    "Create the first admin on an empty database, as `tp serve` and `tp up` do.",
)
lazy(
    admin_app,
    "recover",
    "recover:recover",
    "A new token for an admin, on the database directly, when every admin token is lost.",
)
lazy(
    admin_app,
    "secrets",
    "secrets:secrets_app",
    "The key webhook secrets are sealed under: make one, re-seal with it.",
)
