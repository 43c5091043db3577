"""Contract: the runtime registry stores a runtime once per name (a second add gets the stored
one back, concurrent adds store exactly one), reads it back whole (digest, Python, frameworks,
process model, who added it and when) and by name in order, and replaces it only at the revision
the caller read."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from domain.catalog import RuntimeSpec
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at

pytestmark = pytest.mark.contract


def a_runtime(name: str = "trl-gpu", **kw: object) -> RuntimeSpec:
    values: dict[str, object] = {
        "name": name,
        "image": "registry.example/ml/trl:0.12",
        "python": "3.11",
        "process_model": "torch-process-group",
        "description": "TRL on PyTorch",
        "digest": "sha256:" + "d" * 64,
        "frameworks": {"torch": "2.3.1+cu121", "trl": "0.12.0"},
        "added_by": "admin",
        "added_at": at(1),
        "revision": 1,
    }
    return RuntimeSpec(**(values | kw))  # type: ignore[arg-type]


async def test_a_runtime_is_stored_once_and_read_back_whole(uow_factory: UnitOfWorkFactory) -> None:
    trl, plain = (
        a_runtime(),
        a_runtime("cpu-tools", python=None, frameworks={}, process_model="cpu"),
    )
    async with uow_factory() as uow:
        assert await uow.runtimes.add(trl) is None
        assert await uow.runtimes.add(plain) is None
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.runtimes.get("trl-gpu") == trl
        assert await uow.runtimes.get("nope") is None
        assert [r.name for r in await uow.runtimes.list()] == ["cpu-tools", "trl-gpu"]
        again = await uow.runtimes.add(a_runtime(image="other/image:1", added_by="eve"))
        assert again == trl  # the stored one comes back; nothing changed
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.runtimes.get("trl-gpu")
        assert stored is not None and stored.image == trl.image and stored.added_by == "admin"
        got = await uow.runtimes.get("cpu-tools")
        assert got is not None and (got.python, got.frameworks) == (None, {})


async def test_an_add_that_is_not_committed_leaves_nothing(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        assert await uow.runtimes.add(a_runtime()) is None
    async with uow_factory() as uow:
        assert await uow.runtimes.get("trl-gpu") is None and await uow.runtimes.list() == []


async def test_replace_needs_the_revision_that_was_read(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.runtimes.add(a_runtime())
        await uow.commit()
    newer = a_runtime(frameworks={"torch": "2.4.0", "trl": "0.13.0"}, revision=2, added_at=at(2))
    async with uow_factory() as uow:
        assert not await uow.runtimes.replace(newer, revision=7)
        assert await uow.runtimes.replace(newer, revision=1)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.runtimes.get("trl-gpu") == newer
        assert not await uow.runtimes.replace(dataclasses.replace(newer, revision=3), revision=1)
        assert not await uow.runtimes.replace(a_runtime("never-added"), revision=1)
        assert await uow.runtimes.get("never-added") is None


async def test_concurrent_adds_of_one_name_store_exactly_one(
    uow_factory: UnitOfWorkFactory,
) -> None:
    first_added = asyncio.Event()

    async def add(image: str, wait: bool) -> RuntimeSpec | None:
        async with uow_factory() as uow:
            if wait:
                await first_added.wait()
            found = await uow.runtimes.add(a_runtime(image=image))
            if not wait:
                first_added.set()
                await asyncio.sleep(0.2)  # hold the row while the other add waits for it
            await uow.commit()
            return found

    one, two = await asyncio.gather(add("first/image:1", False), add("second/image:1", True))
    assert one is None and two is not None and two.image == "first/image:1"
    async with uow_factory() as uow:
        (stored,) = await uow.runtimes.list()
        assert stored.image == "first/image:1"
