"""The gateway's collector policy (entrypoints/gc_pauses.py): what survives a full collection
is frozen, and handed back for one complete collection once what the process holds (its
small-object blocks, read without walking the frozen set) has grown by half."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator

import pytest

from entrypoints.gc_pauses import Pacer, PausePolicy, held

pytestmark = pytest.mark.unit


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process's objects back where the collector walks them


def full(policy: PausePolicy) -> None:
    policy("start", {"generation": 2})
    policy("stop", {"generation": 2})


def grow(until: float) -> list[object]:
    """Objects kept until the process holds more than ``until`` blocks."""
    kept: list[object] = []
    while held() <= until:
        kept.extend([i + 1000] for i in range(10_000))  # three blocks each: list, array, int
    return kept


def test_survivors_are_frozen_until_the_process_grows_by_half_then_walked_once(
    unfrozen: None,
) -> None:
    deferred: list[Callable[[], None]] = []
    policy = PausePolicy(deferred.append, regrow=0.5, floor=1000)
    policy("stop", {"generation": 1})  # a young collection: nothing to do
    assert deferred == [] and gc.get_freeze_count() == 0
    full(policy)
    full(policy)  # a second one before the first was handled: handled once
    assert len(deferred) == 1
    deferred.pop()()  # the loop runs it: the last collection was complete, so all is frozen
    base = policy.base
    assert gc.get_freeze_count() > 0 and base > 0 and not policy.complete
    kept = grow(base * 1.2)  # a fifth more: frozen at the next full one
    full(policy)
    deferred.pop()()
    assert gc.get_freeze_count() >= len(kept) and not policy.complete and policy.base == base
    kept += grow(base * 1.5)  # past half again as much
    full(policy)  # the next one hands them all back: the next full collection walks all
    deferred.pop()()
    assert gc.get_freeze_count() == 0 and policy.complete
    full(policy)  # the complete collection: what survived it is frozen, the new base
    deferred.pop()()
    assert gc.get_freeze_count() >= len(kept) and policy.base > base * 1.5
    assert not policy.complete


def test_a_closed_loop_leaves_the_policy_idle(unfrozen: None) -> None:
    def closed(_: Callable[[], None]) -> None:
        raise RuntimeError("Event loop is closed")

    policy = PausePolicy(closed)
    full(policy)
    assert not policy.scheduled and gc.get_freeze_count() == 0


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_pacer_collects_the_young_and_freezes_the_survivors_of_generation_1(
    unfrozen: None,
) -> None:
    policy = PausePolicy(lambda _: None, regrow=0.5, floor=10**9)  # never a complete one here
    pacer = Pacer(policy, middle_every=2)
    garbage = Cycle()
    alive = [[i] for i in range(100)]  # no cycles: freed by reference counting
    del garbage
    assert pacer.tick() == 0  # a young collection: the cycle is freed, survivors promoted
    assert gc.get_freeze_count() == 0
    assert pacer.tick() == 1  # generation 1, then its survivors frozen
    frozen = gc.get_freeze_count()
    assert frozen >= len(alive)
    del alive  # frozen objects freed by reference counting leave the frozen set at once
    assert gc.get_freeze_count() <= frozen - 100


def test_the_pacer_walks_everything_once_the_process_has_grown_by_half(
    unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gc.collect()
    gc.freeze()
    policy = PausePolicy(lambda _: None, regrow=0.5, floor=1000)
    policy.base = held()
    pacer = Pacer(policy, middle_every=1)

    def walked() -> int:
        raise AssertionError("the pacer walked the frozen set (gc.get_freeze_count)")

    count = gc.get_freeze_count
    monkeypatch.setattr(gc, "get_freeze_count", walked)  # the session-42 stop: never again
    few = [[i] for i in range(10)]
    assert pacer.tick() == 1 and few  # frozen; the process has not grown by half
    start = held()
    leaked: list[Cycle] = []
    while held() <= policy.base * 1.6:
        leaked.extend(Cycle() for _ in range(10_000))
    assert pacer.tick() == 2  # grown past half: walked once, all frozen again
    assert pacer.complete == 1 and not policy.complete
    before = policy.base
    frozen = count()
    del leaked  # garbage, in cycles: frozen, it stays until the next complete collection
    assert held() > before * 0.9 and count() > frozen * 0.9
    more: list[Cycle] = []
    while held() <= before * 1.5:
        more.extend(Cycle() for _ in range(10_000))
    grown_to = held()
    assert pacer.tick() == 2  # grown by half again: the leaked cycles are freed now
    assert policy.base < grown_to - (before - start) // 2  # what the leaked cycles held
    assert pacer.tick() == 1  # and back to freezing
    assert more


def test_by_default_each_paced_collection_takes_generation_1_and_freezes_its_survivors(
    unfrozen: None,
) -> None:
    """Each survivor is walked once (in the tick after it was made), then frozen: no pause
    walks more than one interval's survivors."""
    policy = PausePolicy(lambda _: None, regrow=0.5, floor=10**9)
    pacer = Pacer(policy)
    garbage = Cycle()
    freed = weakref.ref(garbage)
    del garbage
    first = [[i] for i in range(100)]
    generation = pacer.tick()
    frozen, older = gc.get_freeze_count(), len(gc.get_objects(1)) + len(gc.get_objects(2))
    assert generation == 1  # the cycle freed, the survivors frozen at once
    assert frozen >= len(first) and older == 0  # nothing left for a later walk
    assert freed() is None
    second = [[i] for i in range(100)]
    generation = pacer.tick()
    now, older = gc.get_freeze_count(), len(gc.get_objects(1)) + len(gc.get_objects(2))
    assert generation == 1 and now >= frozen + len(second) and older == 0
