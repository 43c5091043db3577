"""The daemon's side of "a member is declared ended only on proof" (issue 18, defects 1 and 4).

* **Installation.** A daemon labels, lists, re-adopts and removes only the containers of its own
  node *and installation* (the control plane it belongs to), learnt from the gateway's Welcome
  and kept in its journal (``installation``) before it touches the engine: control planes
  sharing one engine never adopt, reap or count each other's containers.
* **Engine.** The journal is bound to the container engine its members run on (``engine``: the
  engine's identity, Docker's /info ID), so a journal copied to another machine, or an engine
  reinstalled under it, is refused instead of reporting every member gone.
* **Re-adoption.** A container of this node and installation that the journal does not hold (its
  row was quarantined as corrupt, or lost) gets its row rebuilt from its labels and state:
  started → followed and reported (running, or exited with its exit code and final log);
  never started → removed (it may be half prepared) and recorded refused. One whose labels do
  not name it fully is reported *unadopted*: its member stays unknown, never failed.
* **Only once accepted.** Re-adoption changes the engine and the journal, so it waits for the
  gateway's Welcome: a daemon the gateway refuses (a restored backup of the state directory, a
  copied credential) may be listing the containers of the node's live daemon on the same
  engine. Before it, ``survey`` only looks (the Hello's scan), and says the scan incomplete
  while it found containers its journal lacks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from application.journal_io import journal_call
from domain.errors import InvalidInput, Unavailable
from domain.node_daemon_ports import FoundContainer, JournalEntry, MemberJournal, MemberRuntime
from domain.node_messages import TOKEN_LOST, PrepareOrder
from domain.node_protocol import EngineScan, Phase

if TYPE_CHECKING:
    from application.node_agent import NodeAgent

log = logging.getLogger("tuneplane.node")

INSTALLATION = "installation"  # journal meta keys
ENGINE = "engine"
NEVER_STARTED = "its journal row was lost before it started; its container was removed"


def rebuilt(found: FoundContainer, node: str, installation: str) -> JournalEntry | None:
    """The journal row of a member whose row was lost, from its container (None: its labels
    do not name it fully). The rest of its order (command, environment, rendezvous) is in the
    container and is never needed again once it started; its collector token is not in labels
    (a secret), so a member launched with one reports it lost and the gateway renews it."""
    if found.ref is None or not found.job_id:
        return None
    order = PrepareOrder(
        ref=found.ref,
        node=node,
        job_id=found.job_id,
        image=found.image,
        command=(),
        env={},
        cpus=found.cpus,
        memory_mb=found.memory_mb,
        gpu_indices=found.gpu_indices,  # still held: a later Prepare must not take them
        source_digest=None,
        members=1,
        process_model="",
        check_port=0,
        collector_token_expires_at=TOKEN_LOST if found.metrics else None,
        installation=installation,
    )
    if found.started:
        return JournalEntry(order, Phase.STARTING, found.container_id)
    return JournalEntry(order, Phase.REFUSED, found.container_id, None, NEVER_STARTED)


async def bind_engine(journal: MemberJournal, runtime: MemberRuntime, node: str) -> str:
    """The engine's identity, checked against (or first recorded in) the journal. Raises
    Unavailable when the engine does not answer; InvalidInput when the journal holds members
    of another engine: none of them can be checked here, so none may be reported gone."""
    engine, recorded = await checked_engine(journal, runtime, node)
    if recorded == engine:
        return engine
    if recorded is not None:
        log.warning("container engine changed from %s to %s (no members held)", recorded, engine)
    await journal_call(journal, journal.set_meta, ENGINE, engine)
    return engine


async def checked_engine(
    journal: MemberJournal, runtime: MemberRuntime, node: str
) -> tuple[str, str | None]:
    """The engine's identity and the one the journal recorded, writing nothing: InvalidInput
    when the journal holds members of another engine (``bind_engine``)."""
    engine = await runtime.engine_id()
    recorded = await journal_call(journal, journal.meta, ENGINE)
    if recorded is None or recorded == engine:
        return engine, recorded
    if await journal_call(journal, lambda: bool(journal.entries())):
        raise InvalidInput(
            f"node {node}'s journal lists members of container engine {recorded}, but this "
            f"daemon reaches engine {engine} (another machine, or a reinstalled engine): their "
            "containers cannot be checked here",
            fix="start the daemon against the engine it used (--docker-host); if that machine "
            f"is gone for good, fence the node (`tp node fence {node} --reason …`), then move "
            "the journal (journal.sqlite in the state directory) away and start again",
        )
    return engine, recorded


async def learn_installation(journal: MemberJournal, node: str, installation: str) -> str:
    """Keep the installation the gateway named (durably, before any engine work); refuse a
    gateway of another installation."""
    recorded = await journal_call(journal, journal.meta, INSTALLATION)
    if not installation:
        if recorded:
            return recorded
        raise InvalidInput(
            "the node control gateway did not name its installation (a control plane older "
            "than this daemon)",
            fix="upgrade the control plane first, then its node daemons",
        )
    if recorded is not None and recorded != installation:
        raise InvalidInput(
            f"node {node} belongs to installation {recorded}, but this gateway is installation "
            f"{installation}: its containers are not this control plane's",
            fix="point the daemon at its own control plane (--server, --ca), or give it its "
            "own --state-dir to enroll with this one",
        )
    if recorded is None:
        await journal_call(journal, journal.set_meta, INSTALLATION, installation)
        log.info("node %s belongs to installation %s", node, installation)
    return installation


async def listing(agent: NodeAgent) -> dict[str, str] | None:
    """member → container of the agent's node and installation, listed in full; None when it
    cannot be (``agent.last_scan`` says why)."""
    if agent.installation is None:
        why = "the daemon has not learnt its installation yet (the gateway's Welcome)"
        agent.last_scan = EngineScan(agent.engine, False, why)
        return None
    try:
        agent.engine = await bind_engine(agent.journal, agent.runtime, agent.node)
        return await agent.runtime.held(agent.installation)
    except Unavailable as exc:
        log.warning("cannot list the containers of node %s: %s", agent.node, exc)
        agent.last_scan = EngineScan(agent.engine, False, str(exc))
        return None


async def survey(agent: NodeAgent) -> EngineScan:
    """The scan a Hello carries, changing nothing in the engine or the journal (the session is
    not accepted yet): complete when every labelled container of this node and installation is
    in the journal or cannot be re-adopted (``unadopted``); incomplete, naming them, when some
    would be re-adopted (after the Welcome: ``adopt``), so their absence from the journal
    proves nothing. InvalidInput when the journal holds members of another engine."""
    if agent.installation is None:
        why = "the daemon has not learnt its installation yet (the gateway's Welcome)"
        agent.last_scan = EngineScan(agent.engine, False, why)
        return agent.last_scan
    pending: list[str] = []
    unadopted: list[str] = []
    try:
        agent.engine, _ = await checked_engine(agent.journal, agent.runtime, agent.node)
        held = await agent.runtime.held(agent.installation)
        known = {e.member_id for e in await journal_call(agent.journal, agent.journal.entries)}
        for mid, cid in sorted(held.items()):
            found = None if mid in known else await agent.runtime.found(cid)
            if found is not None:
                readoptable = rebuilt(found, agent.node, agent.installation) is not None
                (pending if readoptable else unadopted).append(mid)
    except Unavailable as exc:
        log.warning("cannot list the containers of node %s: %s", agent.node, exc)
        agent.last_scan = EngineScan(agent.engine, False, str(exc))
        return agent.last_scan
    why = ""
    if pending:
        named = ", ".join(pending[:5]) + (
            f" and {len(pending) - 5} more" if len(pending) > 5 else ""
        )
        why = (
            f"the engine holds containers of members its journal lacks ({named}): re-adopted "
            "once the gateway accepts this session"
        )
    agent.last_scan = EngineScan(agent.engine, not pending, why, tuple(unadopted))
    return agent.last_scan


async def adopt(agent: NodeAgent, held: dict[str, str], report: bool) -> None:
    """Rebuild the journal row of each listed container the journal does not hold (under the
    member's lock, so a prepare or forget in flight is never taken for an orphan); record the
    complete scan in ``agent.last_scan``."""
    known = {e.member_id for e in await journal_call(agent.journal, agent.journal.entries)}
    orphans: dict[str, str] = {}
    for mid, cid in held.items():
        if mid in known:
            continue
        async with agent.lock(mid):
            found = await agent.runtime.found(cid) if await agent.entry(mid) is None else None
            if found is None:
                continue  # journalled or removed meanwhile
            entry = rebuilt(found, agent.node, agent.installation or "")
            if entry is None:  # left alone, never killed on a guess; a Forget removes it
                orphans[mid] = cid
                log.warning("container %s of member %s cannot be re-adopted", cid, mid)
                continue
            if entry.phase is Phase.REFUSED:  # never started: it may be half prepared
                await agent.runtime.remove(cid)
            await agent.journalled(entry)
            log.warning("member %s re-adopted from its container %s", mid, cid)
            if entry.phase is Phase.STARTING:  # running, or exited: its code and final log
                await agent.observe(entry, cid, report=report)
    agent.orphans = orphans
    agent.last_scan = EngineScan(agent.engine, True, "", tuple(sorted(orphans)))
