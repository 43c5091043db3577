"""Backend ports: how the control plane runs members, by the capability a backend declares.

Every backend pins runtimes and says what storage it offers its members (:class:`Backend`).
Beyond that there are two kinds, and a backend is registered under the port it keeps (in
``Context``: ``backends`` or ``coordinated``), which is what the use cases dispatch on:

- :class:`ExecutionBackend` runs members one by one: the supervisor launches, observes, stops
  and releases each member through it (local Docker, Slurm, Kubernetes, the in-memory one).
- :class:`CoordinatedBackend` is two-phase (the node backend): the gang coordinator
  (``application/gang.py``) launches its members through the launch ledger, their nodes report
  what happens to them and send their output to the node gateway, which stores it. Nothing is
  asked of a member through the backend itself.

A backend that reports the capacity of its own scheduler (Slurm) is also registered as a
:class:`CapacityReporter` (``Context.capacity``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol

from domain.admission import Assignment
from domain.capsule import StorageCapabilities
from domain.catalog import RuntimePin, RuntimeSpec
from domain.fleet import Node, Pool
from domain.submission import JobSpec


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    job_id: str
    attempt_id: str
    member_id: str
    member_index: int
    spec: JobSpec
    source: bytes | None  # gzip-compressed tar, unpacked into the member's working directory
    assignment: Assignment | None = None  # node, GPU indices, CPUs and memory reserved for it
    capsule: bytes | None = None  # the Job Capsule's tar (spec.capsule): then ``source`` is None
    outputs: str | None = None  # the host directory to mount at OUTPUT_DIR (shared outputs)
    attempt: int = 1  # the attempt's number (TUNEPLANE_ATTEMPT: 1, then 2, … after retries)
    # the attempt's checkpoint directory and resume directory on this host (Slurm: in its
    # shared directory, the resume directory the earlier attempt's that holds the checkpoint
    # in place), and the name of the checkpoint it resumes from there (docs/checkpoints.md);
    # None: none
    checkpoints: str | None = None
    resume_root: str | None = None
    resume: str | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """What a backend knows of one member right now. ``unknown``: control contact with its
    node is lost; that is never taken as proof that it stopped."""

    status: Literal["starting", "running", "exited", "missing", "unknown"]
    exit_code: int | None = None
    reason: str = ""
    # an end (exited or missing) whose cause the backend proves, for the job's retry policy
    # (domain/retry.py): "preempted" (its scheduler took it back: a Kueue eviction, a Slurm
    # preemption or requeue) or "node-lost" (its node failed, as its scheduler says); "" else
    cause: str = ""


class Backend(Protocol):
    """What every backend offers, whichever way it runs members. May raise Unavailable."""

    name: str
    storage: StorageCapabilities  # what it offers members (Job Capsule delivery, mounts)

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        """Resolve a runtime's image to a content digest. Raises InvalidInput if absent."""
        ...


class ExecutionBackend(Backend, Protocol):
    """Runs members one by one. Every method may raise Unavailable ("retry later")."""

    async def launch(self, request: LaunchRequest) -> str:
        """Start the member; return its handle. Idempotent per member id: a repeated call
        returns the same handle and starts nothing new."""
        ...

    async def observe(self, handle: str) -> Observation: ...

    async def stop(self, handle: str, grace_seconds: float) -> None:
        """Ask the member to stop (SIGTERM, then SIGKILL after the grace). Idempotent."""
        ...

    def logs(self, handle: str, follow: bool) -> AsyncIterator[bytes]:
        """stdout and stderr interleaved, from the start; with ``follow`` until the member exits.

        Raises NotFound when the member is gone (released); the stored log is then authoritative.
        """
        ...

    async def held(self) -> dict[str, str]:
        """member id → handle for every member this backend still holds, running or not.

        Lets the supervisor find members it recorded as finished but never released (the
        process died in between) and release them.
        """
        ...

    async def release(self, handle: str) -> None:
        """Forget a member the caller knows to be stopped (remove its container, even if it is
        somehow still running). Idempotent; missing is fine."""
        ...


class CoordinatedBackend(Backend, Protocol):
    """A two-phase backend (the node backend). The control plane only pins runtimes through
    it: the gang coordinator launches its members through the launch ledger, the nodes report
    their state and send their output (stored by the node gateway: ``LogRepository.live``),
    and each node forgets its finished members itself when the gateway tells it. So it has no
    launch, observe, stop, logs, held or release to call."""


class CapacityReporter(Protocol):
    """A backend whose own scheduler reports its pools and nodes (Slurm); see
    ``application/capacity_sync.py``."""

    name: str

    async def capacity(self) -> tuple[list[Pool], list[Node]]:
        """Pools of this backend, and their nodes with their states."""
        ...

    def unreported(self, pool: str) -> str:
        """Why the last ``capacity()`` had no pool ``pool``, with the fix."""
        ...
