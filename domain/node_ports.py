"""Ports of the node backend on the control plane's side: enrollment, the control links of node
daemons, and the two-phase launch ledger (a daemon's own ports: ``domain/node_daemon_ports.py``).
Same conventions as ``domain.ports`` (missing → None, Conflict → lost race).

The control plane and the node control gateways are separate processes that meet only here, in
the database: the coordinator (in the control plane's supervisor) begins launches and records
decisions; a gateway records what nodes vote and report, and reads what it must tell them.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from domain.admission import Assignment
from domain.artifacts import ScanRequest, ScanResult
from domain.enrollment import JoinToken, NodeCredential
from domain.node_events import NodeEvent
from domain.node_protocol import Decision, MemberReport, NodeCapacity, Phase, Placed
from domain.submission import JobSpec

if TYPE_CHECKING:
    pass


class EnrollmentRepository(Protocol):
    async def add_join_token(self, token: JoinToken) -> None:
        """Store a new join token (its pool must exist, else NotFound)."""
        ...

    async def join_token(self, token_hash: str) -> JoinToken | None: ...

    async def use_join_token(self, token_hash: str, node: str, now: datetime) -> bool:
        """Mark the token used by ``node`` if it is unused and unexpired at ``now``; True when
        this call used it. Concurrent uses of one token: exactly one wins."""
        ...

    async def add_credential(self, credential: NodeCredential) -> None:
        """Store a node's credential (its node must exist, else NotFound)."""
        ...

    async def credential(self, credential_hash: str) -> NodeCredential | None: ...

    async def credentials(self, node: str) -> builtins.list[NodeCredential]:
        """The node's credentials, oldest first."""
        ...

    async def retire_credentials(self, node: str, keep_id: str, valid_until: datetime) -> None:
        """Every credential of ``node`` but ``keep_id`` is refused from ``valid_until`` on (an
        earlier limit already set is kept)."""
        ...

    async def installation(self) -> str:
        """This control plane's installation id: made once with its database, never changed.
        Node daemons label their containers with it, so control planes sharing an engine
        never adopt, reap or count each other's containers."""
        ...


@dataclass(frozen=True, slots=True)
class NodeLink:
    """A node daemon's control stream, as its gateway records it."""

    node: str
    session: int  # raised at every new stream; a stale stream's close changes nothing
    gateway: str  # which gateway process holds it
    connected_at: datetime
    heartbeat_at: datetime
    capacity: NodeCapacity
    address: str  # how peers reach the node (MASTER_ADDR of gangs led from it)
    daemon_version: str = ""
    epoch: int = 1  # the node's fencing epoch
    closed_at: datetime | None = None  # when its gateway saw the stream end (None: open)
    peer: str = ""  # the IP address the stream came from
    instance: str = ""  # the daemon process's random id (its own reconnects carry the same)

    def alive(self, heard_after: datetime) -> bool:
        """The stream is open and its last heartbeat was recorded after ``heard_after``."""
        return self.closed_at is None and self.heartbeat_at > heard_after


class NodeLinkRepository(Protocol):
    async def open(
        self,
        node: str,
        gateway: str,
        capacity: NodeCapacity,
        address: str,
        daemon_version: str,
        now: datetime,
        peer: str = "",
        instance: str = "",
    ) -> NodeLink:
        """A new stream for ``node`` (NotFound if the node does not exist): raise the session
        number, mark the node connected (a fenced node comes back connected but keeps its
        scheduling state) and record what it reported. Returns the link, with the epoch.
        Whether a new session may open is decided by the caller with ``current`` first, in
        the same unit of work."""
        ...

    async def current(self, node: str) -> NodeLink | None:
        """Lock the node's row until the unit of work ends, then read its link afresh: an
        ``open`` that follows in the same unit is decided against this, whichever gateway
        process opens a session of the node at the same time. None: no node, or no link."""
        ...

    async def close(self, node: str, session: int, now: datetime) -> bool:
        """The stream ended: record ``closed_at`` and mark the node disconnected, if
        ``session`` is still its current one (True) — a newer stream is left alone (False)."""
        ...

    async def close_all(
        self, sessions: Sequence[tuple[str, int]], now: datetime
    ) -> builtins.list[str]:
        """``close`` for many streams (node, session) at once (a gateway whose thousands of
        streams ended together, or that stops): the nodes whose current session it closed, by
        name. Node rows are locked in name order."""
        ...

    async def beat(
        self, beats: Sequence[tuple[str, int, datetime]]
    ) -> builtins.list[tuple[str, int]]:
        """Record heartbeats (node, session, time) in one round trip; stale sessions ignored.
        Returns the (node, session) pairs given whose node has a newer session since: their
        streams were superseded (through another gateway) and must end."""
        ...

    async def revive(
        self, sessions: Sequence[tuple[str, int]], now: datetime
    ) -> builtins.list[str]:
        """Nodes marked disconnected (by ``expire``: no heartbeat recorded, e.g. while the
        gateway could not write) whose stream (node, session) is still their latest and not
        closed are connected again; returns their names. A lost (fenced) node is never
        revived. Its own transaction: it locks node rows, which ``beat`` must not do."""
        ...

    async def get(self, node: str) -> NodeLink | None: ...

    async def all(self) -> builtins.list[NodeLink]:
        """Every node's last link, by node name."""
        ...

    async def expire(self, older_than: datetime, now: datetime) -> builtins.list[str]:
        """Mark disconnected every connected node whose last heartbeat is older than
        ``older_than`` (its gateway died); return their names."""
        ...

    async def fence(self, node: str) -> int:
        """Raise the node's epoch (fencing every member placed before); return the new one."""
        ...

    async def epoch(self, node: str) -> int:
        """The node's fencing epoch (1 until it is first fenced). NotFound if absent."""
        ...


class NodeEventRepository(Protocol):
    """Security events about nodes' control sessions (``domain.node_events``)."""

    async def record(self, event: NodeEvent, keep: int) -> NodeEvent:
        """Record ``event`` (count 1, its time both first and last). If the node already has
        an event of the same kind and source, that one is updated instead: count + 1, last
        time and message from ``event``. Then only the node's ``keep`` most recently seen
        events are kept. Returns the event as stored. NotFound if the node does not exist."""
        ...

    async def of_node(self, node: str, limit: int) -> builtins.list[NodeEvent]:
        """The node's events, the most recently seen first (at most ``limit``)."""
        ...


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """One attempt's two-phase launch on the node backend."""

    attempt_id: str
    job_id: str
    began_at: datetime
    master_node: str  # member 0's node
    master_port: int  # the gang's rendezvous port on it
    decision: Decision | None = None
    decided_at: datetime | None = None
    reason: str = ""
    coordinator: str = ""  # the coordinator that began it (one that restarts aborts it)
    retry: bool = False  # an abort that queues the job again (nothing was wrong with it)


@dataclass(frozen=True, slots=True)
class MemberLaunch:
    """One member's part in it: its vote, the last phase its node reported, stop and release."""

    member_id: str
    attempt_id: str
    index: int
    node: str
    epoch: int
    vote: bool | None = None
    vote_reason: str = ""
    vote_busy: bool = False  # a no for a passing condition of its node (the job is queued again)
    voted_at: datetime | None = None
    phase: Phase | None = None
    exit_code: int | None = None
    reason: str = ""
    reported_at: datetime | None = None
    progress: str = ""
    progress_at: datetime | None = None
    stop_requested_at: datetime | None = None
    released_at: datetime | None = None
    engine: str = ""  # the container engine it was prepared on (its node's, with the yes vote)
    # why its node, at its last scan, did not account for it ("": it did): unknown, not ended
    unaccounted: str = ""


@dataclass(frozen=True, slots=True)
class NodeWork:
    """Everything a gateway needs about one member placed on one of its nodes."""

    placed: Placed
    launch: MemberLaunch
    spec: JobSpec
    assignment: Assignment
    members: int  # gang size
    master_addr: str
    master_port: int
    peers: tuple[str, ...] = ()  # every member's node address, by member index
    attempt: int = 1  # the attempt's number (TUNEPLANE_ATTEMPT)


class LaunchLedger(Protocol):
    async def begin(self, plan: LaunchPlan, members: Sequence[MemberLaunch]) -> None:
        """Record a launch and its members. Conflict if the attempt already has one."""
        ...

    async def plan(self, attempt_id: str) -> LaunchPlan | None: ...

    async def members(self, attempt_id: str) -> builtins.list[MemberLaunch]:
        """By index."""
        ...

    async def decide(
        self, attempt_id: str, decision: Decision, reason: str, now: datetime, retry: bool = False
    ) -> bool:
        """Record the decision unless one is recorded (True when this call recorded it). The
        commit decision is the durable point of no return of a gang launch. ``retry`` marks
        an abort after which the job may be queued again (kept only with an abort)."""
        ...

    async def vote(
        self,
        member_id: str,
        epoch: int,
        yes: bool,
        reason: str,
        now: datetime,
        engine: str = "",
        busy: bool = False,
    ) -> bool:
        """Record a member's vote if its epoch matches, its attempt is undecided and it has not
        voted yet; True when recorded. ``engine``: the container engine its node prepared it
        on (only its full scan can later prove the member's container gone)."""
        ...

    async def account(self, member_id: str, epoch: int, why: str, now: datetime) -> bool:
        """Record why the member's node did not account for it (``why``; "" clears it: the node
        holds it again) if the epoch matches; True when recorded."""
        ...

    async def report(self, member_id: str, report: MemberReport, now: datetime) -> bool:
        """Record a reported phase if the epoch matches and ``accepts_phase`` allows the move;
        True when recorded."""
        ...

    async def progress(self, member_id: str, epoch: int, text: str, now: datetime) -> bool:
        """Record preparation progress ("pulling image 40 %") if the epoch matches."""
        ...

    async def request_stop(self, member_ids: Collection[str], now: datetime) -> None:
        """Ask for these members to be stopped (kept if already asked)."""
        ...

    async def release(self, node: str, member_ids: Collection[str], now: datetime) -> None:
        """``node`` was told to forget these members; only those placed on it are released
        (a node forgetting a member it never held must not release another node's)."""
        ...

    async def on_nodes(self, nodes: Collection[str]) -> builtins.list[NodeWork]:
        """Every unreleased member launch placed on these nodes, in one round trip."""
        ...

    async def on_gateway(self, gateway: str) -> builtins.list[NodeWork]:
        """As ``on_nodes`` for the nodes whose link is open at ``gateway`` (``node_links``):
        what a gateway reads each pass, without sending the names of its thousands of nodes."""
        ...

    async def ports_in_use(self, node: str) -> set[int]:
        """Rendezvous ports of undecided or committed launches led from ``node`` whose attempt
        is not final."""
        ...


class OutputScanRepository(Protocol):
    """Requests to hash members' outputs on their nodes again, and the nodes' answers."""

    async def request(self, scan: ScanRequest) -> None: ...

    async def pending(
        self, nodes: Collection[str] | None, since: datetime
    ) -> builtins.list[ScanRequest]:
        """Unanswered requests for ``nodes`` (None: every node) made at or after ``since``
        (older ones lapsed)."""
        ...

    async def answer(self, node: str, result: ScanResult) -> bool:
        """Record the answer of ``node``; False unless the request exists, is for that node and
        was unanswered (a late or misrouted answer changes nothing)."""
        ...

    async def result(self, request_id: str) -> ScanResult | None: ...

    async def prune(self, before: datetime) -> int:
        """Delete requests made before ``before``; how many."""
        ...
