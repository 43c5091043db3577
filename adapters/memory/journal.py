"""An in-memory member journal (the ``MemberJournal`` port) for the simulator and tests.

It survives a simulated daemon crash because the simulator keeps the object and hands it to the
daemon that replaces the crashed one, as a real node keeps its SQLite file. It keeps the
MemberJournal contract the SQLite journal keeps (tests/contract/test_member_journal.py).
"""

from __future__ import annotations

from domain.node_daemon_ports import JournalEntry

RESERVED = frozenset({"format", "schema_version", "epoch"})  # as the SQLite journal's


class MemoryJournal:
    in_memory = True  # called in place, never off the event loop (application/journal_io.py)

    def __init__(self, meta: dict[str, str] | None = None) -> None:
        self._entries: dict[str, JournalEntry] = {}
        self._epoch = 0
        self._meta: dict[str, str] = dict(meta or {})
        self.writes = 0

    def meta(self, key: str) -> str | None:
        return self._meta.get(key)

    def set_meta(self, key: str, value: str) -> None:
        if key in RESERVED:
            raise ValueError(f"meta key {key!r} is the journal's own")
        self._meta[key] = value
        self.writes += 1

    def entries(self) -> list[JournalEntry]:
        return sorted(
            self._entries.values(), key=lambda e: (e.order.ref.attempt_id, e.order.ref.index)
        )

    def get(self, member_id: str) -> JournalEntry | None:
        return self._entries.get(member_id)

    def put(self, entry: JournalEntry) -> None:
        self._entries[entry.member_id] = entry
        self.writes += 1

    def delete(self, member_id: str) -> None:
        self._entries.pop(member_id, None)
        self.writes += 1

    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        if epoch < self._epoch:
            raise ValueError(f"the journal's epoch {self._epoch} cannot go back to {epoch}")
        self._epoch = epoch
