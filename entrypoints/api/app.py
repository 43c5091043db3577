"""The HTTP application: routes, auth, problem answers, OpenAPI, and the supervisor's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from litestar import Litestar, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.openapi.config import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin

from application.blob_gc import keep_collecting
from application.context import Context
from application.gang import GangCoordinator, GangSettings
from application.scheduler import Scheduler
from application.supervisor import Supervisor
from application.webhook_delivery import Deliverer
from domain.coordination_ports import LAUNCH_NEWS, TOKENS_REVOKED, LeaderLease
from entrypoints.api import schemas as s
from entrypoints.api.artifact_routes import ARTIFACT_ROUTES
from entrypoints.api.blob_routes import BLOB_ROUTES
from entrypoints.api.console import console_router
from entrypoints.api.fleet_routes import FLEET_ROUTES
from entrypoints.api.guard import GuardedLitestar, GuardedRequest
from entrypoints.api.instrumentation import metrics_route
from entrypoints.api.metrics_routes import METRICS_ROUTES
from entrypoints.api.node_routes import NODE_ROUTES
from entrypoints.api.openapi import TightJsonRenderPlugin
from entrypoints.api.plugin_routes import PLUGIN_ROUTES
from entrypoints.api.policy_routes import POLICY_ROUTES
from entrypoints.api.problems import EXCEPTION_HANDLERS, responses
from entrypoints.api.profile_routes import PROFILE_ROUTES
from entrypoints.api.routes import PROTECTED
from entrypoints.api.runtime_routes import RUNTIME_ROUTES
from entrypoints.api.scheduling_routes import SCHEDULING_ROUTES
from entrypoints.api.security import (
    SECURITY,
    SECURITY_COMPONENTS,
    TokenCache,
    provide_principal,
)
from entrypoints.api.token_routes import TOKEN_ROUTES
from entrypoints.api.webhook_routes import WEBHOOK_ROUTES

VERSION = "0.1.0"


@get("/healthz", summary="Liveness: the process answers")
async def healthz() -> s.Health:
    return s.Health("ok")


@get("/readyz", responses=responses(503), summary="Readiness: the database answers")
async def readyz(state: State) -> s.Health:
    ctx: Context = state.ctx
    async with ctx.units.fleet() as uow:
        await uow.tokens.count()
    return s.Health("ok", "ok")


def create_app(
    ctx: Context,
    *,
    supervise: bool = True,
    lease: LeaderLease | None = None,
    debug: bool = False,
    gangs: GangSettings | None = None,
    collect_blobs_every: timedelta | None = None,
    token_cache_seconds: float = 5.0,
    metrics: str = "open",
    store_groups: int = 1,
) -> Litestar:
    """Build the app. With ``supervise`` the process also runs the control loop (scheduling
    pass + supervisor); with a ``lease`` it ticks only while it leads. With
    ``collect_blobs_every`` it deletes unused blobs that often (``application/blob_gc.py``).
    ``token_cache_seconds``: how long a token lookup is kept (``security.TokenCache``).
    ``metrics`` says who may read ``GET /metrics`` (TUNEPLANE_API_METRICS: open, token, off).
    ``store_groups``: connections a pass's placements are stored on at once (Scheduler)."""
    coordinator = GangCoordinator(ctx, gangs)
    supervisor = (
        Supervisor(
            ctx, lease, gangs=coordinator, scheduler=Scheduler(ctx, store_groups=store_groups)
        )
        if supervise
        else None
    )
    if supervisor is not None:  # a node voted or reported: decide and record at once
        ctx.signals.subscribe(LAUNCH_NEWS, supervisor.wake)
    # webhooks: every API process delivers (claims skip each other's; docs/notifications.md)
    notifications = ctx.notifications
    deliverer = Deliverer(ctx, notifications) if notifications is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        task = asyncio.create_task(supervisor.run()) if supervisor else None
        every = collect_blobs_every
        gc = (
            asyncio.create_task(keep_collecting(ctx, every, ctx.limits.blob_grace))
            if every
            else None
        )
        hooks = asyncio.create_task(deliverer.run()) if deliverer is not None else None
        try:
            yield
        finally:
            if hooks is not None:
                hooks.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await hooks
            if gc is not None:
                gc.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gc
            if task is not None and supervisor is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await supervisor.close()
                await supervisor.close_lease()

    protected = [
        *PROTECTED,
        *SCHEDULING_ROUTES,
        *FLEET_ROUTES,
        *PROFILE_ROUTES,
        *POLICY_ROUTES,
        *TOKEN_ROUTES,
        *NODE_ROUTES,
        *METRICS_ROUTES,
        *ARTIFACT_ROUTES,
        *PLUGIN_ROUTES,
        *RUNTIME_ROUTES,
        *BLOB_ROUTES,
        *WEBHOOK_ROUTES,
    ]
    for handler in protected:
        handler.security = SECURITY
    token_cache = TokenCache(token_cache_seconds)
    # a token revoked, or a user disabled or changed, in another API process
    ctx.signals.subscribe(TOKENS_REVOKED, token_cache.clear)
    state: dict[str, Any] = {
        "ctx": ctx,
        "supervisor": supervisor,
        "token_cache": token_cache,
        "deliverer": deliverer,
    }
    return GuardedLitestar(
        route_handlers=[healthz, readyz, *metrics_route(metrics), *protected, console_router()],
        dependencies={"principal": Provide(provide_principal)},
        exception_handlers=EXCEPTION_HANDLERS,
        request_class=GuardedRequest,  # JSON bodies checked once decoded (guard.py)
        state=State(state),
        lifespan=[lifespan],
        request_max_body_size=1024 * 1024,
        logging_config=None,  # the process's own log set-up (entrypoints/logs.py), not litestar's
        openapi_config=OpenAPIConfig(
            title="TunePlane control plane",
            version=VERSION,
            components=[SECURITY_COMPONENTS],
            path="/schema",
            render_plugins=[SwaggerRenderPlugin(), TightJsonRenderPlugin()],
        ),
        debug=debug,
    )
