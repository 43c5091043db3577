"""The tailer: files growing line by line, new files, rotation, truncation, deletion, corrupt
lines, a full spool, restarts; every byte either spooled once or counted."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.telemetry import tailer
from adapters.telemetry.spool import Spool
from adapters.telemetry.tailer import MemberTail, Progress
from adapters.telemetry.tfrecord import frame
from domain.telemetry import SourceBatch
from proto import tb_event_pb2 as tb

pytestmark = pytest.mark.unit

M = "m1"


def line(step: int, **metrics: float) -> bytes:
    return (
        json.dumps({"step": step, "wall_time": 1.7e9 + step, **(metrics or {"loss": step / 2})})
        + "\n"
    ).encode()


def append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(data)


class Rig:
    def __init__(self, root: Path, max_bytes: int = 1 << 30) -> None:
        self.root = root
        self.metrics = root / "metrics"
        self.metrics.mkdir(exist_ok=True)
        self.max_bytes = max_bytes
        self.spool = Spool(root / "spool", max_bytes=max_bytes)
        self.tail = MemberTail(M, self.metrics, self.spool)

    def poll(self, final: bool = False) -> Progress:
        return self.tail.poll(final=final)

    def restart(self) -> None:
        self.tail.close()
        self.spool.close()
        self.spool = Spool(self.root / "spool", max_bytes=self.max_bytes)
        self.tail = MemberTail(M, self.metrics, self.spool)

    def spooled(self) -> list[tuple[str, int, int]]:
        """(source, offset, step) of every point spooled and not acknowledged, in order."""
        batch = self.spool.batch(M, 1 << 30)
        if batch is None:
            return []
        return [
            (b.name, o, s)
            for b in batch.sources
            for o, s in zip(b.points.offset.tolist(), b.points.step.tolist(), strict=True)
        ]

    def counters(self) -> tuple[int, int, int]:
        c = self.spool.counters(M)
        return c.corrupt_records, c.dropped_records, c.dropped_bytes

    def close(self) -> None:
        self.tail.close()
        self.spool.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.close()


def test_a_growing_file_is_read_line_by_line_and_a_partial_line_waits(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    first = line(0)
    append(f, first[:10])
    assert rig.poll().read == 0
    assert rig.spooled() == []
    append(f, first[10:] + line(1)[:5])
    p = rig.poll()
    assert p.read == len(first) and p.behind  # the half-written line is still to come
    assert rig.spooled() == [("metrics.jsonl#0", 0, 0)]
    append(f, line(1)[5:] + line(2))
    rig.poll()
    assert rig.spooled() == [
        ("metrics.jsonl#0", 0, 0),
        ("metrics.jsonl#0", len(first), 1),
        ("metrics.jsonl#0", len(first) + len(line(1)), 2),
    ]
    assert not rig.poll().behind
    assert rig.counters() == (0, 0, 0)


def test_a_new_file_in_a_subdirectory_becomes_a_source(rig: Rig) -> None:
    append(rig.metrics / "metrics.jsonl", line(0))
    rig.poll()
    append(rig.metrics / "rank1" / "train.jsonl", line(7) + line(8))
    (rig.metrics / "notes.txt").write_text("not metrics\n")
    rig.poll()
    assert rig.spooled() == [
        ("metrics.jsonl#0", 0, 0),
        ("rank1/train.jsonl#0", 0, 7),
        ("rank1/train.jsonl#0", len(line(7)), 8),
    ]


def test_rotation_finishes_the_old_file_and_starts_the_next_generation(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    append(f, line(0))
    rig.poll()
    append(f, line(1) + b'{"step": 2, "lo')  # more, and a line cut short by the rotation
    os.rename(f, rig.metrics / "metrics.jsonl.1")  # a name no parser claims
    append(f, line(3))
    rig.poll()  # the new file is read; the old one through its descriptor, up to the cut
    assert rig.spooled() == [
        ("metrics.jsonl#0", 0, 0),
        ("metrics.jsonl#0", len(line(0)), 1),
        ("metrics.jsonl#1", 0, 3),
    ]
    assert rig.counters() == (0, 0, 0)
    assert rig.poll().behind is False  # the old file stopped growing: its cut line is corrupt
    assert rig.counters() == (1, 0, 0)
    assert len(rig.tail._retiring) == 0


def test_a_rotated_file_still_written_through_its_old_descriptor_is_read_on(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    writer = f.open("ab", buffering=0)
    writer.write(line(0))
    rig.poll()
    os.rename(f, rig.metrics / "old.log")
    writer.write(line(1)[:8])
    rig.poll()  # retired, still growing: waited for
    writer.write(line(1)[8:])
    writer.close()
    rig.poll()
    rig.poll()
    assert [s for _, _, s in rig.spooled()] == [0, 1]
    assert rig.counters() == (0, 0, 0)


def test_truncation_starts_a_new_generation_and_counts_unread_bytes_exactly(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    partial = b'{"step": 2, "loss": 1'
    append(f, line(0) + line(1) + partial)
    rig.poll()  # two lines read; the partial one seen, not read
    with f.open("r+b") as w:
        w.truncate(0)
    append(f, line(9))  # shorter than what was read
    rig.poll()
    assert rig.spooled() == [
        ("metrics.jsonl#0", 0, 0),
        ("metrics.jsonl#0", len(line(0)), 1),
        ("metrics.jsonl#1", 0, 9),
    ]
    assert rig.counters() == (0, 0, len(partial))


def test_a_file_rewritten_in_place_beyond_the_read_position_is_noticed(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    append(f, line(0) + line(1))
    rig.poll()
    with f.open("r+b") as w:  # truncated and written again before the next poll, longer
        w.truncate(0)
        w.write(line(5, loss=0.123456) + line(6, loss=0.654321) + line(7))
    rig.poll()
    assert [(src, s) for src, _, s in rig.spooled()] == [
        ("metrics.jsonl#0", 0),
        ("metrics.jsonl#0", 1),
        ("metrics.jsonl#1", 5),
        ("metrics.jsonl#1", 6),
        ("metrics.jsonl#1", 7),
    ]
    assert rig.counters() == (0, 0, 0)


def test_a_deleted_file_is_finished_through_its_descriptor(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    append(f, line(0))
    rig.poll()
    append(f, line(1) + b'{"step"')
    f.unlink()
    rig.poll()
    rig.poll()
    assert [s for _, _, s in rig.spooled()] == [0, 1]
    assert rig.counters() == (1, 0, 0)  # the cut-short last line


def test_a_file_deleted_while_the_collector_was_down_counts_what_it_never_read(
    rig: Rig,
) -> None:
    f = rig.metrics / "metrics.jsonl"
    partial = b'{"step": 1, "loss":'
    append(f, line(0) + partial)
    rig.poll()
    rig.restart()
    f.unlink()
    rig.poll()
    assert rig.counters() == (0, 0, len(partial))
    append(f, line(4))  # the path again: a new generation
    rig.poll()
    assert rig.spooled()[-1] == ("metrics.jsonl#1", 0, 4)


def test_corrupt_lines_are_counted_and_skipped(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    append(f, line(0) + b"not json\n" + b'{"no": "step"}\n' + b"[1, 2]\n" + line(1))
    rig.poll()
    assert [s for _, _, s in rig.spooled()] == [0, 1]
    assert rig.counters() == (3, 0, 0)


def test_scalars_the_gateway_would_refuse_are_left_out_and_counted(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    long_tag = "t" * 300
    append(f, line(0, ok=1.0, **{long_tag: 2.0}) + line(1, ok=3.0))
    append(f, b'{"step": 2, "big": 1' + b"0" * 400 + b', "ok": 4}\n')  # "big": not a metric
    append(f, b'{"step": 99999999999999999999, "ok": 5}\n' + line(3, ok=6.0))
    rig.poll()
    batch = rig.spool.batch(M, 100)
    assert batch is not None
    (b,) = batch.sources
    got = [(s.tag, s.step, s.value) for r in b.points.records() for s in r.scalars]
    assert got == [
        ("ok", 0, 1.0),
        ("ok", 1, 3.0),
        ("ok", 2, 4.0),
        ("ok", 3, 6.0),
    ]
    assert rig.counters()[0] == 2  # the line with a 300-character tag, the step beyond int64
    for s in batch.sources:  # what the gateway checks
        SourceBatch(s.name, s.kind, s.points).check()
        s.points.check(s.name)


def test_a_restart_reads_nothing_twice(rig: Rig) -> None:
    f = rig.metrics / "metrics.jsonl"
    g = rig.metrics / "sub" / "b.jsonl"
    append(f, line(0) + line(1) + line(2)[:7])
    append(g, line(10))
    rig.poll()
    before = rig.spooled()
    rig.restart()
    assert rig.spooled() == before
    append(f, line(2)[7:])
    append(g, line(11))
    rig.poll()
    new = sorted(set(rig.spooled()) - set(before))
    assert len(rig.spooled()) == len(before) + 2
    assert new == [
        ("metrics.jsonl#0", len(line(0)) + len(line(1)), 2),
        ("sub/b.jsonl#0", len(line(10)), 11),
    ]
    assert rig.counters() == (0, 0, 0)


def test_a_full_spool_pauses_reading_and_drops_nothing(tmp_path: Path) -> None:
    rig = Rig(tmp_path, max_bytes=600)
    try:
        rig.tail.chunk = 256  # the spool may exceed its capacity by one chunk
        f = rig.metrics / "metrics.jsonl"
        append(f, b"".join(line(i) for i in range(50)))
        p = rig.poll()
        assert rig.spool.full and p.behind
        got = rig.spooled()
        assert 0 < len(got) < 50
        batch = rig.spool.batch(M, 1000)
        assert batch is not None
        rig.spool.ack(M, batch.up_to)
        steps = [s for _, _, s in got]
        for _ in range(100):
            p = rig.poll()
            batch = rig.spool.batch(M, 1000)
            if batch is not None:
                steps += batch.sources[0].points.step.tolist()
                rig.spool.ack(M, batch.up_to)
            if not p.behind and batch is None:
                break
        assert steps == list(range(50))
        assert rig.counters() == (0, 0, 0)
    finally:
        rig.close()


def test_truncated_while_paused_counts_every_unread_byte(tmp_path: Path) -> None:
    rig = Rig(tmp_path, max_bytes=300)
    try:
        rig.tail.chunk = 256
        f = rig.metrics / "metrics.jsonl"
        data = b"".join(line(i) for i in range(20))
        append(f, data)
        rig.poll()
        assert rig.spool.full
        position = rig.spool.sources(M)["metrics.jsonl"].position
        assert 0 < position < len(data)
        with f.open("r+b") as w:
            w.truncate(0)
        rig.spool.ack(M, 1 << 40)
        rig.poll()
        assert rig.counters() == (0, 0, len(data) - position)
    finally:
        rig.close()


def test_when_the_member_ended_every_source_is_read_to_its_end(rig: Rig) -> None:
    append(rig.metrics / "a.jsonl", line(0) + b'{"step": 1, "lo')
    append(rig.metrics / "b.jsonl", line(5))
    assert rig.poll().behind
    p = rig.poll(final=True)
    assert not p.behind
    assert [s for _, _, s in rig.spooled()] == [0, 5]
    assert rig.counters() == (1, 0, 0)


def test_symlinks_and_fifos_are_never_opened(rig: Rig, tmp_path: Path) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(line(42))
    (rig.metrics / "link.jsonl").symlink_to(secret)
    os.mkfifo(rig.metrics / "pipe.jsonl")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.jsonl").write_bytes(line(43))
    (rig.metrics / "dir").symlink_to(outside, target_is_directory=True)
    append(rig.metrics / "real.jsonl", line(1))
    rig.poll()
    assert rig.spooled() == [("real.jsonl#0", 0, 1)]


def event(step: int, value: float) -> bytes:
    summary = tb.Summary(value=[tb.Summary.Value(tag="train/loss", simple_value=value)])
    return frame(tb.Event(wall_time=1.7e9 + step, step=step, summary=summary).SerializeToString())


def test_tensorboard_event_files_are_read_too(rig: Rig) -> None:
    f = rig.metrics / "run" / "events.out.tfevents.1700000000.host"
    version = frame(tb.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())
    append(f, version + event(0, 0.5) + event(1, 0.25)[:9])
    rig.poll()
    append(f, event(1, 0.25)[9:])
    rig.poll()
    offsets = [len(version), len(version) + len(event(0, 0.5))]
    assert rig.spooled() == [
        ("run/events.out.tfevents.1700000000.host#0", offsets[0], 0),
        ("run/events.out.tfevents.1700000000.host#0", offsets[1], 1),
    ]


def test_a_missing_metrics_directory_is_waited_for(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    try:
        tail = MemberTail(M, tmp_path / "not-yet", spool)
        assert tail.poll() == Progress()
        append(tmp_path / "not-yet" / "m.jsonl", line(3))
        assert tail.poll().read == len(line(3))
        tail.close()
    finally:
        spool.close()


def test_a_line_longer_than_any_accepted_is_skipped_as_corrupt(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(tailer.LONGEST, "jsonl", 4096)
    rig.tail.chunk = 1024
    append(
        rig.metrics / "m.jsonl", line(0) + b'{"step": 1, "x": "' + b"y" * 10_000 + b'"}\n' + line(2)
    )
    for _ in range(5):
        rig.poll()
    assert [s for _, _, s in rig.spooled()] == [0, 2]
    assert rig.counters()[0] >= 1


def test_a_tag_with_nul_or_another_control_character_is_left_out_and_counted(rig: Rig) -> None:
    """PostgreSQL cannot store NUL in text: such a tag made the gateway fail the member's batch
    with an internal error, again and again, so none of its points (nor any later one) was
    ever stored."""
    append(rig.metrics / "metrics.jsonl", line(0, ok=1.0) + line(1, ok=2.0, **{"bad\x00tag": 3.0}))
    append(rig.metrics / "metrics.jsonl", line(2, **{"esc\x1b[2Jtag": 1.0}) + line(3, ok=4.0))
    tb_file = rig.metrics / "events.out.tfevents.1.host"
    nul = tb.Summary(value=[tb.Summary.Value(tag="nul\x00tag", simple_value=1.0)])
    append(tb_file, frame(tb.Event(wall_time=1.7e9, step=5, summary=nul).SerializeToString()))
    append(tb_file, event(6, 0.5))
    rig.poll()
    batch = rig.spool.batch(M, 100)
    assert batch is not None
    got = sorted(
        (s.tag, s.step) for b in batch.sources for r in b.points.records() for s in r.scalars
    )
    assert got == [("ok", 0), ("ok", 1), ("ok", 3), ("train/loss", 6)]
    assert rig.counters()[0] == 3  # the line with a NUL, the line with ESC, the event with NUL
    for s in batch.sources:  # what the gateway checks
        SourceBatch(s.name, s.kind, s.points).check()


def test_a_file_name_that_is_not_utf8_is_skipped_with_one_warning(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A non-UTF-8 name beside good files stopped the whole directory: a traceback every poll
    (the spool cannot store the name) and no point from any file."""
    bad = os.path.join(os.fsencode(rig.metrics), b"bad\xff\xfename.jsonl")
    with open(bad, "wb") as f:
        f.write(line(0))
    append(rig.metrics / "good.jsonl", line(1))
    append(rig.metrics / "run" / "more.jsonl", line(2))
    for _ in range(3):
        rig.poll()
    assert sorted((name, step) for name, _, step in rig.spooled()) == [
        ("good.jsonl#0", 1),
        ("run/more.jsonl#0", 2),
    ]
    warned = [r.getMessage() for r in caplog.records if "not valid UTF-8" in r.getMessage()]
    assert len(warned) == 1 and "bad" in warned[0]


def test_a_huge_pending_tfrecord_is_not_read_again_until_it_can_be_complete(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid header claiming a large record, its body coming a byte at a time: every poll
    read the whole body again (hundreds of MiB of memory and a core for a 250 MiB claim)."""
    f = rig.metrics / "events.out.tfevents.2.host"
    body = tb.Event(wall_time=1.7e9, file_version="x" * (6 << 20)).SerializeToString()
    record = frame(body)
    append(f, event(0, 1.0) + record[: 3 << 20])
    read: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, at: int) -> bytes:
        data = real_pread(fd, n, at)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", pread)
    rig.poll()
    assert [s for _, _, s in rig.spooled()] == [0]
    read.clear()
    for _ in range(20):
        append(f, b"\0")  # the body grows by a byte: the record cannot be complete yet
        rig.poll()
    assert sum(read) < 64 * 1024, sum(read)  # was 20 reads of over 3 MiB
    with f.open("r+b") as w:  # the writer finishes the record (over the bytes above)
        w.seek(len(event(0, 1.0)))
        w.write(record + event(1, 2.0))
    rig.poll()
    assert [s for _, _, s in rig.spooled()] == [0, 1]
    assert rig.counters() == (0, 0, 0)


def test_a_long_pending_jsonl_line_is_searched_for_its_newline_in_new_bytes_only(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = rig.metrics / "m.jsonl"
    start = b'{"step": 1, "x": 1, "pad": "' + b"y" * (3 << 20)
    append(f, line(0) + start)
    read: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, at: int) -> bytes:
        data = real_pread(fd, n, at)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", pread)
    rig.poll()
    read.clear()
    for _ in range(20):
        append(f, b"y")
        rig.poll()
    assert sum(read) < 64 * 1024, sum(read)
    append(f, b'"}\n' + line(2))
    rig.poll()
    assert [s for _, _, s in rig.spooled()] == [0, 1, 2]
