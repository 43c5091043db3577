"""Webhook subscriptions (docs/notifications.md): add, list, remove, test.

Who may subscribe to what: a caller who sees every job (admin, operator, viewer) to any user,
team or queue; a member to their own jobs, their teams and their teams' queues. A subscription
is its owner's to list, test and remove; an admin lists and removes any. Membership is checked
when the subscription is made (an admin removes it if its owner leaves the team)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from application import webhook_secrets
from application.context import Context, Notifications
from domain.auth import Principal, Role
from domain.catalog import check_name
from domain.errors import Forbidden, NotFound, Unavailable
from domain.webhooks import (
    MAX_SUBSCRIPTIONS_PER_OWNER,
    Format,
    Scope,
    SendResult,
    Subscription,
    SubscriptionSummary,
    body,
    check_url,
    headers,
    one_line,
    parse_states,
    ping_event,
)


@dataclass(frozen=True, slots=True)
class NewSubscription:
    subscription: Subscription  # as stored: its secret sealed
    secret: str  # the clear secret, shown to its maker once and never again


@dataclass(frozen=True, slots=True)
class TestOutcome:
    event_id: str
    result: SendResult


def notifications(ctx: Context) -> Notifications:
    if ctx.notifications is None:
        raise Unavailable(
            "this process sends no webhooks", fix="ask the control plane (`tp serve`, `tp up`)"
        )
    return ctx.notifications


async def add(
    ctx: Context,
    principal: Principal,
    url: str,
    *,
    scope: Scope = Scope.USER,
    target: str | None = None,
    states: Iterable[object] = (),
    fmt: Format = Format.TUNEPLANE,
) -> NewSubscription:
    """Subscribe ``url`` to the job state changes of ``scope``/``target`` (the caller's own
    jobs by default). The answer holds the secret in clear: it is stored sealed, and never
    shown again."""
    n = notifications(ctx)
    url = check_url(url, allow_loopback=n.allow_loopback, allow_private=n.allow_private)
    target = principal.name if target is None else target
    check_name(target, f"{scope.value} name", scope.value)
    await _may_subscribe(ctx, principal, scope, target)
    secret = "whsec_" + ctx.new_secret()
    subscription = Subscription(
        id=ctx.ids.new("wh"),
        owner=principal.name,
        scope=scope,
        target=target,
        url=url,
        states=parse_states(states),
        format=fmt,
        created_at=ctx.clock.now(),
        secret=webhook_secrets.seal(n, secret),
    )
    await n.store.add(subscription, MAX_SUBSCRIPTIONS_PER_OWNER)
    return NewSubscription(subscription, secret)


async def _may_subscribe(ctx: Context, principal: Principal, scope: Scope, target: str) -> None:
    async with ctx.units.fleet() as uow:
        if scope is Scope.USER:
            exists = await uow.policy.user(target) is not None
        elif scope is Scope.TEAM:
            exists = target in {t.name for t in await uow.policy.teams()}
        else:
            queue = await uow.policy.queue(target)
            exists = queue is not None
    if not exists:
        raise NotFound(
            f"no {scope.value} {target}",
            fix=f"name an existing {scope.value} (`tp queue ls`, `tp admin team ls`)",
            field=scope.value,
        )
    if principal.sees_all_jobs:
        return
    allowed = (
        target == principal.name
        if scope is Scope.USER
        else target in principal.teams
        if scope is Scope.TEAM
        else queue is not None and queue.team in principal.teams
    )
    if not allowed:
        raise Forbidden(
            f"user {principal.name} may not subscribe to the jobs of {scope.value} {target}",
            fix="subscribe to your own jobs, your teams or their queues (an admin may "
            "subscribe to any)",
            field=scope.value,
        )


async def list_mine(ctx: Context, principal: Principal) -> Sequence[SubscriptionSummary]:
    """The caller's subscriptions; an admin's answer holds everyone's."""
    owner = None if principal.role is Role.ADMIN else principal.name
    return await notifications(ctx).store.list(owner)


async def _own(ctx: Context, principal: Principal, subscription_id: str) -> Subscription:
    found = await notifications(ctx).store.get(subscription_id)
    if found is None or (found.owner != principal.name and principal.role is not Role.ADMIN):
        raise NotFound(
            f"no webhook {subscription_id}",
            fix="list yours with `tp webhook ls`",
            field="id",
        )
    return found


async def remove(ctx: Context, principal: Principal, subscription_id: str) -> None:
    """Unsubscribe; its undelivered changes are dropped with it."""
    await _own(ctx, principal, subscription_id)
    if not await notifications(ctx).store.remove(subscription_id):
        raise NotFound(f"no webhook {subscription_id}", fix="list yours with `tp webhook ls`")


async def send_test(ctx: Context, principal: Principal, subscription_id: str) -> TestOutcome:
    """Send a signed ``webhook.test`` event to the subscription's URL now (not through the
    outbox: nothing is retried) and say what the receiver answered."""
    n = notifications(ctx)
    subscription = await _own(ctx, principal, subscription_id)
    now = ctx.clock.now()
    event_id = ctx.ids.new("test")
    payload = body(ping_event(event_id, subscription, now), subscription.format)
    secret = webhook_secrets.signing_secret(n, subscription.id, subscription.secret)
    sent = headers(secret, event_id, subscription.id, int(now.timestamp()), payload)
    result = await n.sender.send(subscription.url, sent, payload, n.timeout)
    return TestOutcome(event_id, SendResult(result.status, one_line(result.error)))
