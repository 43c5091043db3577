"""The node daemon's durable member journal (the ``MemberJournal`` port) on SQLite.

One file in the daemon's state directory, opened in WAL mode with ``synchronous=FULL``: every
``put``, ``delete`` and ``set_epoch`` is committed and on disk when the call returns, so a daemon
killed at any point finds on restart everything it had acted on. A kill -9 in the middle of a
commit leaves a torn WAL tail, which SQLite discards (the frame checksums fail): the journal
then holds exactly the commits that had returned.

Each member row carries a CRC-32 over a canonical encoding of its other columns. Rows that fail
it (or cannot be decoded) are never returned as entries: they are moved to the ``quarantine``
table, logged, and listed in :attr:`SqliteJournal.corrupt`, so a damaged row never silently
becomes a member nor silently vanishes.

The manifest of a member's outputs (recorded when it exits 0) is kept beside its row in the
``outputs`` table, with its digest as the check; a journal written before that table existed
simply has none (no schema change for older daemons to refuse).

Thread-safety: one connection (``check_same_thread=False``) behind a lock; the daemon calls
these methods through ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from adapters.node.journal_rows import (
    COLUMNS,
    CorruptRow,
    decode_row,
    now_ms,
    read_outputs,
    row_crc,
    row_values,
)
from application import instruments as i
from application.instruments import NO_INSTRUMENTS, Instruments
from domain.errors import InvalidInput, Unavailable
from domain.node_daemon_ports import JournalEntry

__all__ = ["FORMAT", "SCHEMA_VERSION", "CorruptRow", "JournalEntry", "SqliteJournal"]

log = logging.getLogger("tuneplane.node.journal")

FORMAT = "tuneplane-node-journal"
SCHEMA_VERSION = 1
_RESERVED = frozenset({"format", "schema_version", "epoch"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS members (
    member_id TEXT PRIMARY KEY,
    attempt_id TEXT NOT NULL,
    member_index INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    phase TEXT NOT NULL,
    container_id TEXT,
    exit_code INTEGER,
    reason TEXT NOT NULL,
    spec TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    crc INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outputs (
    member_id TEXT PRIMARY KEY,
    manifest TEXT NOT NULL,
    digest TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    member_id TEXT,
    row TEXT NOT NULL,
    why TEXT NOT NULL,
    quarantined_at INTEGER NOT NULL
);
"""


class SqliteJournal:
    """The member journal of one node daemon, in the SQLite file ``path`` (created 0600).

    ``node_name``, when given, is recorded on first open and checked on every later one: a
    journal of another node is refused. Raises InvalidInput for a file that is not a TunePlane
    journal, has a newer schema, or is damaged beyond its rows.
    """

    in_memory = False  # every call may fsync: callers run it off the event loop

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        node_name: str | None = None,
        instruments: Instruments = NO_INSTRUMENTS,
    ) -> None:
        self.path = Path(path)
        self.instruments = instruments
        self.corrupt: list[CorruptRow] = []
        self._lock = threading.Lock()
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30
            )
        except sqlite3.Error as exc:
            raise self._refusal(f"it cannot be opened ({exc})") from None
        try:
            self._open(node_name)
        except BaseException:
            self._db.close()
            raise

    def _refusal(self, why: str) -> InvalidInput:
        return InvalidInput(
            f"{self.path} is not a usable TunePlane node journal: {why}",
            fix="point the node daemon at its own state directory, or move this file away "
            "(the daemon then starts with an empty journal and reports its containers as "
            "orphans)",
        )

    def _open(self, node_name: str | None) -> None:
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self._db.execute("PRAGMA synchronous=FULL")
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as exc:
            raise self._refusal(f"SQLite says: {exc}") from None
        if str(mode).lower() != "wal":
            raise self._refusal(f"SQLite would not use WAL mode (it chose {mode})")
        if check != "ok":
            raise self._refusal(f"SQLite's integrity check failed: {check}")
        if tables and "meta" not in tables:
            raise self._refusal("it is an SQLite database of something else")
        with self._write() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION)), ("epoch", "0")],
                )
            elif meta.get("format") != FORMAT:
                raise self._refusal("it is an SQLite database of something else")
            elif not str(meta.get("schema_version", "")).isdigit():
                raise self._refusal(f"its schema version {meta.get('schema_version')!r} is unknown")
            elif int(meta["schema_version"]) > SCHEMA_VERSION:
                raise InvalidInput(
                    f"{self.path} has journal schema {meta['schema_version']}, newer than this "
                    f"daemon's {SCHEMA_VERSION}",
                    fix="run the node daemon version that wrote it (or a newer one)",
                )
            if node_name is not None:
                recorded = meta.get("node_name")
                if recorded is None:
                    db.execute(
                        "INSERT INTO meta (key, value) VALUES ('node_name', ?)", (node_name,)
                    )
                elif recorded != node_name:
                    raise self._refusal(f"it belongs to node {recorded!r}, not {node_name!r}")
            self._check_meta(db.execute("SELECT key, value FROM meta").fetchall())
            self._check_members(db)
            try:
                rows = db.execute(f"SELECT {COLUMNS}, crc FROM members").fetchall()
            except sqlite3.DatabaseError as exc:
                raise self._refusal(f"its members cannot be read (SQLite says: {exc})") from None
            for row in rows:
                self._check(db, row)
            self._count_phases(db)

    def _check_meta(self, rows: list[tuple[Any, Any]]) -> None:
        """Every ``meta`` row the daemon reads later has a value it can use: a damaged one is
        refused now, naming the file, not met as a ValueError on every stream."""
        meta = {str(k): v for k, v in rows}
        epoch = meta.get("epoch")
        if epoch is None:
            raise self._damaged("its meta row 'epoch' is missing")
        if not isinstance(epoch, str) or not (epoch.isascii() and epoch.isdigit()):
            raise self._damaged(f"its meta row 'epoch' is {str(epoch)[:40]!r}, not a number >= 0")
        for key in ("node_name", "installation", "engine"):
            value = meta.get(key)
            if value is None:
                continue  # not recorded yet (learnt later)
            if not isinstance(value, str) or not value or not value.isprintable():
                raise self._damaged(f"its meta row {key!r} is {str(value)[:40]!r}")

    def _check_members(self, db: sqlite3.Connection) -> None:
        """The members table has every column a row is written with (a table altered by hand
        would fail each read and write later)."""
        have = {str(r[1]) for r in db.execute("PRAGMA table_info(members)").fetchall()}
        wanted = [c.strip() for c in COLUMNS.split(",")] + ["crc"]
        lost = [c for c in wanted if c not in have]
        if lost:
            raise self._damaged(f"its members table lacks the column(s) {', '.join(lost)}")

    def _damaged(self, why: str) -> InvalidInput:
        return InvalidInput(
            f"{self.path} is a TunePlane node journal, but damaged: {why}",
            fix="restore this file from a backup; or, if none, fence the node (`tp node fence "
            "NODE --reason …`) and move the file away: the daemon then starts with an empty "
            "journal and re-adopts its members' containers from their labels",
        )

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock, committed (durably) on exit. A write the file
        system refuses (full, read-only, I/O error) is Unavailable, naming the journal: nothing
        of the transaction was kept, and the same write may succeed later."""
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    if db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            db.execute("ROLLBACK")
                    raise
                with self.instruments.timer(i.JOURNAL_FSYNC_SECONDS):
                    try:
                        db.execute("COMMIT")
                    except sqlite3.Error:
                        if db.in_transaction:
                            with contextlib.suppress(sqlite3.Error):
                                db.execute("ROLLBACK")
                        raise
            except sqlite3.OperationalError as exc:
                raise self.unwritable(exc) from None

    def unwritable(self, exc: sqlite3.Error) -> Unavailable:
        """The error of a write the file system refused."""
        why = str(exc)
        if "full" in why:
            why = "disk full"
        return Unavailable(
            f"journal {self.path} cannot be written: {why}",
            fix=f"free space on the file system of {self.path.parent} (or make it writable "
            "again); the daemon holds what it could not journal and tries again",
        )

    def _check(self, db: sqlite3.Connection, row: tuple[Any, ...]) -> JournalEntry | None:
        """The row's entry, or None after quarantining it (inside a write transaction)."""
        try:
            return decode_row(row)
        except ValueError as exc:
            member_id = str(row[0])
            why = f"member {member_id}: {exc}"
            log.error("journal %s: quarantined a corrupt row of %s", self.path, why)
            db.execute(
                "INSERT INTO quarantine (member_id, row, why, quarantined_at) VALUES (?,?,?,?)",
                (member_id, json.dumps(list(row), default=repr), str(exc), now_ms()),
            )
            db.execute("DELETE FROM members WHERE member_id = ? AND crc = ?", (row[0], row[-1]))
            self.corrupt.append(CorruptRow(member_id, str(exc)))
            return None

    def _read(self, where: str = "", args: tuple[Any, ...] = ()) -> list[JournalEntry]:
        query = f"SELECT {COLUMNS}, crc FROM members {where}"
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
            ids = [r[0] for r in rows]
            kept = self._db.execute(
                f"SELECT member_id, manifest, digest FROM outputs WHERE member_id IN "
                f"({','.join('?' * len(ids))})",
                ids,
            ).fetchall()
        outputs = {m: out for m, text, digest in kept if (out := read_outputs(m, text, digest))}
        try:
            entries = [decode_row(r) for r in rows]
        except ValueError:  # damaged since the journal was opened: quarantine, then skip it
            with self._write() as db:
                checked = [self._check(db, r) for r in rows]
            entries = [e for e in checked if e is not None]
        return [replace(e, outputs=outputs.get(e.member_id)) for e in entries]

    # -- MemberJournal ----------------------------------------------------------------------

    def get(self, member_id: str) -> JournalEntry | None:
        found = self._read("WHERE member_id = ?", (member_id,))
        return found[0] if found else None

    def entries(self) -> list[JournalEntry]:
        """Every (intact) entry, by attempt and then member index."""
        return self._read("ORDER BY attempt_id, member_index, member_id")

    def put(self, entry: JournalEntry) -> None:
        """Insert or replace the member's entry (and its outputs' manifest, kept beside it);
        durable when this returns."""
        values = row_values(entry, now_ms())
        with self._write() as db:
            db.execute(
                f"INSERT OR REPLACE INTO members ({COLUMNS}, crc) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (*values, row_crc(values)),
            )
            self._count_phases(db)
            if entry.outputs is None:
                db.execute("DELETE FROM outputs WHERE member_id = ?", (entry.member_id,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO outputs (member_id, manifest, digest) VALUES (?,?,?)",
                    (entry.member_id, json.dumps(entry.outputs.to_dict()), entry.outputs.digest),
                )

    def delete(self, member_id: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM members WHERE member_id = ?", (member_id,))
            db.execute("DELETE FROM outputs WHERE member_id = ?", (member_id,))
            self._count_phases(db)

    def _count_phases(self, db: sqlite3.Connection) -> None:
        """The members gauge by phase (a node holds few members: one small query a write)."""
        rows = db.execute("SELECT phase, count(*) FROM members GROUP BY phase").fetchall()
        self.instruments.replace(i.NODE_MEMBERS, {str(p): float(n) for p, n in rows})

    def epoch(self) -> int:
        """The highest epoch this node was welcomed with (0: never)."""
        return int(self.meta("epoch") or 0)

    def set_epoch(self, epoch: int) -> None:
        """Raise the epoch; ValueError if ``epoch`` is lower than the recorded one."""
        with self._write() as db:
            (current,) = db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
            if epoch < int(current):
                raise ValueError(f"the journal's epoch {current} cannot go back to {epoch}")
            db.execute("UPDATE meta SET value = ? WHERE key = 'epoch'", (str(epoch),))

    # -- the rest -----------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        """A value of the meta table (``node_name``, ``epoch``, ``schema_version``, …)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Record a meta value (durably). ``format``, ``schema_version`` and ``epoch`` are the
        journal's own (ValueError): use :meth:`set_epoch` for the epoch."""
        if key in _RESERVED:
            raise ValueError(f"meta key {key!r} is the journal's own")
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def quarantined(self) -> list[CorruptRow]:
        """Every row ever quarantined in this file (this open's are also in ``corrupt``)."""
        with self._lock:
            rows = self._db.execute("SELECT member_id, why FROM quarantine ORDER BY id").fetchall()
        return [CorruptRow(str(m), str(w)) for m, w in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SqliteJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
