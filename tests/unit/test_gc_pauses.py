"""The gateway's collector policy (entrypoints/gc_pauses.py): what survives a full collection
is frozen, and handed back for one complete collection once the frozen set has grown by half."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from entrypoints.gc_pauses import PausePolicy

pytestmark = pytest.mark.unit


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process's objects back where the collector walks them


def full(policy: PausePolicy) -> None:
    policy("start", {"generation": 2})
    policy("stop", {"generation": 2})


def test_survivors_are_frozen_until_they_grow_by_half_then_walked_once(unfrozen: None) -> None:
    deferred: list[Callable[[], None]] = []
    policy = PausePolicy(deferred.append, regrow=0.5, floor=1000)
    policy("stop", {"generation": 1})  # a young collection: nothing to do
    assert deferred == [] and gc.get_freeze_count() == 0
    full(policy)
    full(policy)  # a second one before the first was handled: handled once
    assert len(deferred) == 1
    deferred.pop()()  # the loop runs it: the last collection was complete, so all is frozen
    base = gc.get_freeze_count()  # frozen objects may die since (never more are frozen)
    assert 0 < base <= policy.base and not policy.complete
    kept = [[i] for i in range(base // 4)]  # a quarter more: frozen at the next full one
    full(policy)
    deferred.pop()()
    assert base < gc.get_freeze_count() < base * 1.5 and not policy.complete
    kept += [[i] for i in range(base // 2)]  # past half again as many once frozen
    full(policy)
    deferred.pop()()
    assert gc.get_freeze_count() > base * 1.5 and not policy.complete
    full(policy)  # the next one hands them all back: the next full collection walks all
    deferred.pop()()
    assert gc.get_freeze_count() == 0 and policy.complete
    full(policy)  # the complete collection: what survived it is frozen, the new base
    deferred.pop()()
    assert base + len(kept) <= gc.get_freeze_count() <= policy.base
    assert not policy.complete


def test_a_closed_loop_leaves_the_policy_idle(unfrozen: None) -> None:
    def closed(_: Callable[[], None]) -> None:
        raise RuntimeError("Event loop is closed")

    policy = PausePolicy(closed)
    full(policy)
    assert not policy.scheduled and gc.get_freeze_count() == 0
