"""The node daemon's side of metrics collection: what its host's collector is told.

Each started member with a collector token gets ``<root>/metrics/<member>``, bind-mounted into
its container at ``/tuneplane/metrics`` (``TUNEPLANE_METRICS_DIR``), and a 0600 member file
``<root>/members/<member>.json`` that only the collector reads (docs/telemetry.md, "Members
directory"): the token never enters the container. When the member has ended, its file says
``"ended": true``; once the collector wrote ``<member>.drained`` (everything read and
acknowledged), the member file, the marker and the metrics directory are removed.

The file also names the member's GPUs (``gpus``: the host's indices, in the member's own order:
``gpus[i]`` is its ``cuda:i``) and, once it runs, where its CPU and memory use can be read
(``usage``: its first process's pid and its cgroup directories), for the collector's ``system``
source; it is rewritten only when something in it changed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from adapters.grpc.node_client import write_private
from domain.node_daemon_ports import JournalEntry
from domain.node_protocol import LIVE_PHASES, Phase
from domain.telemetry import UsageSource

log = logging.getLogger("tuneplane.node")

METRICS_MOUNT = "/tuneplane/metrics"
_ENDED = frozenset({Phase.EXITED, Phase.MISSING})


class CollectorFeed:
    def __init__(self, root: Path) -> None:
        self.members_dir = root / "members"
        self.metrics_root = root / "metrics"
        for d in (root, self.members_dir, self.metrics_root):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.metrics_root, 0o711)  # members' directories are reachable, not listable
        self._written: dict[str, str] = {}
        self._done: set[str] = set()  # drained and removed (in this process's lifetime)

    def metrics_dir(self, member_id: str) -> Path:
        """The member's metrics directory on this host (made writable for any container user)."""
        path = self.metrics_root / member_id
        path.mkdir(exist_ok=True)
        os.chmod(path, 0o777)
        return path

    def sync(
        self, entries: Sequence[JournalEntry], usage: Mapping[str, UsageSource] | None = None
    ) -> None:
        usage = usage or {}
        for e in entries:
            token = e.order.collector_token
            if not token or e.phase not in LIVE_PHASES | _ENDED or e.member_id in self._done:
                continue
            ended = e.phase in _ENDED
            self._put(e, ended=ended, usage=None if ended else usage.get(e.member_id))
        self._sweep()

    def forgotten(self, member_id: str) -> None:
        path = self.members_dir / f"{member_id}.json"
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if not body.get("ended"):
            body["ended"] = True
            text = json.dumps(body)
            write_private(path, text)
            self._written[member_id] = text

    def _put(self, e: JournalEntry, *, ended: bool, usage: UsageSource | None) -> None:
        o = e.order
        body = {
            "job": o.job_id,
            "attempt": o.ref.attempt_id,
            "member": e.member_id,
            "index": o.ref.index,
            "token": o.collector_token,
            "metrics_dir": str(self.metrics_dir(e.member_id)),
            "ended": ended,
            "gpus": list(o.gpu_indices),  # the host's indices, in the member's order (cuda:i)
            "usage": None if usage is None else {"pid": usage.pid, "cgroups": list(usage.cgroups)},
        }
        text = json.dumps(body)
        if self._written.get(e.member_id) == text:
            return
        path = self.members_dir / f"{e.member_id}.json"
        if (self.members_dir / f"{e.member_id}.drained").exists():
            return  # collected to its end already
        write_private(path, text)
        self._written[e.member_id] = text

    def _sweep(self) -> None:
        for marker in self.members_dir.glob("*.drained"):
            member_id = marker.stem
            for path in (self.members_dir / f"{member_id}.json", marker):
                path.unlink(missing_ok=True)
            shutil.rmtree(self.metrics_root / member_id, ignore_errors=True)
            self._written.pop(member_id, None)
            self._done.add(member_id)
            log.info("metrics of member %s collected to the end", member_id)
