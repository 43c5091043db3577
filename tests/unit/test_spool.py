"""The collector's spool (SQLite WAL): atomic append with the read position, rows that never
split a record, batches of rows, ack, reopening, capacity, counters, sources and their
generations, and a spool of the earlier one-row-per-record layout taken over."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from adapters.telemetry.columns import Points
from adapters.telemetry.spool import SourceState, Spool, SpooledSource
from domain.errors import InvalidInput
from domain.telemetry import Record, Scalar

pytestmark = pytest.mark.unit

M = "member-1"


def rec(offset: int, step: int, *tags: str) -> Record:
    tags = tags or ("train/loss",)
    return Record(
        offset, tuple(Scalar(t, step, 1.7e9 + step, step + i / 10) for i, t in enumerate(tags))
    )


def put(spool: Spool, member: str, state: SourceState, records: list[Record], **kw: int) -> None:
    spool.append(member, state, Points.from_records(records), **kw)


def cols(b: SpooledSource) -> dict[str, list[object]]:
    p = b.points
    return {
        "tags": [p.tags[i] for i in p.tag.tolist()],
        "offsets": p.offset.tolist(),
        "steps": p.step.tolist(),
        "walls": p.wall.tolist(),
        "values": p.value.tolist(),
    }


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[Spool]:
    s = Spool(tmp_path / "spool")
    yield s
    s.close()


def source(spool: Spool, path: str = "metrics.jsonl", member: str = M) -> SourceState:
    return spool.new_source(member, path, "jsonl", 1, 100, 0)


def test_the_database_is_in_wal_mode_with_full_synchronous(spool: Spool) -> None:
    assert spool._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert spool._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_records_and_the_read_position_are_written_together(spool: Spool) -> None:
    s = source(spool)
    s.position = 40
    put(spool, M, s, [rec(0, 0), rec(20, 1)], corrupt=1)
    assert spool.pending(M) == 2
    assert spool.sources(M)["metrics.jsonl"].position == 40
    assert spool.counters(M).corrupt_records == 1


def test_a_failed_append_writes_neither_records_nor_position(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = source(spool)
    s.position = 20
    put(spool, M, s, [rec(0, 0)])
    used = spool.bytes

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(spool, "_count", boom)
    s.position = 60
    with pytest.raises(OSError):
        put(spool, M, s, [rec(20, 1), rec(40, 2)], corrupt=1)
    monkeypatch.undo()
    assert spool.pending(M) == 1
    assert spool.sources(M)["metrics.jsonl"].position == 20
    assert spool.bytes == used
    put(spool, M, s, [rec(20, 1)])  # the connection is usable afterwards
    assert spool.pending(M) == 2


def test_records_without_scalars_only_advance_the_position(spool: Spool) -> None:
    s = source(spool)
    s.position = 30
    put(spool, M, s, [Record(0, ()), rec(10, 1), Record(20, ())])
    assert spool.pending(M) == 1
    assert spool.sources(M)["metrics.jsonl"].position == 30


def test_a_batch_is_columnar_per_source_in_record_order(spool: Spool) -> None:
    a, b = source(spool, "a.jsonl"), source(spool, "sub/b.jsonl")
    put(spool, M, a, [rec(0, 0, "loss", "lr")])
    put(spool, M, b, [rec(0, 5, "reward")])
    put(spool, M, a, [rec(30, 1, "loss", "lr"), rec(60, 2, "lr")])
    batch = spool.batch(M, 100)
    assert batch is not None
    assert (batch.points, batch.records) == (6, 4)
    first, second = batch.sources
    assert (first.name, first.kind, second.name) == ("a.jsonl#0", "jsonl", "sub/b.jsonl#0")
    got = cols(first)
    assert got["tags"] == ["loss", "lr", "loss", "lr", "lr"]
    assert got["offsets"] == [0, 0, 30, 30, 60]
    assert got["steps"] == [0, 0, 1, 1, 2]
    assert got["walls"] == [1.7e9, 1.7e9, 1.7e9 + 1, 1.7e9 + 1, 1.7e9 + 2]
    assert got["values"] == [0.0, 0.1, 1.0, 1.1, 2.0]
    assert (cols(second)["tags"], cols(second)["offsets"]) == (["reward"], [0])
    first.points.check(first.name)  # what the gateway checks first


def test_rows_never_split_a_record_and_batches_take_whole_rows(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool, "row_points", 4)
    s = source(spool)
    put(spool, M, s, [rec(i * 10, i, "a", "b", "c") for i in range(5)])
    assert spool.pending(M) == 5
    rows = spool._db.execute("SELECT records, points FROM chunks ORDER BY id").fetchall()
    assert rows == [(1, 3)] * 5  # 4 points a row at most: one record of 3 each
    batch = spool.batch(M, 7)  # two rows (6 points); a third would make 9
    assert batch is not None
    assert (batch.points, batch.records) == (6, 2)
    assert cols(batch.sources[0])["offsets"] == [0, 0, 0, 10, 10, 10]
    small = spool.batch(M, 2)  # fewer points than one row: that row, whole
    assert small is not None and (small.points, small.records) == (3, 1)
    monkeypatch.setattr(spool, "row_points", 1)  # a record larger than a row: whole
    put(spool, M, s, [rec(50, 5, "a", "b")])
    assert spool._db.execute("SELECT max(points) FROM chunks").fetchone()[0] == 3


def test_batches_after_a_row_id_and_ack_removes_them(
    spool: Spool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool, "row_points", 2)
    s = source(spool)
    put(spool, M, s, [rec(i * 10, i) for i in range(10)])
    first = spool.batch(M, 4)
    assert first is not None
    second = spool.batch(M, 4, after=first.up_to)  # a second batch in flight
    assert second is not None and cols(second.sources[0])["offsets"] == [40, 50, 60, 70]
    spool.ack(M, first.up_to)
    assert spool.pending(M) == 6
    again = spool.batch(M, 4)  # what was not acknowledged comes again, from the oldest
    assert again is not None and cols(again.sources[0])["offsets"] == [40, 50, 60, 70]
    spool.ack(M, second.up_to)
    last = spool.batch(M, 100)
    assert last is not None and cols(last.sources[0])["offsets"] == [80, 90]
    spool.ack(M, last.up_to)
    assert spool.pending(M) == 0
    assert spool.batch(M, 100) is None
    assert spool.bytes == 0


def test_a_spool_of_the_earlier_layout_is_taken_over(tmp_path: Path) -> None:
    import sqlite3

    directory = tmp_path / "old"
    directory.mkdir()
    db = sqlite3.connect(directory / "spool.sqlite")
    db.executescript(
        "CREATE TABLE records (id INTEGER PRIMARY KEY AUTOINCREMENT, member INTEGER NOT NULL,"
        " source INTEGER NOT NULL, offset INTEGER NOT NULL, points INTEGER NOT NULL,"
        " payload BLOB NOT NULL);"
    )
    pack = msgspec.msgpack.encode
    db.executemany(
        "INSERT INTO records (member, source, offset, points, payload) VALUES (1, 1, ?, ?, ?)",
        [(0, 2, pack([("loss", 3, 1.5, 0.25), ("lr", 3, 1.5, 0.1)])),
         (40, 1, pack([("loss", 4, 2.5, 0.2)]))],
    )  # fmt: skip
    db.commit()
    db.close()
    spool = Spool(directory)
    try:
        spool._db.execute("INSERT INTO members (id, name) VALUES (1, ?)", (M,))
        spool._db.execute(
            "INSERT INTO sources VALUES (1, 1, 'm.jsonl', 0, 'jsonl', 1, 2, 50, 50, x'', 1)"
        )
        assert spool.pending(M) == 2
        batch = spool.batch(M, 100)
        assert batch is not None
        assert cols(batch.sources[0]) == {
            "tags": ["loss", "lr", "loss"],
            "offsets": [0, 0, 40],
            "steps": [3, 3, 4],
            "walls": [1.5, 1.5, 2.5],
            "values": [0.25, 0.1, 0.2],
        }
        tables = {r[0] for r in spool._db.execute("SELECT name FROM sqlite_master")}
        assert "records" not in tables
    finally:
        spool.close()


def test_members_are_apart(spool: Spool) -> None:
    a, b = source(spool, member="a"), source(spool, member="b")
    put(spool, "a", a, [rec(0, 0)], corrupt=2)
    put(spool, "b", b, [rec(0, 1), rec(10, 2)])
    spool.count("b", "dropped_bytes", 7)
    batch = spool.batch("b", 100)
    assert batch is not None and cols(batch.sources[0])["steps"] == [1, 2]
    spool.ack("b", batch.up_to)
    assert (spool.pending("a"), spool.pending("b")) == (1, 0)
    assert spool.counters("a").corrupt_records == 2
    assert spool.counters("a").dropped_bytes == 0
    assert spool.counters("b").dropped_bytes == 7
    assert spool.counters("nobody").corrupt_records == 0


def test_reopening_keeps_records_positions_counters_and_size(tmp_path: Path) -> None:
    first = Spool(tmp_path / "s")
    s = source(first)
    s.position, s.size_seen, s.mark = 99, 120, b"tail"
    put(first, M, s, [rec(0, 0, "x", "y"), rec(50, 1)], corrupt=3)
    first.count(M, "dropped_bytes", 11)
    used = first.bytes
    first.close()
    again = Spool(tmp_path / "s")
    try:
        state = again.sources(M)["metrics.jsonl"]
        assert (state.position, state.size_seen, state.mark, state.inode) == (99, 120, b"tail", 100)
        assert again.counters(M).corrupt_records == 3
        assert again.counters(M).dropped_bytes == 11
        assert again.bytes == used
        batch = again.batch(M, 100)
        assert batch is not None and cols(batch.sources[0])["tags"] == ["x", "y", "train/loss"]
    finally:
        again.close()


def test_a_second_collector_on_the_same_spool_is_refused(spool: Spool) -> None:
    with pytest.raises(InvalidInput, match="another collector"):
        Spool(spool.path.parent)


def test_a_damaged_spool_file_is_refused_with_a_fix(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "spool.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(InvalidInput) as caught:
        Spool(tmp_path / "s")
    assert "move the spool directory aside" in caught.value.fix
    Spool(tmp_path / "s2").close()  # the lock was let go: nothing half-open remains


def test_an_emptied_spool_file_is_refused_not_taken_for_a_new_spool(tmp_path: Path) -> None:
    """A zero-length spool.sqlite was opened as a new spool: every unshipped record lost without
    a word and every source back at generation #0."""
    s = Spool(tmp_path / "s")
    put(s, M, source(s), [rec(0, 0)])
    s.close()
    for name in ("spool.sqlite-wal", "spool.sqlite-shm"):
        (tmp_path / "s" / name).unlink(missing_ok=True)
    (tmp_path / "s" / "spool.sqlite").write_bytes(b"")
    with pytest.raises(InvalidInput) as caught:
        Spool(tmp_path / "s")
    assert str(tmp_path / "s" / "spool.sqlite") in caught.value.message
    assert "empty" in caught.value.message and "restore" in caught.value.fix
    assert (tmp_path / "s" / "spool.sqlite").stat().st_size == 0  # left as it was
    Spool(tmp_path / "s2").close()  # the lock was let go
    with pytest.raises(InvalidInput, match="empty"):  # and is free for the next try
        Spool(tmp_path / "s")


def test_rows_carry_only_the_tag_names_their_points_use(spool: Spool) -> None:
    """Records of many distinct tags parsed together are cut into rows; each row (and so each
    batch) names only its own tags, not every tag of the parse."""
    s = Spool(spool.path.parent.parent / "narrow", row_points=4)
    try:
        wide = [rec(o * 10, o, *(f"w/t{o}_{k}" for k in range(3))) for o in range(4)]
        put(s, M, source(s), wide)
        for after in range(4):
            b = s.batch(M, 1, after)
            assert b is not None
            (only,) = b.sources
            assert sorted(only.points.tags) == [f"w/t{after}_{k}" for k in range(3)]
    finally:
        s.close()


def test_the_spool_is_full_at_capacity_until_acks_free_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s", max_bytes=1000)
    try:
        s = source(spool)
        assert not spool.full
        put(spool, M, s, [rec(i * 10, i) for i in range(20)])
        assert spool.bytes > 0 and not spool.full
        put(spool, M, s, [rec(200 + i * 10, 20 + i) for i in range(20)])
        assert spool.full  # the tailer stops reading; nothing is dropped
        assert spool.counters(M).dropped_records == 0
        batch = spool.batch(M, 30)
        assert batch is not None
        spool.ack(M, batch.up_to)
        assert not spool.full
    finally:
        spool.close()


def test_generations_of_a_path_and_retired_sources(spool: Spool) -> None:
    g0 = source(spool)
    assert (g0.generation, g0.name) == (0, "metrics.jsonl#0")
    g0.position, g0.size_seen = 10, 50
    put(spool, M, g0, [rec(0, 0)])
    spool.retire(M, g0, dropped_bytes=0)  # replaced; still being finished through its fd
    assert "metrics.jsonl" not in spool.sources(M)
    g1 = source(spool)
    assert g1.name == "metrics.jsonl#1"
    assert spool.sources(M)["metrics.jsonl"].id == g1.id
    put(spool, M, g1, [rec(0, 1)])
    batch = spool.batch(M, 100)  # records of both generations, each under its own name
    assert batch is not None
    assert [b.name for b in batch.sources] == ["metrics.jsonl#0", "metrics.jsonl#1"]
    # a restart loses the descriptor of g0: its 40 unread bytes are counted, once
    assert spool.settle_retired(M) == 40
    assert spool.settle_retired(M) == 0
    assert spool.counters(M).dropped_bytes == 40


def test_forget_removes_a_member_entirely(spool: Spool) -> None:
    s = source(spool)
    put(spool, M, s, [rec(0, 0), rec(10, 1)], corrupt=1)
    other = source(spool, member="other")
    put(spool, "other", other, [rec(0, 0)])
    assert spool.forget(M) == 2
    assert spool.pending(M) == 0 and spool.sources(M) == {}
    assert spool.counters(M).corrupt_records == 0
    assert spool.pending("other") == 1
    again = source(spool)
    assert again.generation == 0


def test_values_keep_their_bits(spool: Spool) -> None:
    s = source(spool)
    values = [math.nan, math.inf, -math.inf, 1e-310, -0.0, 2**53 + 1.0]
    put(spool, M, s, [Record(i, (Scalar("v", 2**63 - 1, 0.5, v),)) for i, v in enumerate(values)])
    batch = spool.batch(M, 100)
    assert batch is not None
    got = cols(batch.sources[0])["values"]
    assert [repr(v) for v in got] == [repr(v) for v in values]
    assert cols(batch.sources[0])["steps"][0] == 2**63 - 1
