"""Contract: a plugin version is stored once (the first stays; the loser of a race sees the
winner's row), read back as stored, listed by group, name and newest version, and disabled or
enabled with who, when and why."""

from __future__ import annotations

import asyncio

import pytest

from domain.artifacts import ArtifactFile, Manifest
from domain.plugins import Declaration, Disabled, PluginRecord
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at

pytestmark = pytest.mark.contract


def a_plugin(
    name: str, version: str, group: str = "evaluation", content: str = "x"
) -> PluginRecord:
    decl = Declaration(name, version, group, f"{name} does things", ("read-outputs",),
                       "workload", ("sh", "run.sh"))  # fmt: skip
    manifest = Manifest.of([ArtifactFile("plugin.toml", 3, "ab" * 32),
                            ArtifactFile("run.sh", len(content), content * 64)])  # fmt: skip
    return PluginRecord(decl, manifest, "sha256:" + "c" * 64, 42, "alice", at(1))


async def test_a_version_is_stored_once_and_read_back(uow_factory: UnitOfWorkFactory) -> None:
    first = a_plugin("exact-match", "1.0.0")
    async with uow_factory() as uow:
        assert await uow.plugins.add(first) is None
        await uow.commit()
    other = a_plugin("exact-match", "1.0.0", content="y")
    async with uow_factory() as uow:
        assert await uow.plugins.add(other) == first  # the stored one, nothing written
        await uow.commit()
    async with uow_factory() as uow:
        got = await uow.plugins.get("exact-match", "1.0.0")
        assert got == first and got is not None and got.digest == first.digest
        assert await uow.plugins.get("exact-match", "2.0.0") is None


async def test_concurrent_adds_store_one(uow_factory: UnitOfWorkFactory) -> None:
    versions = [a_plugin("racer", "1.0.0", content=c) for c in "abcd"]

    async def add(record: PluginRecord) -> PluginRecord | None:
        async with uow_factory() as uow:
            found = await uow.plugins.add(record)
            await asyncio.sleep(0.01)  # hold the transaction while the others wait
            await uow.commit()
        return found

    results = await asyncio.gather(*(add(r) for r in versions))
    winners = [r for r, found in zip(versions, results, strict=True) if found is None]
    assert len(winners) == 1
    assert all(found == winners[0] for found in results if found is not None)


async def test_listing_order_and_versions(uow_factory: UnitOfWorkFactory) -> None:
    records = [
        a_plugin("zeta", "1.0.0", "algorithm"),
        a_plugin("alpha", "0.9.10"),
        a_plugin("alpha", "0.9.9"),
        a_plugin("alpha", "1.0.0-rc.1"),
        a_plugin("beta", "1.0.0", "data-prep"),
    ]
    async with uow_factory() as uow:
        for r in records:
            await uow.plugins.add(r)
        await uow.commit()
    async with uow_factory() as uow:
        listed = [(r.name, r.version) for r in await uow.plugins.list()]
        evaluation = [r.version for r in await uow.plugins.list("evaluation")]
        versions = [r.version for r in await uow.plugins.versions("alpha")]
        assert await uow.plugins.versions("missing") == []
    assert listed == [("zeta", "1.0.0"), ("beta", "1.0.0"), ("alpha", "1.0.0-rc.1"),
                      ("alpha", "0.9.10"), ("alpha", "0.9.9")]  # fmt: skip
    assert evaluation == versions == ["1.0.0-rc.1", "0.9.10", "0.9.9"]


async def test_disable_and_enable(uow_factory: UnitOfWorkFactory) -> None:
    record = a_plugin("exact-match", "1.0.0")
    async with uow_factory() as uow:
        await uow.plugins.add(record)
        await uow.commit()
    off = Disabled(at(5), "admin", "scores are wrong")
    async with uow_factory() as uow:
        changed = await uow.plugins.set_disabled("exact-match", "1.0.0", off)
        assert changed is not None and changed.disabled == off
        assert await uow.plugins.set_disabled("exact-match", "9.0.0", off) is None
        await uow.commit()
    async with uow_factory() as uow:
        got = await uow.plugins.get("exact-match", "1.0.0")
        assert got is not None and got.disabled == off and got.manifest == record.manifest
        enabled = await uow.plugins.set_disabled("exact-match", "1.0.0", None)
        await uow.commit()
    assert enabled == record
    async with uow_factory() as uow:
        assert await uow.plugins.get("exact-match", "1.0.0") == record
