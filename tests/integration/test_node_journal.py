"""The node daemon's SQLite journal (adapters/node/journal.py): round trips, the epoch,
checksummed rows, and what survives a kill -9 and a torn WAL."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.node.journal import SCHEMA_VERSION, CorruptRow, SqliteJournal
from domain.artifacts import ArtifactFile, Manifest
from domain.errors import InvalidInput, Unavailable
from domain.node_protocol import Phase
from tests.support.journal_writer import entry

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_round_trip_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.db"
    with SqliteJournal(path, node_name="n1") as j:
        assert j.entries() == [] and j.epoch() == 0 and j.get("nobody") is None
        written = [entry("a", i) for i in (5, 1, 0, 4, 2)]
        for e in written:
            j.put(e)
        assert j.get(written[0].member_id) == written[0]
        by_order = sorted(written, key=lambda e: (e.order.ref.attempt_id, e.order.ref.index))
        assert j.entries() == by_order
        changed = replace(written[1], phase=Phase.EXITED, exit_code=-9, reason="killed ✗")
        renewed = replace(
            written[3].order,
            collector_token="eyJ.renewed",
            collector_token_expires_at=datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC),
        )
        j.put(replace(written[3], order=renewed))
        j.put(changed)  # replaces
        j.delete(written[2].member_id)
        j.delete("never-there")  # fine
        j.set_meta("address", "10.0.0.1")
    assert os.stat(path).st_mode & 0o777 == 0o600  # it holds workloads' environments
    with SqliteJournal(path, node_name="n1") as j:
        assert j.get(written[1].member_id) == changed
        assert j.get(written[2].member_id) is None
        kept = j.get(written[3].member_id)
        assert kept is not None and kept.order == renewed
        assert len(j.entries()) == 4
        assert (j.meta("address"), j.meta("node_name")) == ("10.0.0.1", "n1")
        assert j.meta("schema_version") == str(SCHEMA_VERSION)
        assert j.corrupt == []
        mode = j._db.execute("PRAGMA journal_mode").fetchone()[0]
        sync = j._db.execute("PRAGMA synchronous").fetchone()[0]
        assert (mode, sync) == ("wal", 2)  # 2: FULL


def test_epoch_never_goes_back(tmp_path: Path) -> None:
    with SqliteJournal(tmp_path / "j.db") as j:
        j.set_epoch(3)
        j.set_epoch(3)  # the same again: fine
        with pytest.raises(ValueError, match="cannot go back"):
            j.set_epoch(2)
        with pytest.raises(ValueError, match="journal's own"):
            j.set_meta("epoch", "1")
    with SqliteJournal(tmp_path / "j.db") as j:
        assert j.epoch() == 3


def test_a_corrupted_row_is_quarantined_never_returned(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with SqliteJournal(path) as j:
        for i in range(3):
            j.put(entry("c", i))
    db = sqlite3.connect(path)  # a bit flips on disk: the row changes, its crc does not
    db.execute("UPDATE members SET phase = 'running' WHERE member_id = 'mem-c-1'")
    db.execute("UPDATE members SET spec = '{' WHERE member_id = 'mem-c-2'")
    db.commit()
    db.close()
    with SqliteJournal(path) as j:
        assert [c.member_id for c in j.corrupt] == ["mem-c-1", "mem-c-2"]
        assert "checksum" in j.corrupt[0].why
        assert j.entries() == [entry("c", 0)]
        assert j.get("mem-c-1") is None
    with SqliteJournal(path) as j:  # moved aside once, and kept there
        assert j.corrupt == []
        assert [q.member_id for q in j.quarantined()] == ["mem-c-1", "mem-c-2"]
        # damaged while open: skipped and quarantined at the next read
        raw = sqlite3.connect(path)
        raw.execute("UPDATE members SET reason = 'x' WHERE member_id = 'mem-c-0'")
        raw.commit()
        raw.close()
        assert j.entries() == []
        assert j.corrupt == [CorruptRow("mem-c-0", "its checksum does not match its contents")]


def test_files_that_are_not_this_nodes_journal_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(8192))
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE users (id INTEGER)")
    db.commit()
    db.close()
    for path in (junk, other):
        with pytest.raises(InvalidInput) as err:
            SqliteJournal(path)
        assert "not a usable TunePlane node journal" in err.value.message and err.value.fix
    newer = tmp_path / "newer.db"
    SqliteJournal(newer, node_name="n1").close()
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(InvalidInput, match="newer than"):
        SqliteJournal(newer)
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))
    db.commit()
    db.close()
    with pytest.raises(InvalidInput, match="belongs to node 'n1'"):
        SqliteJournal(newer, node_name="n2")


def _writer(
    path: Path, prefix: str, out: Path, count: int | None = None
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.support.journal_writer", str(path), prefix]
    if count is not None:
        args.append(str(count))
    with out.open("wb") as stdout:
        return subprocess.Popen(args, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE)


def _printed(out: Path) -> list[list[str]]:
    lines = out.read_text().split("\n")
    return [ln.split() for ln in lines[:-1]]  # the last piece may be a line cut by the kill


def _wait_for(out: Path, text: str, proc: subprocess.Popen[bytes], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while text not in out.read_text():
        if proc.poll() is not None:
            raise AssertionError(f"the writer died: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"the writer printed no {text!r}"
        time.sleep(0.01)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert proc.stderr is not None
    proc.stderr.close()


def test_every_commit_the_writer_saw_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    rng = random.Random(20240917)
    committed: dict[str, tuple[str, int]] = {}  # member id → (prefix, i)
    epoch = 0
    for rnd in range(5):
        prefix, out = f"r{rnd}", tmp_path / f"out{rnd}.txt"
        proc = _writer(path, prefix, out)
        _wait_for(out, "put", proc)
        time.sleep(rng.uniform(0.05, 0.8))  # a random moment, usually mid-commit
        _kill(proc)
        for words in _printed(out):
            if words[0] == "put":
                committed[words[1]] = (prefix, int(words[1].rsplit("-", 1)[1]))
            elif words[0] == "epoch":
                epoch = max(epoch, int(words[1]))
        with SqliteJournal(path, node_name="n1") as j:
            assert j.corrupt == [] and j.quarantined() == []
            assert j.epoch() >= epoch
            for member_id, (p, i) in committed.items():
                assert j.get(member_id) == entry(p, i), member_id
            assert len(j.entries()) >= len(committed)
    assert len(committed) > 50  # the kills did land among many commits


def _wal_frames(wal: Path) -> tuple[int, int]:
    """(frame size, number of frames) of a WAL file."""
    data = wal.read_bytes()
    page_size = int.from_bytes(data[8:12], "big")
    frame = 24 + page_size
    return frame, (len(data) - 32) // frame


@pytest.mark.parametrize("damage", ["torn-last-frame", "garbage-after", "flipped-last-frame"])
def test_a_torn_wal_tail_loses_only_the_last_commit(tmp_path: Path, damage: str) -> None:
    path, out = tmp_path / "journal.db", tmp_path / "out.txt"
    proc = _writer(path, "w", out, count=20)  # its last commit: set_epoch(2) after entry 19
    _wait_for(out, "done", proc)
    _kill(proc)  # no checkpoint: the commits are in the WAL only
    wal = Path(f"{path}-wal")
    frame, frames = _wal_frames(wal)
    assert frames >= 20
    size = 32 + frames * frame
    with wal.open("r+b") as f:
        if damage == "torn-last-frame":  # the kill came while the last frame was written
            f.truncate(size - frame // 2)
        elif damage == "garbage-after":
            f.seek(size)
            f.write(os.urandom(frame + 100))
        else:
            f.seek(size - 100)
            f.write(b"\x00\xff" * 8)  # inside the last frame's page: its checksum fails
    with SqliteJournal(path, node_name="n1") as j:
        assert j.corrupt == []
        assert j.entries() == sorted(
            (entry("w", i) for i in range(20)),
            key=lambda e: (e.order.ref.attempt_id, e.order.ref.index, e.member_id),
        )
        assert j.epoch() == (2 if damage == "garbage-after" else 1)


def test_outputs_are_kept_beside_their_entry_and_a_damaged_manifest_is_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    files = Manifest.of(
        [ArtifactFile("ckpt.bin", 3, "ab" * 32), ArtifactFile("r.json", 2, "cd" * 32)]
    )
    done = replace(entry("a", 0), phase=Phase.EXITED, exit_code=0, outputs=files)
    other = replace(entry("a", 1), phase=Phase.EXITED, exit_code=0, outputs=Manifest(()))
    with SqliteJournal(path, node_name="n1") as j:
        j.put(done)
        j.put(other)
    with SqliteJournal(path, node_name="n1") as j:
        assert j.get(done.member_id) == done and j.get(other.member_id) == other
        assert j.entries()[0].report().outputs == files  # the Hello replays it
        j.put(replace(other, outputs=None))
        assert j.get(other.member_id).outputs is None  # type: ignore[union-attr]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE outputs SET manifest = replace(manifest, 'ckpt.bin', 'evil.bin')")
    with SqliteJournal(path, node_name="n1") as j:
        assert j.get(done.member_id) == replace(done, outputs=None)
        j.delete(done.member_id)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM outputs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("UPDATE meta SET value = 'abc' WHERE key = 'epoch'", "'epoch' is 'abc'"),
        ("UPDATE meta SET value = '-5' WHERE key = 'epoch'", "'epoch' is '-5'"),
        ("DELETE FROM meta WHERE key = 'epoch'", "'epoch' is missing"),
        ("UPDATE meta SET value = '' WHERE key = 'installation'", "'installation' is ''"),
        ("ALTER TABLE members DROP COLUMN reason", "lacks the column(s) reason"),
    ],
)
def test_a_damaged_meta_row_or_members_table_is_refused_at_open(
    tmp_path: Path, damage: str, why: str
) -> None:
    path = tmp_path / "journal.sqlite"
    with SqliteJournal(path, node_name="n1") as j:
        j.set_meta("installation", "inst-a")
        j.put(entry("d", 0))
    with sqlite3.connect(path) as db:
        db.execute(damage)
    with pytest.raises(InvalidInput) as refused:  # at start, never on every stream later
        SqliteJournal(path, node_name="n1")
    assert str(path) in refused.value.message and why in refused.value.message
    assert "fence the node" in refused.value.fix and "backup" in refused.value.fix


def test_a_write_the_full_disk_refuses_is_unavailable_naming_the_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    with SqliteJournal(path, node_name="n1") as j:
        j.put(entry("f", 0))
        pages = j._db.execute("PRAGMA page_count").fetchone()[0]
        j._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        j._db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite answers SQLITE_FULL
        big = replace(entry("f", 1), reason="x" * 50_000)
        with pytest.raises(Unavailable) as full:
            j.put(big)
        assert full.value.message == f"journal {path} cannot be written: disk full"
        assert str(tmp_path) in full.value.fix
        assert j.get(big.member_id) is None and j.get(entry("f", 0).member_id) == entry("f", 0)
        j._db.execute("PRAGMA max_page_count = 1073741823")  # space again: the same write works
        j.put(big)
        assert j.get(big.member_id) == big
