"""Security events about node daemons' control sessions, for operators (`tp node events NODE`,
``GET /v1/nodes/{node}/events``).

A node has one live control session at a time (docs/node-backend.md, "One session per node").
A daemon that tries to open a second one while the first is alive — a copy of the node's
credential file, or a second daemon started by mistake — is refused, and the refusal is
recorded here. Events are bounded: the same (node, kind, source) is one row whose count and
last time grow (a refused daemon retrying forever is one row), and a node keeps at most
``KEEP_PER_NODE`` rows, the least recently seen going first.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

KEEP_PER_NODE = 50
MAX_SOURCE = 100
MAX_MESSAGE = 2000


class NodeEventKind(StrEnum):
    SESSION_REFUSED = "session-refused"  # a second session while the node's session was alive


@dataclass(frozen=True, slots=True)
class NodeEvent:
    node: str
    kind: NodeEventKind
    source: str  # where it came from (the refused connection's IP address); "" unknown
    first_at: datetime
    last_at: datetime
    count: int  # how many times it happened, first_at to last_at
    message: str  # what happened, the last time


def printable(text: str, limit: int) -> str:
    """``text`` safe to store and show: control and other invisible characters (NUL included)
    replaced by "?", cut to ``limit`` characters ("…" marks a cut). What a node says about
    itself comes from a peer that may be hostile."""
    cleaned = "".join("?" if unicodedata.category(c)[0] in "CZ" and c != " " else c for c in text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def event(node: str, kind: NodeEventKind, source: str, at: datetime, message: str) -> NodeEvent:
    """A new event (count 1), its texts made printable and bounded."""
    return NodeEvent(
        node, kind, printable(source, MAX_SOURCE), at, at, 1, printable(message, MAX_MESSAGE)
    )
