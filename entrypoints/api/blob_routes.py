"""HTTP route of blob garbage collection (docs/operations.md, "Blob store"): admins only."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from litestar import post
from litestar.datastructures import State
from litestar.params import JSONBody
from msgspec import Meta, Struct

from application.blob_gc import collect_as
from application.context import Context
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller


class CollectIn(Struct, forbid_unknown_fields=True, kw_only=True):
    dry_run: Annotated[bool, Meta(description="count what would be deleted; delete nothing")] = (
        False
    )
    grace_seconds: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=10 * 365 * 86400,
                description="keep blobs younger than this (default: "
                "TUNEPLANE_BLOB_GC_GRACE_SECONDS)",
            ),
        ]
        | None
    ) = None


class CollectOut(Struct):
    dry_run: bool
    kept: int
    deleted: int
    freed_bytes: int
    deleted_digests: list[str]  # the first 100


@post(
    "/v1/admin/blobs/collect",
    status_code=200,
    request_max_body_size=4 * 1024,
    responses=responses(400, 401, 403, 422),
    summary="Delete the blobs nothing refers to any more (admin); dry_run only counts them",
)
async def collect(data: JSONBody[CollectIn], state: State, principal: Caller) -> CollectOut:
    ctx: Context = state.ctx
    grace = None if data.grace_seconds is None else timedelta(seconds=data.grace_seconds)
    done = await collect_as(ctx, principal, grace, dry_run=data.dry_run)
    return CollectOut(data.dry_run, done.kept, done.deleted, done.freed_bytes, done.deleted_digests)


BLOB_ROUTES = [collect]
