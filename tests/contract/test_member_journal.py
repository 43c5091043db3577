"""Contract: the MemberJournal port (domain/node_ports.py), the same assertions on both twins.

``sqlite``: adapters/node/journal.py, a real node's journal, in a temporary file; a restart
closes it and opens the file again. ``memory``: adapters/memory/journal.py, the simulator's;
a restart hands the same object to the next daemon, as the simulator does (a node keeps its
file). What only a file can show (checksummed rows, kill -9, a torn WAL, its permissions) stays
in tests/integration/test_node_journal.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.memory.journal import MemoryJournal
from adapters.node.journal import SqliteJournal
from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import ResumeFrom
from domain.node_daemon_ports import MemberJournal
from domain.node_protocol import Phase
from tests.support.journal_writer import entry

pytestmark = pytest.mark.contract

Open = Callable[[], AbstractContextManager[MemberJournal]]


@pytest.fixture(params=["sqlite", "memory"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Open:
    """Opens the node's journal; each call is the daemon starting (again)."""
    if request.param == "sqlite":
        path = tmp_path / "state" / "journal.db"

        @contextlib.contextmanager
        def sqlite() -> Iterator[MemberJournal]:
            with SqliteJournal(path, node_name="n1") as j:
                yield j

        return sqlite
    kept = MemoryJournal()
    return lambda: contextlib.nullcontext(kept)


def test_a_new_journal_is_empty(journal: Open) -> None:
    with journal() as j:
        assert j.entries() == [] and j.epoch() == 0
        assert j.get("nobody") is None and j.meta("address") is None


def test_entries_round_trip_by_member_and_survive_a_restart(journal: Open) -> None:
    written = [entry("a", i) for i in (5, 1, 0, 4, 2)]
    changed = replace(written[1], phase=Phase.EXITED, exit_code=-9, reason="killed ✗")
    renewed = replace(
        written[3].order,
        collector_token="eyJ.renewed",
        collector_token_expires_at=datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    with journal() as j:
        for e in written:
            j.put(e)
        assert j.get(written[0].member_id) == written[0]
        by_member = sorted(written, key=lambda e: (e.order.ref.attempt_id, e.order.ref.index))
        assert j.entries() == by_member
        j.put(replace(written[3], order=renewed))
        j.put(changed)  # replaces
        j.delete(written[2].member_id)
        j.delete("never-there")  # fine
        j.set_meta("address", "10.0.0.1")
        j.set_meta("address", "10.0.0.2")  # replaces
    with journal() as j:
        assert j.get(written[1].member_id) == changed
        assert j.get(written[2].member_id) is None
        kept = j.get(written[3].member_id)
        assert kept is not None and kept.order == renewed
        assert [e.member_id for e in j.entries()] == [
            e.member_id for e in by_member if e.member_id != written[2].member_id
        ]
        assert j.meta("address") == "10.0.0.2"
        j.put(written[2])  # a deleted member may come back (a replayed Prepare)
        assert j.get(written[2].member_id) == written[2]


def test_the_epoch_only_goes_up_and_is_the_journals_own(journal: Open) -> None:
    with journal() as j:
        j.set_epoch(3)
        j.set_epoch(3)  # the same again: fine
        with pytest.raises(ValueError, match="cannot go back"):
            j.set_epoch(2)
        for key in ("epoch", "format", "schema_version"):
            with pytest.raises(ValueError, match="journal's own"):
                j.set_meta(key, "1")
        assert j.epoch() == 3
    with journal() as j:
        assert j.epoch() == 3
        j.set_epoch(4)
        assert j.epoch() == 4


def test_outputs_are_kept_beside_their_entry(journal: Open) -> None:
    files = Manifest.of(
        [ArtifactFile("ckpt.bin", 3, "ab" * 32), ArtifactFile("r.json", 2, "cd" * 32)]
    )
    done = replace(entry("a", 0), phase=Phase.EXITED, exit_code=0, outputs=files)
    other = replace(entry("a", 1), phase=Phase.EXITED, exit_code=0, outputs=Manifest(()))
    with journal() as j:
        j.put(done)
        j.put(other)
    with journal() as j:
        assert j.get(done.member_id) == done and j.get(other.member_id) == other
        assert j.entries()[0].report().outputs == files  # the Hello replays it
        j.put(replace(other, outputs=None))
        found = j.get(other.member_id)
        assert found is not None and found.outputs is None


def test_an_order_keeps_its_attempt_and_the_checkpoint_it_resumes_from(journal: Open) -> None:
    files = Manifest.of([ArtifactFile("state.npz", 3, "a" * 64), ArtifactFile("s/j", 0, "b" * 64)])
    plain = entry("r", 0)
    resumed = replace(
        plain, order=replace(plain.order, attempt=3, resume=ResumeFrom("ckpt-9", 2, 9, files))
    )
    stepless = replace(
        entry("r", 1), order=replace(entry("r", 1).order, attempt=2, resume=ResumeFrom(
            "last", 1, None, Manifest(())))
    )  # fmt: skip
    with journal() as j:
        for e in (resumed, stepless):
            j.put(e)
    with journal() as j:
        assert j.get(resumed.member_id) == resumed and j.get(stepless.member_id) == stepless
