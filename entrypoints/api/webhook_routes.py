"""HTTP routes of webhooks (docs/notifications.md, docs/http-api.md#webhooks): subscribe a URL
to job state changes, list, remove, and send a signed test event now. The use cases check who
may subscribe to what (application/webhooks.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from litestar import delete, get, post
from litestar.datastructures import State
from litestar.params import JSONBody
from msgspec import Meta, Struct

from application import webhooks
from application.context import Context
from domain.lifecycle import JobState
from domain.webhooks import MAX_URL_LENGTH, Format, Scope, SubscriptionSummary
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller
from entrypoints.wire import Ident, Name

JSON_LIMIT = 16 * 1024
Url = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        description="https://HOST/PATH (no credentials, no fragment); http only to a loopback "
        "host where the operator allows loopback receivers",
    ),
]
States = Annotated[list[JobState], Meta(max_length=len(JobState))]


class WebhookIn(Struct, forbid_unknown_fields=True, kw_only=True):
    url: Url
    scope: Scope = Scope.USER
    target: Name | None = None  # the user, team or queue; none: the caller (scope user)
    states: States = []  # none: every state
    format: Format = Format.TUNEPLANE


class WebhookOut(Struct, kw_only=True):
    id: str
    owner: str
    scope: str
    target: str
    url: str
    states: list[str]
    format: str
    created_at: datetime
    pending: int = 0
    delivered: int = 0
    dead: int = 0
    last_status: int | None = None
    last_error: str = ""


class WebhookCreated(WebhookOut, kw_only=True):
    secret: str  # shown once: signs every delivery (docs/notifications.md#verifying-a-delivery)


class TestOut(Struct):
    event_id: str
    delivered: bool
    status: int | None  # the receiver's HTTP status; null: no answer
    error: str


class Removed(Struct):
    id: str
    removed: Literal[True] = True


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


def _out(summary: SubscriptionSummary) -> WebhookOut:
    s = summary.subscription
    return WebhookOut(
        id=s.id, owner=s.owner, scope=s.scope.value, target=s.target, url=s.url,
        states=[x.value for x in s.states], format=s.format.value, created_at=s.created_at,
        pending=summary.pending, delivered=summary.delivered, dead=summary.dead,
        last_status=summary.last_status, last_error=summary.last_error,
    )  # fmt: skip


@post(
    "/v1/webhooks",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422, 503),
    summary="Subscribe a URL to job state changes: a user's, a team's or a queue's jobs",
)
async def add_webhook(data: JSONBody[WebhookIn], state: State, principal: Caller) -> WebhookCreated:
    made = await webhooks.add(
        _ctx(state), principal, data.url, scope=data.scope, target=data.target,
        states=data.states, fmt=data.format,
    )  # fmt: skip
    s = made.subscription
    return WebhookCreated(
        id=s.id, owner=s.owner, scope=s.scope.value, target=s.target, url=s.url,
        states=[x.value for x in s.states], format=s.format.value, created_at=s.created_at,
        secret=made.secret,
    )  # fmt: skip


@get(
    "/v1/webhooks",
    responses=responses(400, 401, 503),
    summary="Webhooks: the caller's (an admin's: all), with their deliveries so far",
)
async def list_webhooks(state: State, principal: Caller) -> list[WebhookOut]:
    return [_out(s) for s in await webhooks.list_mine(_ctx(state), principal)]


@delete(
    "/v1/webhooks/{webhook_id:str}",
    status_code=200,
    responses=responses(400, 401, 404, 503),
    summary="Remove a webhook and its undelivered changes",
)
async def remove_webhook(webhook_id: Ident, state: State, principal: Caller) -> Removed:
    await webhooks.remove(_ctx(state), principal, webhook_id)
    return Removed(webhook_id)


@post(
    "/v1/webhooks/{webhook_id:str}/test",
    status_code=200,
    responses=responses(400, 401, 404, 503),
    summary="Send a signed test event to a webhook now; the receiver's answer",
)
async def test_webhook(webhook_id: Ident, state: State, principal: Caller) -> TestOut:
    done = await webhooks.send_test(_ctx(state), principal, webhook_id)
    r = done.result
    return TestOut(done.event_id, r.ok, r.status, r.error)


WEBHOOK_ROUTES = [add_webhook, list_webhooks, remove_webhook, test_webhook]
