"""The node daemon's agent over a real SQLite journal, with what the world outside hands it:
an engine error of a whole HTML page or with a NUL, a journal of an older daemon that holds
one, a journal whose disk is full, an output file name that is not UTF-8, a journal of another
engine (the daemon ends instead of reconnecting forever)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from adapters.grpc.node_client import NodeLink, Refusal
from adapters.node.journal import SqliteJournal
from adapters.outputs import FilesystemOutputs
from adapters.sim.node_runtime import SimRuntime
from adapters.tls import client_context, ensure_dev_pki
from application.node_agent import NodeAgent
from domain.node_daemon_ports import JournalEntry
from domain.node_messages import Vote
from domain.node_protocol import NodeCapacity, Phase
from tests.application.test_node_agent import INSTALLATION, order, running

pytestmark = pytest.mark.unit

# as Docker answers when a registry or a proxy answers with an HTML page, and a NUL
HTML = "<html><body>" + "<p>Access denied by proxy policy. " * 160 + "</body></html>"
ENGINE_ERROR = "error parsing HTTP 403 response body: " + HTML + "\x00 oops"
GATEWAY_LIMIT = 4096  # the gateway refuses a message holding a longer text


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "journal.sqlite"
        self.journal = SqliteJournal(self.path, node_name="n1")
        self.journal.set_meta("installation", INSTALLATION)
        self.runtime = SimRuntime("n1")
        self.sent: list[Any] = []
        self.agent = self.new_agent(tmp)

    def new_agent(self, tmp: Path) -> NodeAgent:
        async def send(body: Any) -> None:
            self.sent.append(body)

        outputs = FilesystemOutputs(tmp / "outputs")
        return NodeAgent("n1", self.journal, self.runtime, send, outputs=outputs)

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        await asyncio.gather(*self.agent._tasks.values(), return_exceptions=True)

    def votes(self) -> list[Vote]:
        return [b for b in self.sent if isinstance(b, Vote)]

    def phase(self, member: str = "m0") -> Phase | None:
        e = self.journal.get(member)
        return e.phase if e else None


def write_outputs(where: Path) -> None:
    """One good file, one whose name is not UTF-8, one whose name holds a line break."""
    where.mkdir(parents=True)
    (where / "model.bin").write_bytes(b"weights")
    Path(os.fsdecode(os.path.join(os.fsencode(where), b"bad\xffname"))).write_bytes(b"data\n")
    (where / "two\nlines").write_bytes(b"x")


def said_well(text: str) -> bool:
    return len(text) <= GATEWAY_LIMIT and text.isprintable()


async def test_an_engine_error_of_a_whole_page_with_a_nul_is_journalled_and_voted_bounded(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    h.runtime.refusal = lambda o: ENGINE_ERROR
    await h.agent.recover()
    await h.agent.on_prepare(order())
    await h.settle()
    [vote] = h.votes()
    entry = h.journal.get("m0")
    assert entry is not None and entry.phase is Phase.REFUSED and not vote.yes
    for text in (vote.reason, entry.reason):
        assert said_well(text), text[-200:]
        assert text.startswith("error parsing HTTP 403 response body: <html>")  # its start kept
        assert "… [cut: " in text  # and the cut marked


async def test_a_reason_an_older_daemon_journalled_is_sent_bounded(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    old = JournalEntry(order(), Phase.REFUSED, None, None, ENGINE_ERROR)
    h.journal.put(old)  # as an older daemon wrote it
    exited = JournalEntry(order("m1", 1, gpu_indices=(1,)), Phase.EXITED, None, 1, "a\x00b")
    h.journal.put(exited)
    hello = await h.agent.hello(NodeCapacity(0, None, 1.0, 64), "127.0.0.1", "test")
    reasons = {r.ref.member_id: r.reason for r in hello.journal}
    assert all(said_well(r) for r in reasons.values()), reasons
    assert reasons["m1"] == "a?b" and reasons["m0"].startswith("error parsing HTTP 403")


async def test_a_prepare_the_full_journal_cannot_hold_is_a_busy_no_that_names_it(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    await h.agent.recover()
    db = h.journal._db  # the journal's file system is full: SQLite answers SQLITE_FULL
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    o = order(env={"PAD": "x" * 20000})  # a row that needs pages the file cannot have
    await h.agent.on_prepare(o)  # no exception: the stream would end, the node reconnect
    await h.settle()
    [vote] = h.votes()
    assert (vote.yes, vote.busy) == (False, True)
    assert vote.reason == f"journal {h.path} cannot be written: disk full"
    assert h.journal.get("m0") is None and not h.runtime.containers
    db.execute("PRAGMA max_page_count = 1073741823")  # space freed: the repeat prepares
    await h.agent.on_prepare(o)
    await h.settle()
    assert h.votes()[-1].yes and h.journal.get("m0").phase is Phase.PREPARED  # type: ignore[union-attr]


async def test_an_output_name_that_is_not_utf8_leaves_the_exit_reported(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    await h.agent.recover()
    o = await running(h)  # type: ignore[arg-type]
    where = tmp_path / "outputs" / o.job_id / o.ref.attempt_id / str(o.ref.index)
    write_outputs(where)
    h.runtime.finish("m0", 0)
    await h.agent.watch_once()
    entry = h.journal.get("m0")
    assert entry is not None and entry.phase is Phase.EXITED and entry.exit_code == 0
    assert entry.outputs is not None
    assert [f.path for f in entry.outputs.files] == ["model.bin"]
    assert entry.outputs.left_out_count == 2
    assert any("UTF-8" in why for why, _ in entry.outputs.left_out)
    [report] = [b for b in h.sent if getattr(b, "phase", None) is Phase.EXITED]
    assert report.exit_code == 0 and report.outputs == entry.outputs


async def test_a_journal_of_another_engine_ends_the_daemon_instead_of_reconnecting(
    tmp_path: Path, ca_file: Path
) -> None:
    h = Harness(tmp_path)
    await h.agent.recover()
    await running(h)  # type: ignore[arg-type]
    h.runtime = SimRuntime("n1", engine="engine-of-another-machine")
    agent = h.new_agent(tmp_path)
    (tmp_path / "credential").write_text(
        '{"node": "n1", "pool": "p", "credential": "tpc_x", "credential_id": "c1"}'
    )
    link = NodeLink(
        host="127.0.0.1",
        port=1,  # never reached: the Hello is refused before anything is sent
        tls=client_context(ca_file),
        state_dir=tmp_path,
        agent=agent,
        capacity=NodeCapacity(0, None, 1.0, 64),
        address="127.0.0.1",
        version="test",
        watch_seconds=60,
        retry_max=0.05,
    )
    with pytest.raises(Refusal, match="tp node fence n1"):
        await asyncio.wait_for(link.run(), 10)


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    return ensure_dev_pki(tmp_path / "ca", ["localhost"]).ca.cert
