"""`tp webhook add|ls|rm|test`: job state changes sent to a URL, signed (docs/notifications.md)."""

from __future__ import annotations

from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.errors import InvalidInput
from domain.webhooks import Format, Scope, parse_states
from entrypoints.cli import output
from entrypoints.cli.admin import JsonFlag, send
from entrypoints.cli.client import connect, seg
from entrypoints.cli.errors import FAILED

webhook_app = App(
    name="webhook", help="Webhooks: job state changes sent to a URL, signed (notifications.md)."
)


def _format(value: str) -> str:
    if value not in {f.value for f in Format}:
        raise InvalidInput(
            f"unknown webhook format {value!r}",
            fix='use --format tuneplane (the JSON event) or --format slack ({"text": …})',
            field="--format",
        )
    return value


def _scope(team: str | None, queue: str | None, user: str | None) -> tuple[str, str | None]:
    named = [(s, v) for s, v in ((Scope.TEAM, team), (Scope.QUEUE, queue), (Scope.USER, user))
             if v is not None]  # fmt: skip
    if len(named) > 1:
        raise InvalidInput(
            "a webhook follows one user, team or queue; "
            + " and ".join(f"--{s.value}" for s, _ in named) + " were given",
            fix="give one of them (or none: your own jobs)",
            field=f"--{named[1][0].value}",
        )  # fmt: skip
    return (named[0][0].value, named[0][1]) if named else (Scope.USER.value, None)


def _what(w: dict[str, Any]) -> str:
    return f"{w.get('scope')} {w.get('target')}"


@webhook_app.command(name="add")
def add(
    url: str,
    /,
    *,
    team: Annotated[str | None, Parameter(name="--team", help="a team's queues' jobs")] = None,
    queue: Annotated[str | None, Parameter(name="--queue", help="one queue's jobs")] = None,
    user: Annotated[
        str | None, Parameter(name="--user", help="a user's jobs (default: yours)")
    ] = None,
    state: Annotated[
        tuple[str, ...], Parameter(name="--state", help="only these states (repeat; default: all)")
    ] = (),
    format: Annotated[str, Parameter(name="--format", help="tuneplane or slack")] = "tuneplane",
    json: JsonFlag = False,
) -> int:
    """Send the state changes of your jobs (or a team's, a queue's) to URL, signed with a
    secret shown once. https only (http to loopback where the operator allows it)."""
    scope, target = _scope(team, queue, user)
    try:
        states = [s.value for s in parse_states(state)]
    except InvalidInput as exc:
        raise InvalidInput(exc.message, fix=exc.fix, field="--state") from None
    body: dict[str, object] = {
        "url": url, "scope": scope, "states": states, "format": _format(format),
    }  # fmt: skip
    if target is not None:
        body["target"] = target
    with connect() as api:
        _, made = api.post("/v1/webhooks", body)
    if json:
        output.print_json(made)
        return 0
    wanted = ", ".join(made.get("states") or []) or "every state"
    output.out.print(
        f"webhook {made.get('id')}: {_what(made)}'s jobs ({wanted}) to {made.get('url')}, "
        f"format {made.get('format')}",
        markup=False,
    )
    output.out.print(f"secret (shown once; verify deliveries with it): {made.get('secret')}",
                     markup=False)  # fmt: skip
    return 0


@webhook_app.command(name="ls")
def ls(*, json: JsonFlag = False) -> int:
    """List your webhooks (an admin: everyone's) with their deliveries so far: pending,
    delivered, dead (given up), and the last failure."""
    with connect() as api:
        hooks = api.get("/v1/webhooks")
    if json:
        output.print_json(hooks)
        return 0
    output.table(
        ["ID", "OWNER", "FOLLOWS", "STATES", "FORMAT", "URL", "PENDING/DELIVERED/DEAD", "LAST"],
        [
            (w.get("id"), w.get("owner"), _what(w), ",".join(w.get("states") or []) or "all",
             w.get("format"), w.get("url"),
             f"{w.get('pending', 0)}/{w.get('delivered', 0)}/{w.get('dead', 0)}",
             w.get("last_error") or (w.get("last_status") or "-"))
            for w in hooks
        ],
    )  # fmt: skip
    return 0


@webhook_app.command(name="rm")
def rm(webhook_id: str, /) -> int:
    """Remove a webhook; its undelivered changes are dropped."""
    with connect() as api:
        send(api, "DELETE", f"/v1/webhooks/{seg(webhook_id)}")
    output.out.print(f"webhook {webhook_id} removed", markup=False)
    return 0


@webhook_app.command(name="test")
def test(webhook_id: str, /, *, json: JsonFlag = False) -> int:
    """Send a signed `webhook.test` event to the webhook's URL now and print the receiver's
    answer (exit 1 unless it answered 2xx)."""
    with connect() as api:
        _, done = api.post(f"/v1/webhooks/{seg(webhook_id)}/test")
    if json:
        output.print_json(done)
    elif done.get("delivered"):
        output.out.print(
            f"webhook {webhook_id}: the receiver answered {done.get('status')} to test event "
            f"{done.get('event_id')}",
            markup=False,
        )
    else:
        answer = done.get("status")
        output.err.print(
            f"error: webhook {webhook_id}: test event {done.get('event_id')} not delivered: "
            f"{done.get('error') or f'HTTP {answer}'}",
            markup=False,
        )
    return 0 if done.get("delivered") else FAILED
