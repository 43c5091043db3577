"""Ports of a node daemon: its member journal and the runtime (container engine or host
processes) that runs its members, and the metrics feed that tells the host's collector what to
collect. The control plane's side is ``domain/node_ports.py``."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from domain.artifacts import Manifest
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef, MemberReport, Phase
from domain.telemetry import UsageSource

if TYPE_CHECKING:
    from domain.ports import Observation


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One member as the node's journal holds it."""

    order: PrepareOrder  # what it was asked to run
    phase: Phase
    container_id: str | None = None
    exit_code: int | None = None
    reason: str = ""
    outputs: Manifest | None = None  # scanned when it exited with code 0 (docs/capsule.md)

    @property
    def member_id(self) -> str:
        return self.order.ref.member_id

    def report(self, at: datetime | None = None) -> MemberReport:
        return MemberReport(
            self.order.ref,
            self.phase,
            self.exit_code,
            self.reason,
            at,
            self.outputs,
            self.order.collector_token_expires_at,
        )


class MemberJournal(Protocol):
    """The node's durable record of its members (SQLite on a real node). Synchronous: every
    write is durable when the call returns; callers run it off the event loop.

    ``meta``/``set_meta`` keep the daemon's facts beside its rows: ``installation`` (the control
    plane it belongs to) and ``engine`` (the container engine its members run on).

    ``in_memory``: calls never block (the simulator's and the tests' journal), so they run in
    place on the event loop; otherwise they run off it (``application/journal_io.py``)."""

    in_memory: bool

    def meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def entries(self) -> builtins.list[JournalEntry]: ...

    def get(self, member_id: str) -> JournalEntry | None: ...

    def put(self, entry: JournalEntry) -> None: ...

    def delete(self, member_id: str) -> None: ...

    def epoch(self) -> int:
        """The highest epoch this node was welcomed with (0: never)."""
        ...

    def set_epoch(self, epoch: int) -> None:
        """Raise the epoch (never lowers it)."""
        ...


@dataclass(frozen=True, slots=True)
class FoundContainer:
    """A member's container as the engine shows it: what its labels and state say, enough to
    rebuild the member's lost journal row (never a secret: the collector token is not kept in
    labels)."""

    container_id: str
    ref: MemberRef | None  # None: its labels do not name it fully (it cannot be re-adopted)
    job_id: str
    image: str
    gpu_indices: tuple[int, ...]
    cpus: float
    memory_mb: int
    started: bool  # a start was attempted (running or exited); False: created only
    metrics: bool  # its metrics directory is mounted: it was launched with a collector token


class ProgressCallback(Protocol):
    def __call__(self, stage: str, fraction: float, detail: str) -> None: ...


class MemberRuntime(Protocol):
    """Runs members on this node (containers through the Docker Engine API on a real node).
    Every method is idempotent per container; Unavailable means "retry later"."""

    async def prepare(
        self, order: PrepareOrder, source: bytes | None, on_progress: ProgressCallback
    ) -> str:
        """Make the member ready to start and return its container id: image present, source
        unpacked, GPUs bound, created but not started. Raises InvalidInput (a clear reason
        to vote no) when it cannot; leaves nothing behind then."""
        ...

    async def start(self, container_id: str) -> None: ...

    async def observe(self, container_id: str) -> Observation: ...

    async def stop(self, container_id: str, grace_seconds: float) -> None: ...

    async def remove(self, container_id: str) -> None:
        """Remove the container, killing it if it runs. Missing is fine."""
        ...

    async def held(self, installation: str) -> dict[str, str]:
        """member id → container id for every container of this node and ``installation``,
        listed in full (Unavailable when the engine cannot list them)."""
        ...

    async def engine_id(self) -> str:
        """The engine's identity (Docker's /info ID): which machine's containers these are."""
        ...

    async def found(self, container_id: str) -> FoundContainer | None:
        """What the container's labels and state say (None: it is gone)."""
        ...

    async def final_log(self, container_id: str, limit: int) -> tuple[bytes, bool]:
        """The last ``limit`` bytes of its output, and whether the head was cut."""
        ...

    def follow_logs(self, container_id: str) -> AsyncIterator[bytes]:
        """Its output from the start, as it comes, until it exits."""
        ...

    def port_free(self, port: int) -> bool:
        """Can a TCP port be bound on this host (a gang's rendezvous port)?"""
        ...

    async def usage_source(self, container_id: str) -> UsageSource | None:
        """Where the started member's CPU and memory use can be read on this host, asked once
        it runs: its first process's host pid and the cgroup directories holding it and only
        it (a member runtime that gives every member a cgroup of its own names it; one that
        runs members in a shared cgroup names none, and the pid's process tree is read).
        None: not running (not started yet, exited, gone) or nothing can be read for it (a
        simulated runtime); the caller asks again later. Never raises for a member that is
        gone; Unavailable when the runtime cannot answer now."""
        ...


class MetricsFeed(Protocol):
    """Tells the host's collector which members to collect (adapters/node/collector_feed.py).

    ``sync`` is given the journal's entries: members with a collector token that are (or were)
    started are collected; those that ended are read to their end and then let go. ``usage``:
    member id → where its CPU and memory use can be read (``MemberRuntime.usage_source``), for
    the members whose runtime said; the member file carries it, with the member's GPUs.
    ``forgotten``: a member left the journal (its last lines are still collected).
    """

    def sync(
        self, entries: Sequence[JournalEntry], usage: Mapping[str, UsageSource] | None = None
    ) -> None: ...

    def forgotten(self, member_id: str) -> None: ...
