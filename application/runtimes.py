"""The runtime registry (docs/runtimes.md): the built-in runtimes of this control plane's
catalog, read-only, and the runtimes admins add (`tp runtime add`), stored and pinned by digest.

A name is either built in or stored, never both: adding a built-in name is refused. Re-adding
a stored runtime with the same content changes nothing; with other content it is refused unless
``replace`` is given, and then it is overwritten with the next revision. Jobs already committed
keep their pin: the JobSpec holds the image digest and the contract it was previewed with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from application.context import Context
from application.policy import require
from domain.auth import Principal, Role
from domain.catalog import Method, RuntimeSpec
from domain.errors import Conflict, InvalidInput
from domain.runtimes import check_runtime

ADMINS = (Role.ADMIN,)


@dataclass(frozen=True, slots=True)
class Added:
    runtime: RuntimeSpec
    outcome: str  # "created", "replaced" or "unchanged"


async def find_runtime(ctx: Context, name: str) -> RuntimeSpec:
    """The runtime called ``name``: built in, else stored. InvalidInput naming the choices."""
    for runtime in ctx.catalog.runtimes:
        if runtime.name == name:
            return runtime
    async with ctx.units.artifacts() as uow:
        stored = await uow.runtimes.get(name)
        if stored is not None:
            return stored
        known = [r.name for r in ctx.catalog.runtimes] + [r.name for r in await uow.runtimes.list()]
    raise InvalidInput(
        f"unknown runtime {name!r}",
        fix=f"use one of: {', '.join(known) or 'none configured'} (see `tp runtime ls`), or ask"
        " an admin to add it (`tp runtime add`)",
        field="intent.runtime",
    )


async def runtime_for(ctx: Context, method: Method, requested: str | None) -> RuntimeSpec:
    """The runtime a job of ``method`` runs on: ``requested``, else the method's default, which
    an admin may not have registered (the post-training recipes' runtimes are not built here):
    then say so, and how to get one, rather than "unknown runtime"."""
    if requested:
        return await find_runtime(ctx, requested)
    try:
        return await find_runtime(ctx, method.default_runtime)
    except InvalidInput:
        known = ", ".join(r.name for r in await list_runtimes(ctx)) or "none configured"
    needs = f" with {method.framework} {method.framework_requires}" if method.framework else ""
    raise InvalidInput(
        f"method {method.name} runs on runtime {method.default_runtime!r} by default, and this"
        " server has no runtime of that name",
        fix=f"pass a runtime{needs.rstrip()} (`--runtime NAME`; offered: {known}), or ask an"
        f" admin to register {method.default_runtime!r} (`tp runtime add`, docs/recipes.md)",
        field="intent.runtime",
    )


async def list_runtimes(ctx: Context) -> list[RuntimeSpec]:
    """The built-in runtimes, then the stored ones by name."""
    async with ctx.units.artifacts() as uow:
        stored = await uow.runtimes.list()
    return [*ctx.catalog.runtimes, *stored]


async def add_runtime(
    ctx: Context, principal: Principal, runtime: RuntimeSpec, *, replace: bool = False
) -> Added:
    """Register ``runtime`` (admins). See the module's docstring for re-adds."""
    require(principal, ADMINS, "add runtimes")
    checked = check_runtime(runtime)
    if any(r.name == checked.name for r in ctx.catalog.runtimes):
        raise Conflict(
            f"runtime {checked.name} is built in and cannot be changed",
            fix="register the image under another name (e.g. "
            f"{checked.name}-pinned) and pass it with `--runtime`",
            field="name",
        )
    now = ctx.clock.now()
    record = dataclasses.replace(checked, added_by=principal.name, added_at=now, revision=1)
    async with ctx.units.artifacts() as uow:
        existing = await uow.runtimes.add(record)
        if existing is None:
            await uow.commit()
            return Added(record, "created")
        if existing.content() == record.content():
            return Added(existing, "unchanged")
        if not replace:
            raise Conflict(
                f"runtime {checked.name} exists with other content ("
                + ", ".join(_changes(existing, record))
                + ")",
                fix="add it under a new name, or pass --replace to overwrite it (jobs already"
                " committed keep the image and contract they were previewed with)",
                field="name",
            )
        record = dataclasses.replace(record, revision=existing.revision + 1)
        if not await uow.runtimes.replace(record, existing.revision):
            raise Conflict(
                f"runtime {checked.name} changed while it was being replaced",
                fix="list it again (`tp runtime ls`) and retry",
                field="name",
            )
        await uow.commit()
    return Added(record, "replaced")


def _changes(old: RuntimeSpec, new: RuntimeSpec) -> list[str]:
    a, b = old.content(), new.content()
    return [f"{k}: {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k]]
