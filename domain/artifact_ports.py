"""Ports of artifacts: the recorded manifests, and the host directories members write into."""

from __future__ import annotations

import builtins
from typing import Protocol

from domain.artifacts import ArtifactRecord, Manifest


class ArtifactRepository(Protocol):
    async def record(self, record: ArtifactRecord) -> bool:
        """Record a member's manifest unless one is recorded already (the first one stays:
        a repeated observation of the same exit records nothing). True when this call did."""
        ...

    async def for_job(self, job_id: str) -> builtins.list[ArtifactRecord]:
        """The job's manifests, by attempt number, then member index."""
        ...


class OutputStorage(Protocol):
    """Host directories for members' outputs (backends with shared outputs mount them at
    ``domain.artifacts.OUTPUT_DIR``). Reading and hashing files may take a while: callers
    never hold a transaction open around these calls."""

    async def prepare(self, job_id: str, attempt_id: str, member_index: int) -> str:
        """The member's output directory on the host, made if missing."""
        ...

    async def scan(self, job_id: str, attempt_id: str, member_index: int) -> Manifest | None:
        """The manifest of what the member's directory holds now; None if it has none."""
        ...
