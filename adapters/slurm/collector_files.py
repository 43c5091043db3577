"""What the control plane writes for each Slurm member's collector at its launch: the member
file with its member-scoped collector token, and the telemetry gateway's CA (docs/slurm.md,
"Metrics: a collector per member"; the layout is in ``adapters/slurm/collector.py``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from adapters.slurm.collector import CA_FILE, SlurmCollector, member_dir, member_file
from adapters.slurm.files import write_whole
from domain.errors import Unavailable
from domain.ports import Clock, LaunchRequest
from domain.telemetry import MemberScope
from domain.telemetry_ports import TokenSigner


@dataclass
class CollectorFiles:
    collector: SlurmCollector
    tokens: TokenSigner
    clock: Clock
    token_lifetime_seconds: int

    async def write(self, directory: Path, request: LaunchRequest) -> None:
        """The member's collector file with its member-scoped token (0600 in a 0700
        directory: readable by the jobs' Slurm user only), and the gateway's CA. Written once:
        a repeated launch keeps the file the member may already have marked ended."""
        path = directory / member_dir(request.member_index) / f"{request.member_id}.json"
        if await asyncio.to_thread(path.exists):
            return
        scope = MemberScope(
            request.job_id, request.attempt_id, request.member_id, request.member_index
        )
        token = await self.tokens.issue(scope, self.clock.now(), self.token_lifetime_seconds)
        metrics = str(directory / f"metrics-{request.member_index}")
        text = member_file(
            request.job_id, request.attempt_id, request.member_id, request.member_index,
            token, metrics,
        )  # fmt: skip
        await asyncio.to_thread(_write, directory, path, text, self.collector.ca)


def _write(directory: Path, path: Path, text: str, ca: str) -> None:
    try:
        pem = Path(ca).read_bytes()
    except OSError as exc:
        raise Unavailable(
            f"the telemetry gateway's CA {ca} cannot be read: {exc.strerror}",
            fix="point TUNEPLANE_SLURM_TELEMETRY_CA at the CA (PEM) that signed the"
            " telemetry gateway's certificate",
        ) from None
    write_whole(directory / CA_FILE, pem)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.parent.chmod(0o700)
    write_whole(path, text.encode(), mode=0o600)
