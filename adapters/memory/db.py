"""A small in-memory database: committed tables, key locks and transactions.

It mimics PostgreSQL at READ COMMITTED, which is what the contract tests pin down:

* A transaction's writes are private until it commits (``Tx.writes`` over ``Table.rows``).
* Inserting a key another open transaction inserted (or locked) waits for that transaction,
  then sees its outcome — as a unique index does.
* Updating a row takes its row lock (waiting for the holder); ``try_lock`` is SKIP LOCKED.
* A wait that would close a cycle raises Conflict, as PostgreSQL's deadlock detector does.

Everything runs on one event loop; check-then-act sequences between awaits are atomic.
Values are copied on the way in and out so that callers never share mutable state
(``copies.fresh``: only the mutable parts; rows of immutable tables are shared).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from adapters.memory.copies import fresh
from domain.errors import Conflict, NotFound

KeyFn = Callable[[Any], Hashable]


class _Deleted:
    """A tombstone in a transaction's writes: the row is gone once it commits."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETED: Any = _Deleted()
LockKey = tuple[str, str, Hashable]


class _Writes(dict[str, dict[Hashable, Any]]):
    """A transaction's writes by table, made for a table when first touched."""

    def __missing__(self, table: str) -> dict[Hashable, Any]:
        rows: dict[Hashable, Any] = {}
        self[table] = rows
        return rows


@dataclass(frozen=True)
class TableDef:
    name: str
    pk: KeyFn
    uniques: dict[str, KeyFn] = field(default_factory=dict)
    # non-unique indexes (a job's state): ``Tx.scan_by`` reads the rows of a few values
    groups: dict[str, KeyFn] = field(default_factory=dict)
    # True when rows are deeply immutable (frozen dataclasses of tuples, str, int, …): they are
    # shared instead of deep-copied on the way in and out
    immutable: bool = False

    def keys(self, row: Any) -> Iterator[tuple[str, Hashable]]:
        yield "pk", self.pk(row)
        for name, fn in self.uniques.items():
            yield name, fn(row)


class Table:
    """Committed rows plus a unique index per unique key and a set of keys per value of each
    non-unique one."""

    def __init__(self, definition: TableDef) -> None:
        self.definition = definition
        self.rows: dict[Hashable, Any] = {}
        self.index: dict[str, dict[Hashable, Hashable]] = {n: {} for n in definition.uniques}
        self.groups: dict[str, dict[Hashable, set[Hashable]]] = {n: {} for n in definition.groups}
        self.version = 0  # moves on with every committed change
        self.orders: dict[str, tuple[int, list[Any]]] = {}  # name → (version, rows in order)

    def remove(self, pk: Hashable) -> None:
        self.version += 1
        old = self.rows.pop(pk, None)
        if old is not None:
            self._unindex(pk, old)

    def put(self, row: Any) -> None:
        self.version += 1
        pk = self.definition.pk(row)
        old = self.rows.get(pk)
        if old is not None:
            self._unindex(pk, old)
        self.rows[pk] = row
        for name, fn in self.definition.uniques.items():
            self.index[name][fn(row)] = pk
        for name, fn in self.definition.groups.items():
            self.groups[name].setdefault(fn(row), set()).add(pk)

    def _unindex(self, pk: Hashable, old: Any) -> None:
        for name, fn in self.definition.uniques.items():
            if self.index[name].get(fn(old)) == pk:
                del self.index[name][fn(old)]
        for name, fn in self.definition.groups.items():
            members = self.groups[name].get(fn(old))
            if members is not None:
                members.discard(pk)
                if not members:
                    del self.groups[name][fn(old)]

    def find(self, key: str, value: Hashable) -> Any | None:
        if key == "pk":
            return self.rows.get(value)
        pk = self.index[key].get(value)
        return None if pk is None else self.rows[pk]


class Database:
    """Committed tables and the lock table, shared by every transaction."""

    def __init__(self, tables: list[TableDef]) -> None:
        self.tables = {t.name: Table(t) for t in tables}
        self._locks: dict[LockKey, Tx] = {}

    def begin(self) -> Tx:
        return Tx(self)


class Tx:
    """One transaction against a MemoryStore."""

    def __init__(self, store: Database) -> None:
        self.store = store
        self.writes: dict[str, dict[Hashable, Any]] = _Writes()  # table → pk → row
        # (table, unique key) → key value → pk of the last row written with it: ``find`` by a
        # unique key in a large transaction without scanning its writes
        self._written: dict[tuple[str, str], dict[Hashable, Hashable]] = {}
        self.held: set[LockKey] = set()
        self.done = asyncio.Event()
        self.waiting_for: Tx | None = None
        self.closed = False

    # -- reads (read committed + own writes) ----------------------------------------------
    def get(self, table: str, pk: Hashable) -> Any | None:
        return self.find(table, "pk", pk)

    def peek(self, table: str, pk: Hashable) -> Any | None:
        """The visible row, NOT copied: for this module's own checks (existence, a state),
        never to hand out."""
        self._check_open()
        writes = self.writes.get(table)
        if writes and pk in writes:
            row = writes[pk]
            return None if row is DELETED else row
        return self.store.tables[table].rows.get(pk)

    def find(self, table: str, key: str, value: Hashable) -> Any | None:
        self._check_open()
        t = self.store.tables[table]
        writes = self.writes[table]
        if key == "pk":
            if value in writes:
                row = writes[value]
                return None if row is DELETED else self._out(t, row)
            return self._out(t, t.rows.get(value))
        fn = t.definition.uniques[key]
        pk = self._written.get((table, key), {}).get(value)
        if pk is not None:  # else no write of ours has that key (one that moved it: below)
            row = writes[pk]
            if row is not DELETED and fn(row) == value:
                return self._out(t, row)
        found = t.find(key, value)
        if found is not None and t.definition.pk(found) in writes:
            return None  # our own write moved that key away (keys are immutable here)
        return self._out(t, found)

    @staticmethod
    def _out(t: Table, row: Any) -> Any:
        return row if t.definition.immutable or row is None else fresh(row)

    def select(self, table: str, where: Callable[[Any], bool]) -> list[Any]:
        """Copies of the visible rows of ``table`` that satisfy ``where`` (unordered)."""
        self._check_open()
        t = self.store.tables[table]
        return [self._out(t, r) for r in self._visible(table) if r is not DELETED and where(r)]

    def scan(self, table: str, where: Callable[[Any], bool]) -> list[Any]:
        """The visible rows of ``table`` that satisfy ``where`` (unordered), NOT copied: to
        filter and sort before copying only what is returned, through ``copied``."""
        self._check_open()
        return [r for r in self._visible(table) if r is not DELETED and where(r)]

    def scan_by(
        self, table: str, group: str, values: Collection[Hashable], where: Callable[[Any], bool]
    ) -> list[Any]:
        """As ``scan``, over only the rows whose ``group`` key (a non-unique index of the
        table) is one of ``values``."""
        self._check_open()
        t = self.store.tables[table]
        key = t.definition.groups[group]
        writes = self.writes.get(table) or {}
        found = [
            t.rows[pk]
            for value in set(values)
            for pk in t.groups[group].get(value, ())
            if pk not in writes and where(t.rows[pk])
        ]
        found.extend(
            r for r in writes.values() if r is not DELETED and key(r) in values and where(r)
        )
        return found

    def ordered(self, table: str, name: str, key: Callable[[Any], Any]) -> list[Any]:
        """Every visible row of immutable ``table``, sorted by ``key`` (``name`` names that
        order): kept between transactions until the table changes (a pool's 1,000 nodes are
        read by every preview), sorted afresh while this transaction has written to it."""
        self._check_open()
        t = self.store.tables[table]
        assert t.definition.immutable, "only rows that are shared may be kept in order"
        if self.writes.get(table):
            return sorted(self.scan(table, lambda r: True), key=key)
        kept = t.orders.get(name)
        if kept is None or kept[0] != t.version:
            kept = t.orders[name] = (t.version, sorted(t.rows.values(), key=key))
        return list(kept[1])

    def copied(self, table: str, rows: list[Any]) -> list[Any]:
        """Copies of rows that ``scan`` returned, as ``select`` would give them."""
        t = self.store.tables[table]
        return [self._out(t, r) for r in rows]

    def project(
        self, table: str, where: Callable[[Any], bool], fn: Callable[[Any], Any]
    ) -> list[Any]:
        """``fn(row)`` for the visible rows that satisfy ``where``, without copying the rows:
        ``fn`` must return only immutable values (ids, tuples of frozen values, …)."""
        self._check_open()
        return [fn(r) for r in self._visible(table) if r is not DELETED and where(r)]

    def _visible(self, table: str) -> Iterable[Any]:
        """The committed rows with this transaction's writes over them (and tombstones)."""
        rows = self.store.tables[table].rows
        writes = self.writes.get(table)
        return {**rows, **writes}.values() if writes else rows.values()

    def count(self, table: str) -> int:
        self._check_open()
        writes = self.writes[table]
        keys = self.store.tables[table].rows.keys() | writes.keys()
        return sum(1 for k in keys if writes.get(k) is not DELETED)

    # -- writes ------------------------------------------------------------------------------
    def write(self, table: str, row: Any) -> None:
        self._check_open()
        definition = self.store.tables[table].definition
        pk = definition.pk(row)
        self.writes[table][pk] = row if definition.immutable else fresh(row)
        for name, fn in definition.uniques.items():
            self._written.setdefault((table, name), {})[fn(row)] = pk

    def delete(self, table: str, pk: Hashable) -> None:
        """Delete the row with primary key ``pk`` when this transaction commits (the caller
        holds its row lock)."""
        self._check_open()
        self.writes[table][pk] = DELETED

    async def insert(self, table: str, row: Any, what: str) -> None:
        """Insert ``row``; Conflict if any of its unique keys is taken (after waiting for an
        open transaction that holds one)."""
        definition = self.store.tables[table].definition
        for key, value in definition.keys(row):
            await self.lock((table, key, value))
            if self.find(table, key, value) is not None:
                raise Conflict(
                    f"{what} already exists (same id or same unique key)", fix="use a new id"
                )
        self.write(table, row)

    # -- locks -------------------------------------------------------------------------------
    async def lock(self, key: LockKey) -> None:
        """Take ``key``, waiting while another open transaction holds it."""
        while not self.try_lock(key):
            holder = self.store._locks[key]
            self._check_deadlock(holder)
            self.waiting_for = holder
            try:
                await holder.done.wait()
            finally:
                self.waiting_for = None

    def try_lock(self, key: LockKey) -> bool:
        self._check_open()
        holder = self.store._locks.get(key)
        if holder is None:
            self.store._locks[key] = self
            self.held.add(key)
            return True
        return holder is self

    def _check_deadlock(self, holder: Tx) -> None:
        seen: Tx | None = holder
        while seen is not None:
            if seen is self:
                raise Conflict(
                    "deadlock between concurrent units of work", fix="retry the operation"
                )
            seen = seen.waiting_for

    # -- end ---------------------------------------------------------------------------------
    def commit(self) -> None:
        self._check_open()
        for name, rows in self.writes.items():
            table = self.store.tables[name]
            for pk, row in rows.items():
                if row is DELETED:
                    table.remove(pk)
                else:
                    table.put(row)
        self._release()

    def rollback(self) -> None:
        if not self.closed:
            self._release()

    def close(self) -> None:
        self.rollback()
        self.closed = True

    def _release(self) -> None:
        self.writes = _Writes()
        self._written = {}
        for key in self.held:
            del self.store._locks[key]
        self.held.clear()
        done, self.done = self.done, asyncio.Event()
        done.set()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this unit of work has ended; open a new one")


async def compare_and_set(
    tx: Tx,
    table: str,
    what: str,
    row: Any,
    expected: str | None,
    keep: Callable[[Any, Any], Any] | None = None,
) -> None:
    """As UPDATE … WHERE id = … AND state = expected: an invisible row is NotFound; a row
    another transaction is changing is waited for, then re-checked. ``expected`` None: any
    state. ``keep(current, row)``: the row written, from the locked current one (columns an
    UPDATE leaves as they are)."""
    if tx.peek(table, row.id) is None:
        raise NotFound(f"{what} {row.id} does not exist", fix=f"check the {what} id")
    await tx.lock((table, "pk", row.id))
    current = tx.peek(table, row.id)  # not copied: ``write`` copies what it keeps
    if current is None:  # pragma: no cover - rows are never deleted
        raise NotFound(f"{what} {row.id} does not exist", fix=f"check the {what} id")
    if expected is not None and current.state != expected:
        raise Conflict(
            f"{what} {row.id} is {current.state}, not {expected}: another writer changed it",
            fix=f"re-read the {what} and decide again",
        )
    tx.write(table, keep(current, row) if keep is not None else row)


def require(tx: Tx, table: str, pk: str, what: str) -> None:
    """The foreign-key check: the parent must be visible to this transaction."""
    if tx.peek(table, pk) is None:
        raise NotFound(f"{what} {pk} does not exist", fix=f"create the {what} first")
