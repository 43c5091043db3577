"""One control session per node, and the security events of refused ones.

A node's control session is *alive* while its stream is open at its gateway (``closed_at`` is
unset) and its gateway recorded a heartbeat within ``alive_for``. While it is, a new stream of
the same node is refused and the refusal is recorded as a security event (``tp node events``):
a copy of the node's credential file cannot take the node over, replace its address (the
``MASTER_ADDR`` of its gangs) or make the gateway reconcile the wrong journal. The one
exception is the same daemon process (the same ``instance`` id in the stream's metadata): it
opens a new stream only after giving up the old one (it saw it die; the gateway may not have
yet), so its new session replaces the old one at once.

The decision is taken in the database under the node's row lock (``links.current``), so it
holds whichever gateway processes the two streams reach. The address, capacity and version a
node reports are written only when a session opens: only through the live session.

A refused Hello opens no session: what it carries is checked before anything is written (the
codec bounds every number and refuses control characters in every name, ``check_hello`` the
address and version), and a Hello that fails after its session was written (reconciling its
journal) closes that session again (``NodeControl.open``) — else the node's restarted daemon
would be refused as a second session of a node that has none.

A legitimate daemon refused this way (its old stream died without a FIN, or its gateway died)
retries with back-off and gets in once the old session is cut off: at once when the old
stream's gateway notices it silent (three heartbeat intervals), else when its last recorded
heartbeat is ``alive_for`` old (docs/node-backend.md, "One session per node").
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from application.context import Context
from application.policy import OPERATORS, require
from domain.auth import Principal
from domain.errors import Conflict, InvalidInput, NotFound
from domain.node_events import KEEP_PER_NODE, NodeEvent, NodeEventKind, event, printable
from domain.node_messages import Hello
from domain.node_ports import NodeLink

log = logging.getLogger("tuneplane.gateway")

MAX_ADDRESS = 253  # a DNS name's limit; IPv6 literals are shorter
MAX_VERSION = 100


@dataclass(frozen=True, slots=True)
class Caller:
    """Who opens a stream, as the gateway sees it."""

    peer: str = ""  # the IP address the stream comes from
    instance: str = ""  # the daemon process's random id ("" unknown: never the same daemon)


class SessionRefused(Conflict):
    """The node already has a live control session."""


def check_address(address: str) -> None:
    """A node's advertised address: what its peers dial (``MASTER_ADDR``)."""
    if not address or printable(address, MAX_ADDRESS) != address or " " in address:
        raise InvalidInput(
            f"the node's advertised address {address[:80]!r} is empty, too long or holds "
            "spaces or control characters",
            fix="start the daemon with --advertise-address HOST (a host name or IP address "
            "its peers can reach)",
            field="advertise_address",
        )


def check_hello(hello: Hello) -> None:
    """What a node reports about itself is stored and handed to its peers: refuse what no
    daemon sends (control characters, NUL, huge texts) before anything is written."""
    check_address(hello.address)
    if printable(hello.daemon_version, MAX_VERSION) != hello.daemon_version:
        raise InvalidInput(
            f"the daemon version {hello.daemon_version[:80]!r} is too long or holds control "
            "characters",
            fix="run a released node daemon",
            field="daemon_version",
        )


async def open_session(
    ctx: Context, gateway: str, hello: Hello, caller: Caller, alive_for: timedelta
) -> NodeLink:
    """Open a new control session of ``hello.node`` through ``gateway``, or refuse it with
    SessionRefused (recorded as a security event) while another one is alive."""
    check_hello(hello)
    now = ctx.clock.now()
    async with ctx.units.node_fleet() as uow:
        live = await uow.links.current(hello.node)  # the node's row is locked from here on
        if live is not None and live.alive(now - alive_for) and not _same_daemon(live, caller):
            node = await uow.fleet.node(hello.node)
            refused = _refusal(live, node.pool if node else "POOL", alive_for)
            recorded = await uow.node_events.record(_event(live, hello, caller, now), KEEP_PER_NODE)
            await uow.commit()
            if math.log10(recorded.count).is_integer():  # 1, 10, 100, …: the log stays small
                log.warning(
                    "node %s: refused a second control session from %s (%d so far): %s",
                    hello.node, caller.peer or "?", recorded.count, refused.message,
                )  # fmt: skip
            raise refused
        link = await uow.links.open(
            hello.node,
            gateway,
            hello.capacity,
            hello.address,
            hello.daemon_version,
            now,
            peer=caller.peer,
            instance=caller.instance,
        )
        await uow.commit()
    return link


def _same_daemon(live: NodeLink, caller: Caller) -> bool:
    return bool(caller.instance) and caller.instance == live.instance


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _refusal(live: NodeLink, pool: str, timeout: timedelta) -> SessionRefused:
    # the same words at every refusal: the refused daemon logs a repeated reason once
    return SessionRefused(
        f"node {live.node} already has a live control session, since {_when(live.connected_at)} "
        f"from {live.peer or 'an unknown address'} (advertised address {live.address}, daemon "
        f"{live.daemon_version or '?'}): a node has one session at a time",
        fix=f"stop the other daemon of node {live.node}; if its credential file was copied, "
        f"enroll the node again with a new join token (`tp node token create --pool {pool} "
        f"--name {live.node}`), which revokes every copy. A daemon whose own old stream died "
        f"gets in by itself once that session is cut off (at most {timeout.total_seconds():.0f} "
        "s after its last heartbeat)",
    )


def _event(live: NodeLink, hello: Hello, caller: Caller, now: datetime) -> NodeEvent:
    message = (
        f"a daemon with node {live.node}'s credential (from {caller.peer or '?'}, advertising "
        f"{hello.address}, version {hello.daemon_version or '?'}) was refused: session "
        f"{live.session} from {live.peer or '?'} (advertising {live.address}) is live since "
        f"{_when(live.connected_at)}"
    )
    return event(live.node, NodeEventKind.SESSION_REFUSED, caller.peer, now, message)


async def node_events(
    ctx: Context, principal: Principal, node: str, limit: int = 100
) -> list[NodeEvent]:
    """The node's security events, the most recently seen first (operators and admins)."""
    require(principal, OPERATORS, "read the security events of nodes")
    if not node or printable(node, MAX_ADDRESS) != node:
        raise InvalidInput(
            f"{node[:80]!r} is not a node name", fix="see `tp fleet ls`", field="node"
        )
    async with ctx.units.node_fleet() as uow:
        if await uow.fleet.node(node) is None:
            raise NotFound(f"node {node} does not exist", fix="see `tp fleet ls`", field="node")
        return await uow.node_events.of_node(node, limit)
