"""The node control gateway's use cases: one ``Session`` per connected node daemon.

The gateway process (``tp gateway node``) holds the streams; this module decides what they
carry. On ``open`` the node's journal is reconciled with the ledger; each node message is
checked (stream order, placement, fencing epoch) before anything is recorded, and a refused
message changes nothing; ``commands`` derives, for every connected node in one database round
trip, the command each of its members needs (``domain.node_protocol.command_for``), re-sending
an unanswered one only after ``resend_after`` (every command is idempotent on the node).
Heartbeats are answered at once and written to the database in batches (``flush``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from application import instruments as i
from application import node_commands
from application.batched import Batched
from application.context import Context
from application.enrollment import (
    NodeIdentity,
    confirm_rotation,
    rotate_credential,
)
from application.node_absence import (
    engine_of,
    foreign,
    reconcile,
    record_report,
    unaccounted,
)
from application.node_commands import Attention, Outgoing
from application.node_outputs import due_scans, record_answer, record_reported
from application.node_sessions import Caller, open_session
from application.token_renewal import due_renewals, token_expiry
from domain.coordination_ports import LAUNCH_NEWS
from domain.errors import Unauthenticated
from domain.node_messages import (
    CredentialAck,
    FetchOutput,
    Hello,
    Inventory,
    LogChunk,
    OutputsScanned,
    Progress,
    Rotation,
    ScanOutputs,
    TokenRenewal,
    Vote,
)
from domain.node_ports import MemberLaunch
from domain.node_protocol import (
    CommandKind,
    EngineScan,
    MemberRef,
    MemberReport,
    Phase,
    Placed,
    not_proof,
    refusal,
)

log = logging.getLogger("tuneplane.gateway")

NodeMessage = Vote | Progress | MemberReport | LogChunk | CredentialAck | OutputsScanned | Inventory


@dataclass(frozen=True, slots=True)
class ControlSettings:
    heartbeat: timedelta = timedelta(seconds=5)
    resend_after: timedelta = timedelta(seconds=10)
    rotate_every: timedelta = timedelta(days=1)
    rotation_grace: timedelta = timedelta(minutes=10)
    session_timeout: timedelta = timedelta(seconds=30)  # a silent session is dead (node_sessions)


@dataclass
class Session:
    node: str
    number: int
    epoch: int
    identity: NodeIdentity
    held: dict[str, tuple[MemberRef, Phase]] = field(default_factory=dict)
    placed: dict[str, Placed] = field(default_factory=dict)
    sent: dict[str, tuple[CommandKind, datetime]] = field(default_factory=dict)
    logs: dict[str, list[bytes]] = field(default_factory=dict)
    last_seq: int = 0
    refused: int = 0
    rotation: Rotation | None = None  # sent, not yet acknowledged
    credential_at: datetime | None = None  # when the credential in use was made
    tokens: dict[str, datetime] = field(default_factory=dict)  # member → its token's expiry
    launches: dict[str, MemberLaunch] = field(default_factory=dict)  # the ledger's rows, by member
    scan: EngineScan | None = None  # the node's last full scan of its engine (Hello, Inventory)
    installation: str = ""  # this control plane's, told to the node in the Welcome


class NodeControl:
    def __init__(self, ctx: Context, gateway: str, settings: ControlSettings | None = None):
        self.ctx = ctx
        self.gateway = gateway
        self.settings = settings or ControlSettings()
        self._beats: dict[str, tuple[int, datetime]] = {}
        self._writing = asyncio.Lock()  # a flush never lands after its node's close
        self._scans_sent: dict[str, datetime] = {}  # output scan requests sent, and when
        # (node, session) of streams a newer session replaced (seen by ``flush``): to be cut
        self.superseded: set[tuple[str, int]] = set()
        self._installation = ""  # made once with the database; read at the first connect
        self._ends = Batched(self._close_all)  # streams' ends, recorded together
        self._attention = Attention()  # sessions the incremental passes look at (node_commands)
        self._rotate_at: datetime | None = None  # no live credential due before (None: none)

    # -- stream lifecycle -------------------------------------------------------------------

    async def open(
        self, identity: NodeIdentity, hello: Hello, caller: Caller | None = None
    ) -> Session:
        """A node's stream begins: record the link (SessionRefused while another session of
        the node is alive), reconcile its journal."""
        if hello.node != identity.node:
            raise Unauthenticated(
                f"this credential belongs to node {identity.node}, not {hello.node}",
                fix="start the daemon with its own state directory",
            )
        link = await open_session(
            self.ctx, self.gateway, hello, caller or Caller(), self.settings.session_timeout
        )
        session = Session(hello.node, link.session, link.epoch, identity)
        try:
            session.installation = await self.installation()
            await node_commands.refresh(self.ctx, [session])
            await reconcile(self, session, hello.journal, hello.scan)
            if hello.journal:
                await self.ctx.signals.notify(LAUNCH_NEWS)
            await self._check_credential(session)
            await self.rotations([session])
        except BaseException:  # no Welcome: the session is closed, not left live (node_sessions)
            log.warning("node %s: session %d closed: its Hello failed", hello.node, link.session)
            with contextlib.suppress(Exception):  # the Hello's own error is what the node hears
                await asyncio.shield(self.close(session))
            raise
        self._attention.add(session)
        self._rotation_due(session)
        log.info("node %s connected (session %d, epoch %d)", hello.node, link.session, link.epoch)
        return session

    async def close(self, session: Session) -> None:
        """The stream of ``session`` ended: record it. The ends of streams that end together
        are written in one transaction (``links.close_all``): ten thousand of them when a
        gateway stops or a network splits, which one transaction each would queue ahead of
        the heartbeats' flush (``_writing``) for a minute."""
        self._attention.drop(session)
        await self._ends(session)

    async def _close_all(self, sessions: list[Session]) -> None:
        async with self._writing:
            for session in sessions:  # their beats not yet written (a newer session's stay)
                beat = self._beats.get(session.node)
                if beat is not None and beat[0] == session.number:
                    del self._beats[session.node]
            async with self.ctx.units.nodes() as uow:
                closed = await uow.links.close_all(
                    [(s.node, s.number) for s in sessions], self.ctx.clock.now()
                )
                await uow.commit()
        if len(closed) > 3:
            log.info("%d nodes disconnected: %s, …", len(closed), ", ".join(closed[:3]))
        for node in closed[:3]:
            log.info("node %s disconnected", node)

    def heartbeat(self, session: Session) -> None:
        self._beats[session.node] = (session.number, self.ctx.clock.now())

    async def flush(self) -> int:
        """Write the heartbeats received since the last flush (one round trip), then connect
        again any of those nodes that were marked disconnected while their stream was alive
        (their heartbeats could not be written for a while)."""
        async with self._writing:
            beats, self._beats = self._beats, {}
            if not beats:
                return 0
            with self.ctx.instruments.timer(i.HEARTBEAT_FLUSH_SECONDS):
                async with self.ctx.units.nodes() as uow:
                    stale = await uow.links.beat([(n, s, at) for n, (s, at) in beats.items()])
                    await uow.commit()
            self.superseded.update(stale)
            async with self.ctx.units.nodes() as uow:
                revived = await uow.links.revive(
                    [(n, s) for n, (s, _) in beats.items()], self.ctx.clock.now()
                )
                await uow.commit()
        if revived:
            log.warning("heartbeats of %s recorded again: connected", ", ".join(revived))
        return len(beats)

    # -- node messages ----------------------------------------------------------------------

    async def handle(self, session: Session, seq: int, message: NodeMessage) -> str | None:
        """Check and record one node message. Returns why it was refused, or None."""
        if seq <= session.last_seq:
            return self._refuse(
                session, f"replayed message {seq} (last accepted {session.last_seq})"
            )
        session.last_seq = seq
        self._attention.add(session)  # what it says may change what its members need
        if isinstance(message, CredentialAck):
            return await self._rotated(session, message)
        if isinstance(message, Inventory):  # a full scan after one that could not complete
            await node_commands.refresh(self.ctx, [session])
            await reconcile(self, session, message.journal, message.scan)
            await self.ctx.signals.notify(LAUNCH_NEWS)
            return None
        if isinstance(message, OutputsScanned):  # its member may be long released: no refusal
            if not await record_answer(self.ctx, session.node, message):
                return self._refuse(session, f"no open output scan {message.request_id} here")
            return None
        ref = message.ref
        why = refusal(session.placed.get(ref.member_id), ref, session.node)
        if why is not None:
            if isinstance(message, MemberReport) and ref.member_id not in session.placed:
                session.held[ref.member_id] = (ref, message.phase)  # unknown: it gets a Forget
            return self._refuse(session, why)
        why = foreign(session, ref.member_id)
        if why is not None:  # a copy on another engine: it gets an Abort, never a Commit
            if isinstance(message, Vote):
                phase = Phase.PREPARED if message.yes else Phase.REFUSED
                session.held[ref.member_id] = (ref, phase)
            elif isinstance(message, MemberReport):  # what it says of its copy proves nothing
                session.held[ref.member_id] = (ref, message.phase)
                await unaccounted(self.ctx, session, ref, not_proof(session.node, why))
                return None
            return self._refuse(session, why)
        now = self.ctx.clock.now()
        if isinstance(message, Vote):
            phase = Phase.PREPARED if message.yes else Phase.REFUSED
            session.held[ref.member_id] = (ref, phase)
            async with self.ctx.units.nodes() as uow:
                await uow.launches.vote(
                    ref.member_id,
                    ref.epoch,
                    message.yes,
                    message.reason,
                    now,
                    engine_of(session),
                    busy=message.busy,
                )
                await uow.launches.report(
                    ref.member_id, MemberReport(ref, phase, None, message.reason), now
                )
                await uow.commit()
            await self.ctx.signals.notify(LAUNCH_NEWS)  # the coordinator may decide now
        elif isinstance(message, Progress):
            async with self.ctx.units.nodes() as uow:
                await uow.launches.progress(ref.member_id, ref.epoch, message.text(), now)
                await uow.commit()
        elif isinstance(message, MemberReport):
            session.held[ref.member_id] = (ref, message.phase)
            token_expiry(session, message)
            await self._report(session, message)
            await self.ctx.signals.notify(LAUNCH_NEWS)
        else:
            await self._log(session, message)
        return None

    async def vote_for(self, ref: MemberRef, yes: bool, reason: str, engine: str = "") -> None:
        """Vote on a node's behalf (the gateway cannot even send it the Prepare), or record a
        vote its node journalled but the stream lost (``engine``: the node's)."""
        async with self.ctx.units.nodes() as uow:
            now = self.ctx.clock.now()
            await uow.launches.vote(ref.member_id, ref.epoch, yes, reason, now, engine)
            await uow.commit()

    async def installation(self) -> str:
        """This control plane's installation id (the Welcome tells it to each node)."""
        if not self._installation:
            async with self.ctx.units.nodes() as uow:
                self._installation = await uow.enrollment.installation()
        return self._installation

    def _refuse(self, session: Session, why: str) -> str:
        session.refused += 1
        log.debug("node %s: refused: %s", session.node, why)
        return why

    async def _report(self, session: Session, report: MemberReport) -> None:
        # The manifest first: once the exit is in the ledger the supervisor may end the job,
        # and a job page drawn then showed a completed member with "No output files recorded"
        # until the manifest's own transaction landed (issue 25). A manifest recorded for an
        # exit whose report then fails is harmless: the node sends the exit again, with it.
        if report.log_pending:  # its final log comes first, then the exit again: held till then
            log.debug("node %s: exit of %s held for its final log", session.node, report.ref)
            return
        placed = session.placed.get(report.ref.member_id)
        if placed is not None and report.outputs is not None:
            await record_reported(self.ctx, session.node, placed.job_id, report)
        await record_report(self.ctx, session, report)

    async def scans(
        self, sessions: list[Session]
    ) -> list[tuple[Session, ScanOutputs | FetchOutput]]:
        """Output scan and fetch requests (``tp artifacts verify``, a download of a file a node
        keeps) for these nodes, due now."""
        by_node = {s.node: s for s in sessions}
        due = await due_scans(self.ctx, by_node, self._scans_sent)
        return [(by_node[node], message) for node, message in due]

    async def _log(self, session: Session, chunk: LogChunk) -> None:
        if chunk.live:
            async with self.ctx.units.jobs() as uow:
                limit = self.ctx.limits.max_log_bytes
                await uow.logs.append_live(chunk.ref.member_id, chunk.offset, chunk.data, limit)
                await uow.commit()
            return
        parts = session.logs.setdefault(chunk.ref.member_id, [])
        parts.append(chunk.data)
        if not chunk.last:
            return
        data = b"".join(session.logs.pop(chunk.ref.member_id))
        limit = self.ctx.limits.max_log_bytes
        async with self.ctx.units.jobs() as uow:  # every member's own final log
            await uow.logs.save(
                chunk.ref.attempt_id,
                chunk.ref.index,
                data[-limit:],
                chunk.truncated or len(data) > limit,
            )
            await uow.commit()

    # -- credentials ------------------------------------------------------------------------

    async def _check_credential(self, session: Session) -> None:
        """At connect. A node that uses its newest credential has stored it, so the older ones
        end after the grace period even if its acknowledgement was lost with a stream."""
        async with self.ctx.units.nodes() as uow:
            credentials = await uow.enrollment.credentials(session.node)
        current = next((c for c in credentials if c.id == session.identity.credential_id), None)
        if current is None:
            return
        session.credential_at = current.created_at
        newest = max(credentials, key=lambda c: c.created_at)
        older_valid = any(c.id != current.id and c.valid_until is None for c in credentials)
        if newest.id == current.id and older_valid:
            await confirm_rotation(self.ctx, session.node, current.id, self.settings.rotation_grace)

    async def renewals(self, sessions: list[Session]) -> list[tuple[Session, TokenRenewal]]:
        """Newer collector tokens for long runs (``application/token_renewal.py``)."""
        return await due_renewals(self.ctx, sessions)

    async def rotations(self, sessions: list[Session]) -> list[tuple[Session, Rotation]]:
        """New credentials for the nodes whose credential is older than ``rotate_every`` (one
        rotation in flight per node); the caller sends each over its node's stream."""
        now = self.ctx.clock.now()
        due: list[tuple[Session, Rotation]] = []
        for s in sessions:
            if (
                s.rotation is None
                and s.credential_at is not None
                and now - s.credential_at >= self.settings.rotate_every
            ):
                secret, stored = await rotate_credential(self.ctx, s.node)
                s.rotation = Rotation(secret, stored.id, now + self.settings.rotation_grace)
                due.append((s, s.rotation))
        return due

    async def _rotated(self, session: Session, ack: CredentialAck) -> str | None:
        rotation = session.rotation
        if rotation is None or ack.credential_id != rotation.credential_id:
            return self._refuse(session, f"no rotation to credential {ack.credential_id} pending")
        await confirm_rotation(
            self.ctx, session.node, ack.credential_id, self.settings.rotation_grace
        )
        session.rotation = None
        session.identity = NodeIdentity(session.node, ack.credential_id)
        session.credential_at = self.ctx.clock.now()
        self._rotation_due(session)
        log.info("node %s stored its new credential %s", session.node, ack.credential_id)
        return None

    # -- commands ---------------------------------------------------------------------------

    async def commands(self, sessions: list[Session]) -> dict[str, list[Outgoing]]:
        """What each node must be told now, by node name (``application/node_commands.py``)."""
        return await node_commands.commands(self.ctx, self.settings.resend_after, sessions)

    # -- the gateway's passes over its live sessions (by node): incremental ------------------

    async def commands_due(self, live: Mapping[str, Session]) -> dict[str, list[Outgoing]]:
        """``commands`` for the live sessions that can need one (``node_commands.due``)."""
        return await node_commands.due(
            self.ctx, self.settings.resend_after, live, self._attention, self.gateway
        )

    async def renewals_due(self, live: Mapping[str, Session]) -> list[tuple[Session, TokenRenewal]]:
        """``renewals`` over the busy sessions only (an idle one holds no token)."""
        return await self.renewals(self._attention.live(live))

    async def rotations_due(self, live: Mapping[str, Session]) -> list[tuple[Session, Rotation]]:
        """``rotations`` over every live session, only once the earliest credential is due."""
        if self._rotate_at is None or self.ctx.clock.now() < self._rotate_at:
            return []
        sessions = list(live.values())
        due = await self.rotations(sessions)
        self._rotate_at = None
        for session in sessions:
            self._rotation_due(session)
        return due

    def attended(self) -> set[str]:
        """The nodes the next incremental pass looks at, besides those with ledger work."""
        return self._attention.nodes()

    def _rotation_due(self, session: Session) -> None:
        if session.rotation is not None or session.credential_at is None:
            return  # one in flight (the acknowledgement brings it back), or none known
        at = session.credential_at + self.settings.rotate_every
        if self._rotate_at is None or at < self._rotate_at:
            self._rotate_at = at

    async def scans_due(
        self, live: Mapping[str, Session]
    ) -> list[tuple[Session, ScanOutputs | FetchOutput]]:
        """``scans`` for the live sessions, by node."""
        due = await due_scans(self.ctx, live, self._scans_sent)
        return [(s, message) for node, message in due if (s := live.get(node)) is not None]
