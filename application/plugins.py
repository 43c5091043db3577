"""Plugins: publish, list, read, disable and enable; load them, checked, for a preview
(docs/plugins.md).

A published (name, version) is immutable. Publishing recomputes the package's digest from the
uploaded files; the same files again answer the stored version (and rewrite its blob, which
repairs a damaged copy); other files under a published version are refused (409). Loading reads
the package back from the blob store and checks its digest again, so a changed blob store is
caught before a preview ships the files.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from application.context import Context
from application.policy import ADMIN, require
from application.uploads import receive
from domain import tarball
from domain.auth import Principal, Role
from domain.capsule import CAPSULE_DIR
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound, TooLarge
from domain.plugins import (
    CAPSULE_PLUGINS,
    GROUPS,
    MAX_FILES,
    MAX_PACKAGE_BYTES,
    Disabled,
    PluginPin,
    PluginRecord,
    PluginUse,
    check_loaded,
    check_name,
    check_usable,
    check_version,
    integrity_failure,
    open_package,
)
from domain.unit_of_work import ArtifactsUnit

MAX_UPLOAD_BYTES = 2 * MAX_PACKAGE_BYTES  # a plain tar adds headers and padding to the files
MAX_REASON = 500


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _next_patch(version: str) -> str:
    major, minor, patch = version.partition("-")[0].split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


async def publish(
    ctx: Context,
    principal: Principal,
    chunks: AsyncIterator[bytes],
    *,
    declared_size: int | None = None,
    declared_digest: str | None = None,
    content_digest: str | None = None,
) -> tuple[PluginRecord, bool]:
    """Publish the package in ``chunks`` (a tar, plain or gzip-compressed); return the
    record and whether this call created it."""
    if not principal.can_submit:
        raise Forbidden(
            f"user {principal.name} may not publish plugins", fix="ask for a member token"
        )
    data = await receive(
        chunks,
        limit=MAX_UPLOAD_BYTES,
        declared_size=declared_size,
        declared_digest=content_digest,
        what="the plugin package",
        smaller="leave data sets, checkpoints and caches out of the plugin",
    )
    files = tarball.unpack(data, max_files=MAX_FILES, max_bytes=MAX_PACKAGE_BYTES, what="package")
    package = open_package(files)
    decl = package.declaration
    if declared_digest is not None and declared_digest != package.digest:
        raise InvalidInput(
            f"the package's files have digest {package.digest}, not the declared {declared_digest}",
            fix="the files changed while publishing, or the declared digest is wrong: "
            "publish again (`tp plugin publish DIR` computes it)",
            field="header.X-Plugin-Digest",
        )
    if decl.executes != "workload" and principal.role is not Role.ADMIN:
        raise Forbidden(
            f"plugin {decl.ref} executes in the {decl.executes}; only admins publish plugins "
            "that run outside the workload",
            fix="ask an admin to publish it",
        )
    async with ctx.units.artifacts() as uow:
        existing = await uow.plugins.get(decl.name, decl.version)
    if existing is not None and existing.digest != package.digest:
        raise _republished(existing, package.digest)
    # Everything the row holds was checked above (domain.plugins: no text PostgreSQL refuses),
    # so nothing refused is stored. A blob left when the row is not written after it (a lost
    # race, the database gone) is not deleted here: content-addressed, another package may
    # share it; blob collection takes it after the grace once nothing refers to it.
    tar = tarball.pack(package.files)
    blob, _ = await ctx.blob_store().put(_once(tar), max_size=len(tar))  # no transaction open
    if existing is not None:
        return existing, False  # the same files: its blob is written again, whole
    record = PluginRecord(
        decl, package.manifest, blob, package.manifest.size, principal.name, ctx.clock.now()
    )
    async with ctx.units.artifacts() as uow:
        winner = await uow.plugins.add(record)
        await uow.commit()
    if winner is None:
        return record, True
    if winner.digest != record.digest:  # a concurrent publish of other files won
        raise _republished(winner, record.digest)
    return winner, False


def _republished(existing: PluginRecord, digest: str) -> Conflict:
    ref = existing.declaration.ref
    return Conflict(
        f"plugin {ref} is already published with digest {existing.digest}; these files have "
        f"digest {digest}. A published version never changes",
        fix=f"bump the version in plugin.toml (e.g. {_next_patch(existing.version)}) and "
        "publish again",
        field="plugin.toml:version",
    )


async def list_plugins(
    ctx: Context, principal: Principal, group: str | None = None
) -> list[PluginRecord]:
    """Every published version (of ``group``), by group, name, newest version first."""
    if group is not None and group not in GROUPS:
        raise InvalidInput(
            f"there is no plugin group {group!r}",
            fix="use one of: " + ", ".join(GROUPS),
            field="group",
        )
    async with ctx.units.artifacts() as uow:
        return await uow.plugins.list(group)


async def plugin_versions(ctx: Context, principal: Principal, name: str) -> list[PluginRecord]:
    check_name(name, "name")
    async with ctx.units.artifacts() as uow:
        found = await uow.plugins.versions(name)
    if not found:
        raise NotFound(
            f"no plugin {name}",
            fix="see `tp plugin ls`, or publish it first (`tp plugin publish DIR`)",
            field="name",
        )
    return found


async def get_plugin(ctx: Context, principal: Principal, name: str, version: str) -> PluginRecord:
    check_name(name, "name")
    check_version(version, "version")
    async with ctx.units.artifacts() as uow:
        found = await uow.plugins.get(name, version)
        known = [r.version for r in await uow.plugins.versions(name)] if found is None else []
    if found is None:
        raise NotFound(
            f"no plugin {name}@{version}",
            fix=f"published versions: {', '.join(known)}" if known else "see `tp plugin ls`",
            field="version",
        )
    return found


async def disable(
    ctx: Context, principal: Principal, name: str, version: str, reason: str
) -> PluginRecord:
    """Refuse the version to new submissions (admins). Committed jobs keep it."""
    require(principal, ADMIN, "disable plugins")
    text = reason.strip()
    if not 1 <= len(text) <= MAX_REASON:
        raise InvalidInput(
            f"the reason must be 1-{MAX_REASON} characters",
            fix="say why, e.g. --reason 'scores are wrong, use 1.0.1'",
            field="reason",
        )
    return await _set(
        ctx, principal, name, version, Disabled(ctx.clock.now(), principal.name, text)
    )


async def enable(ctx: Context, principal: Principal, name: str, version: str) -> PluginRecord:
    require(principal, ADMIN, "enable plugins")
    return await _set(ctx, principal, name, version, None)


async def _set(
    ctx: Context, principal: Principal, name: str, version: str, disabled: Disabled | None
) -> PluginRecord:
    await get_plugin(ctx, principal, name, version)  # the NotFound naming the versions
    async with ctx.units.artifacts() as uow:
        updated = await uow.plugins.set_disabled(name, version, disabled)
        await uow.commit()
    if updated is None:  # pragma: no cover - versions are never deleted
        raise NotFound(f"no plugin {name}@{version}", fix="see `tp plugin ls`", field="version")
    return updated


async def load(ctx: Context, record: PluginRecord) -> dict[str, bytes]:
    """The package's files from the blob store, checked against its published digest."""
    try:
        data = await ctx.blob_store().read(record.blob)
        files = tarball.unpack(
            data,
            max_files=MAX_FILES,
            max_bytes=MAX_PACKAGE_BYTES,
            what=f"plugin {record.declaration.ref}",
        )
    except (NotFound, InvalidInput, TooLarge) as exc:
        detail = f"its stored package cannot be read ({exc.message})"
        raise integrity_failure(record, detail) from None
    check_loaded(record, files)
    return files


async def for_preview(
    ctx: Context, pins: tuple[PluginPin, ...], backend: str, capsule: bool
) -> tuple[tuple[PluginUse, ...], dict[str, bytes]]:
    """The plugins a preview uses, each existing, enabled, as pinned, and its files checked
    on load; and the workload plugins' files for the Job Capsule (``plugins/<name>/…``)."""
    if not pins:
        return (), {}
    async with ctx.units.artifacts() as uow:
        records = [await uow.plugins.get(p.name, p.version) for p in pins]
        known = {p.name: [r.version for r in await uow.plugins.versions(p.name)] for p in pins}
    uses: list[PluginUse] = []
    capsule_files: dict[str, bytes] = {}
    for i, (pin, record) in enumerate(zip(pins, records, strict=True)):
        field = f"intent.plugins[{i}]"
        if record is None:
            versions = ", ".join(known[pin.name]) or "none"
            raise InvalidInput(
                f"plugin {pin.name}@{pin.version} is not published here "
                f"(published versions: {versions})",
                fix=f"publish it, or `tp plugin install {pin.name}@VERSION`",
                field=field,
            )
        check_usable(record, pin, field)
        decl = record.declaration
        if decl.executes == "workload" and not capsule:
            raise InvalidInput(
                f"plugin {decl.ref} runs in the workload: its files travel in the Job Capsule, "
                f"which backend {backend} does not deliver",
                fix="choose a profile on a backend that delivers the Job Capsule "
                "(docs/capsule.md, storage capabilities)",
                field=field,
            )
        files = await load(ctx, record)
        path = None
        if decl.executes == "workload":
            path = f"{CAPSULE_DIR}/{CAPSULE_PLUGINS}/{decl.name}"
            capsule_files |= {f"{CAPSULE_PLUGINS}/{decl.name}/{p}": d for p, d in files.items()}
        uses.append(
            PluginUse(decl.name, decl.version, record.digest, decl.group, decl.executes, path)
        )
    return tuple(uses), capsule_files


async def check_commit(uow: ArtifactsUnit, uses: tuple[PluginUse, ...]) -> None:
    """Refuse to commit a preview whose plugin was disabled since (a new submission)."""
    for use in uses:
        record = await uow.plugins.get(use.name, use.version)
        if record is not None:
            check_usable(record, PluginPin(use.name, use.version, use.digest), "preview_id")
