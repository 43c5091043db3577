"""``adapters.memory.copies.fresh``: the in-memory store's copies share nothing mutable with
the rows they copy (what ``copy.deepcopy`` guaranteed), whatever the row holds."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from adapters.memory import MemoryStore, MemoryUnitOfWork
from adapters.memory.copies import fresh
from domain.catalog import RecipeLock, RuntimePin, RuntimeSpec
from domain.lifecycle import JobState
from domain.plugins import PluginPin
from domain.retry import RetryPolicy
from tests.contract.builders import a_job, a_preview, a_spec, an_intent


def mutable_parts(value: Any, seen: dict[int, Any] | None = None) -> dict[int, Any]:
    """Every mutable object reachable from ``value``, by id."""
    seen = {} if seen is None else seen
    if isinstance(value, dict | list | set | bytearray):
        if id(value) in seen:
            return seen
        seen[id(value)] = value
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
        for item in items:
            mutable_parts(item, seen)
    elif isinstance(value, tuple | frozenset):
        for item in value:
            mutable_parts(item, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
            seen[id(value)] = value
        for f in dataclasses.fields(value):
            mutable_parts(getattr(value, f.name), seen)
    elif hasattr(value, "__dict__") and not isinstance(value, enum.Enum | type):
        if id(value) in seen:
            return seen
        seen[id(value)] = value
        for item in vars(value).values():
            mutable_parts(item, seen)
    return seen


def assert_shares_nothing_mutable(original: Any) -> Any:
    copied = fresh(original)
    assert copied == original
    assert type(copied) is type(original)
    shared = mutable_parts(original).keys() & mutable_parts(copied).keys()
    assert not shared, f"shared mutable objects: {[mutable_parts(original)[i] for i in shared]}"
    return copied


def a_full_spec() -> Any:
    """A spec with every field that can hold something mutable filled in."""
    pin = RuntimePin(
        "python-3.11",
        "python:3.11-slim",
        "sha256:" + "b" * 64,
        "3.11",
        "single-process",
        frameworks={"torch": "2.3.0"},
        packages={"numpy": "1.26.4"},
    )
    return a_spec(runtime=pin, retry=RetryPolicy(3, frozenset({"failed"}), frozenset({1})))


def test_a_job_copy_shares_no_mutable_part_and_equals_it() -> None:
    job = a_job(spec=a_full_spec())
    copied = assert_shares_nothing_mutable(job)
    copied.spec.params["epochs"] = 99
    copied.spec.env["NEW"] = "1"
    copied.spec.runtime.frameworks["torch"] = "0"
    assert job.spec.params["epochs"] == 3
    assert "NEW" not in job.spec.env
    assert job.spec.runtime.frameworks == {"torch": "2.3.0"}
    assert copied.spec.roles is job.spec.roles  # immutable parts are shared, not rebuilt


def test_a_preview_copy_shares_no_mutable_part() -> None:
    intent = an_intent(
        recipe_lock=RecipeLock("custom/custom", "1.0", "sha256:" + "d" * 64),
        plugins=(PluginPin("p", "1.0", "sha256:" + "e" * 64),),
        retry=RetryPolicy(2),
    )
    assert_shares_nothing_mutable(a_preview(intent=intent, spec=a_full_spec()))


def test_a_runtime_spec_copy_shares_no_mutable_part() -> None:
    spec = RuntimeSpec("r", "img", "3.11", "single-process", frameworks={"torch": "2"})
    assert_shares_nothing_mutable(spec)


@dataclass(frozen=True)
class Odd:
    """Fields typed loosely, or holding what their hint does not say: copied by value."""

    anything: Any
    items: list[dict[str, Any]]
    nested: tuple[Any, ...] = ()
    unknown: UnresolvedHint = None  # type: ignore[name-defined]  # noqa: F821
    later: list[int] = field(default_factory=list)


@dataclass
class Plain:
    """A dataclass that is not frozen: deep-copied whole."""

    values: list[int]


def test_values_behind_loose_or_unresolvable_hints_are_copied() -> None:
    odd = Odd(
        {"a": [1, {2}]},
        [{"x": bytearray(b"1")}],
        ({"k": "v"}, [1], Plain([1]), frozenset({(1, 2)})),
        unknown={"not": "shared"},
        later=[1],
    )
    assert_shares_nothing_mutable(odd)
    assert_shares_nothing_mutable([odd, {"k": (odd,)}])


def test_immutable_values_are_shared() -> None:
    for value in ("s", 1, 1.5, None, b"b", JobState.PENDING, (1, "a"), frozenset({1})):
        assert fresh(value) is value
    assert fresh(RecipeLock("m", "1", "d")) == RecipeLock("m", "1", "d")


async def test_the_store_hands_out_and_takes_in_copies() -> None:
    store = MemoryStore()
    job = a_job(spec=a_full_spec())
    async with MemoryUnitOfWork(store) as uow:
        await uow.jobs.add(job)
        job.spec.params["epochs"] = 1000  # the caller's object, changed after the write
        mine = await uow.jobs.get(job.id)
        assert mine is not None and mine.spec.params["epochs"] == 3
        mine.spec.params["epochs"] = 7  # a read value, changed
        await uow.commit()
    async with MemoryUnitOfWork(store) as uow:
        got = await uow.jobs.get(job.id)
        assert got is not None and got.spec.params["epochs"] == 3
        assert got.spec == a_full_spec()
