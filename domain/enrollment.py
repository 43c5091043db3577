"""Node identity: one-time join tokens and the control credentials they are traded for.

Secrets are stored only as sha256 hashes. A join token is short-lived and used once; a node's
control credential is rotated over the control stream, and the one it replaces keeps working
only until ``valid_until`` (the grace period), so a daemon that missed the rotation can still
reconnect for a while, and a stolen old credential stops working soon after.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

JOIN_TOKEN_TTL_MAX = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class JoinToken:
    token_hash: str
    pool: str
    node_name: str | None  # None: the node names itself when it enrolls
    created_by: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    used_by: str | None = None  # the node that used it

    def why_unusable(self, now: datetime) -> str | None:
        if self.used_at is not None:
            return f"this join token was already used (by node {self.used_by})"
        if now >= self.expires_at:
            return f"this join token expired at {self.expires_at.isoformat(timespec='seconds')}"
        return None


@dataclass(frozen=True, slots=True)
class NodeCredential:
    id: str
    node: str
    credential_hash: str
    created_at: datetime
    valid_until: datetime | None = None  # None: current; else refused from then on

    def valid(self, now: datetime) -> bool:
        return self.valid_until is None or now < self.valid_until
