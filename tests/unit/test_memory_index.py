"""The in-memory database's non-unique indexes (``TableDef.groups``, ``Tx.scan_by``): the
rows of a few values, read as a full scan would read them, this transaction's writes included."""

from __future__ import annotations

from dataclasses import dataclass

from adapters.memory.db import Database, TableDef


@dataclass(frozen=True)
class Row:
    id: str
    state: str
    n: int = 0


def db() -> Database:
    return Database([TableDef("t", pk=lambda r: r.id, groups={"state": lambda r: r.state})])


def ids(rows: list[Row]) -> list[str]:
    return sorted(r.id for r in rows)


def test_scan_by_reads_what_a_scan_reads_with_the_transactions_own_writes() -> None:
    d = db()
    tx = d.begin()
    for i, state in enumerate(["a", "a", "b", "c"]):
        tx.write("t", Row(f"r{i}", state, i))
    assert ids(tx.scan_by("t", "state", {"a"}, lambda r: True)) == ["r0", "r1"]  # uncommitted
    tx.commit()
    assert ids(tx.scan_by("t", "state", {"a", "b"}, lambda r: True)) == ["r0", "r1", "r2"]
    assert ids(tx.scan_by("t", "state", {"a"}, lambda r: r.n > 0)) == ["r1"]

    tx.write("t", Row("r0", "b"))  # moved to another value, not committed
    tx.delete("t", "r1")
    other = d.begin()
    assert ids(tx.scan_by("t", "state", {"a"}, lambda r: True)) == []
    assert ids(tx.scan_by("t", "state", {"b"}, lambda r: True)) == ["r0", "r2"]
    assert ids(other.scan_by("t", "state", {"a"}, lambda r: True)) == ["r0", "r1"]  # committed
    tx.commit()
    assert ids(other.scan_by("t", "state", {"a"}, lambda r: True)) == []
    assert ids(other.scan_by("t", "state", {"b"}, lambda r: True)) == ["r0", "r2"]
    assert ids(other.scan_by("t", "state", {"c", "x"}, lambda r: True)) == ["r3"]
    assert d.tables["t"].groups["state"] == {"b": {"r0", "r2"}, "c": {"r3"}}  # none left empty


def test_scan_by_agrees_with_a_scan_after_many_moves() -> None:
    d = db()
    states = "abcd"
    for step in range(200):
        tx = d.begin()
        tx.write("t", Row(f"r{step % 17}", states[step * 7 % 4], step))
        if step % 5 == 0:
            tx.delete("t", f"r{step % 13}")
        for wanted in ({"a"}, {"b", "c"}, set(states)):
            assert ids(tx.scan_by("t", "state", wanted, lambda r: True)) == ids(
                tx.scan("t", lambda r, w=wanted: r.state in w)  # type: ignore[misc]
            )
        if step % 3:
            tx.commit()
        else:
            tx.rollback()


def test_ordered_rows_follow_every_change_committed_or_own() -> None:
    d = Database([TableDef("t", pk=lambda r: r.id, immutable=True)])
    tx, other = d.begin(), d.begin()
    for i in (3, 1, 2):
        tx.write("t", Row(f"r{i}", "a", -i))
    by_n = "n"
    assert ids(tx.ordered("t", by_n, lambda r: r.n)) == ["r1", "r2", "r3"]  # own writes
    assert other.ordered("t", by_n, lambda r: r.n) == []
    tx.commit()
    first = other.ordered("t", by_n, lambda r: r.n)
    assert [r.id for r in first] == ["r3", "r2", "r1"]
    first.clear()  # the caller's list: the kept order is not changed by it
    assert [r.id for r in other.ordered("t", by_n, lambda r: r.n)] == ["r3", "r2", "r1"]
    tx.write("t", Row("r0", "a", -10))
    tx.delete("t", "r3")
    assert [r.id for r in tx.ordered("t", by_n, lambda r: r.n)] == ["r0", "r2", "r1"]
    assert [r.id for r in other.ordered("t", by_n, lambda r: r.n)] == ["r3", "r2", "r1"]
    tx.commit()
    assert [r.id for r in other.ordered("t", by_n, lambda r: r.n)] == ["r0", "r2", "r1"]
