"""Copies of stored rows that share nothing mutable with the original, at a fraction of
``copy.deepcopy``'s cost.

The in-memory database hands callers copies so that no caller shares mutable state with the
store (``adapters/memory/db.py``). Rows are frozen dataclasses, most of whose parts are
immutable (strings, numbers, datetimes, enums, tuples of frozen dataclasses): only a few fields
hold something mutable (a JobSpec's ``params`` and ``env``, a RuntimePin's ``frameworks``).
``fresh(row)`` copies exactly those and shares the rest, which is what ``deepcopy`` gives up to
identity (an equal value, no mutable object in common) without walking and rebuilding every
immutable part (``deepcopy`` of a Job took about 0.1 ms; this takes a few microseconds).

Which fields may hold something mutable is read once per dataclass type from its type hints:
a field typed ``str``, ``int``, ``datetime``, an enum, a ``Literal``, a frozen dataclass whose
fields are all immutable, or a tuple, frozenset or union of those is shared; any other field
(``dict``, ``list``, ``Any``, ``object``, a class it does not know) is copied by value. A type
whose hints cannot be resolved has every field copied by value; a value of a type it does not
know goes to ``copy.deepcopy``. ``tests/unit/test_memory_copies.py`` checks that no mutable
object reachable from a copy is reachable from its original.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import PurePath
from typing import Any

# values of these types are immutable and contain nothing mutable
ATOMIC: frozenset[type] = frozenset(
    {str, int, float, bool, bytes, complex, type(None), datetime, date, time, timedelta, Decimal}
)

# type → how to copy a value of it (made once per type)
_COPIERS: dict[type, Callable[[Any], Any]] = {}
_immutable_types: dict[type, bool] = {}


def fresh(value: Any) -> Any:
    """A copy of ``value`` that shares no mutable object with it."""
    kind = type(value)
    if kind in ATOMIC:
        return value
    copier = _COPIERS.get(kind)
    if copier is None:
        copier = _COPIERS[kind] = _copier_for(kind)
    return copier(value)


def _same(value: Any) -> Any:
    return value


def _copier_for(kind: type) -> Callable[[Any], Any]:
    if dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return _frozen_copier(kind)
    if issubclass(kind, enum.Enum | PurePath):
        return _same
    if kind is tuple or (issubclass(kind, tuple) and hasattr(kind, "_fields")):  # named tuples
        return _copy_tuple
    return copy.deepcopy  # anything else (a dict subclass, a class of its own): as before


def _copy_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    for k, v in value.items():
        if type(v) not in ATOMIC or type(k) not in ATOMIC:
            return {fresh(k): fresh(v) for k, v in value.items()}
    return dict(value)  # strings, numbers, …: a shallow copy is a deep one


def _copy_list(value: list[Any]) -> list[Any]:
    return [fresh(v) for v in value]


def _copy_set(value: set[Any]) -> set[Any]:
    return {fresh(v) for v in value}


def _copy_tuple(value: tuple[Any, ...]) -> tuple[Any, ...]:
    items = tuple(fresh(v) for v in value)
    if all(a is b for a, b in zip(items, value, strict=True)):
        return value  # nothing in it was mutable: share it (deepcopy does the same)
    return items if type(value) is tuple else type(value)(*items)


def _copy_frozenset(value: frozenset[Any]) -> frozenset[Any]:
    items = [fresh(v) for v in value]
    if all(a is b for a, b in zip(items, value, strict=True)):
        return value
    return frozenset(items)


_COPIERS.update(
    {
        dict: _copy_dict,
        list: _copy_list,
        set: _copy_set,
        tuple: _copy_tuple,
        frozenset: _copy_frozenset,
        bytearray: bytearray,
    }
)


def _frozen_copier(kind: type) -> Callable[[Any], Any]:
    """How to copy a frozen dataclass: the fields that may hold something mutable are
    copied, the others shared; a value with nothing mutable in it is shared whole."""
    mutable, every = _mutable_fields(kind), _field_names(kind)
    if not mutable:
        return _same

    def copy_frozen(value: Any) -> Any:
        changed: dict[str, Any] = {}
        for name in mutable:
            old = getattr(value, name)
            new = fresh(old)
            if new is not old:
                changed[name] = new
        if not changed:
            return value
        out: Any = object.__new__(kind)  # as deepcopy rebuilds it: no __init__, no __post_init__
        for name in every:
            object.__setattr__(out, name, changed.get(name, getattr(value, name)))
        return out

    return copy_frozen


def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


def _mutable_fields(kind: type) -> tuple[str, ...]:
    """The fields of frozen dataclass ``kind`` whose declared type may hold something mutable
    (every field when its hints cannot be resolved)."""
    names = _field_names(kind)
    try:
        hints = typing.get_type_hints(kind)
    except Exception:  # a forward reference it cannot resolve: copy every field by value
        return names
    return tuple(n for n in names if not _immutable_hint(hints.get(n, Any)))


def _immutable_hint(hint: Any) -> bool:
    """Whether every value of type ``hint`` is immutable through and through."""
    if hint in ATOMIC:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType, tuple, frozenset):
        return all(a is Ellipsis or _immutable_hint(a) for a in args) and bool(args)
    if origin is typing.ClassVar:  # pragma: no cover - not a field
        return True
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return True
        if dataclasses.is_dataclass(hint):
            return _immutable_type(hint)
    return False


def _immutable_type(kind: type) -> bool:
    """A frozen dataclass none of whose fields may hold anything mutable."""
    known = _immutable_types.get(kind)
    if known is not None:
        return known
    _immutable_types[kind] = False  # while deciding (a recursive type): assume mutable
    frozen = bool(kind.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    plan = _mutable_fields(kind) if frozen else ("?",)
    result = frozen and not plan
    _immutable_types[kind] = result
    return result
