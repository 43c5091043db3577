"""Ports: the interfaces the application needs from the outside world.

Each is a ``typing.Protocol``; its docstring states the contract every adapter must keep (the
in-memory and PostgreSQL adapters both pass ``tests/contract``). Errors: a missing object is
``None`` unless stated; ``domain.errors.Conflict`` means a lost race (re-read and decide again);
``domain.errors.Unavailable`` means "retry later".
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from domain.admission import PendingChanges, Reservation, Snapshot
from domain.auth import ApiToken, User
from domain.backend_ports import (  # re-exported: where they used to live
    ExecutionBackend as ExecutionBackend,
)
from domain.backend_ports import LaunchRequest as LaunchRequest
from domain.backend_ports import Observation as Observation
from domain.blob_ports import BlobStore as BlobStore  # re-exported: where it used to live
from domain.checkpoints import Resume
from domain.fleet import (
    Connectivity,
    ConnectivityChange,
    Node,
    Pool,
    Queue,
    SchedState,
    Team,
    Validation,
)
from domain.fleet_check import NodeResult, PoolCheck
from domain.jobs import Attempt, Job, JobEvent, JobProgress, Member, Submission
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.requests import Profile
from domain.submission import Preview


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class Ids(Protocol):
    def new(self, kind: str) -> str:
        """A fresh, unique, URL-safe id starting with ``kind`` (e.g. ``job-…``)."""
        ...


class PreviewRepository(Protocol):
    async def add(self, preview: Preview) -> None:
        """Store a new preview. Previews are immutable: there is no update."""
        ...

    async def get(self, preview_id: str) -> Preview | None: ...


class SubmissionLedger(Protocol):
    async def claim(self, submission: Submission) -> Submission | None:
        """Record ``submission`` unless its owner's retry key or its preview is already
        recorded. A retry key belongs to its owner: another user's row with the same key is
        never returned, and does not stop this one.

        Returns None when this call recorded it. Otherwise returns the stored row that holds the
        same (owner, retry key), or failing that the one that holds the same preview. Concurrent
        claims of one (owner, retry key) or one preview record exactly one row; the losers see
        the winner's row (they wait for the winner's transaction to end).
        """
        ...


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_cursor: str | None


class JobRepository(Protocol):
    async def add(self, job: Job) -> None:
        """Store a new job and its first event (its state, at ``created_at``)."""
        ...

    async def get(self, job_id: str) -> Job | None: ...

    async def update(self, job: Job, expected: JobState) -> None:
        """Compare-and-set: store ``job`` only if the stored state is still ``expected``.

        Only the mutable fields change (state, reason, exit code, updated_at; for members also
        the handle); identity fields such as ids, owner and spec are never rewritten.

        Raises Conflict when the stored state differs (another writer won) or NotFound.

        A change of state also appends a JobEvent (at ``job.updated_at``) in the same
        transaction; so does every other path that moves a job (``SchedulingRepository.start``).
        """
        ...

    async def list(
        self,
        *,
        owner: str | None,
        states: Collection[JobState] | None,
        limit: int,
        cursor: str | None,
        queue: str | None = None,
        search: str | None = None,
    ) -> JobPage:
        """Newest first. ``cursor`` is an opaque value from a previous page's ``next_cursor``
        (a cursor is only meaningful with the same filters). ``search``: only jobs whose
        experiment, id or owner holds that text, case-insensitively and literally (``%`` and
        ``_`` are characters, not wildcards: ``domain.jobs.search_matches``)."""
        ...

    async def progress(self, job_ids: Collection[str]) -> dict[str, JobProgress]:
        """Each of these jobs' attempts and start/pending times, in one bounded read (a page of
        a list: at most ``limit`` ids). Unknown ids are left out."""
        ...

    async def events(self, job_id: str, limit: int) -> builtins.list[JobEvent]:
        """The job's first ``limit`` events, oldest first (empty for an unknown job)."""
        ...

    async def claim(self, states: Collection[JobState], limit: int) -> builtins.list[Job]:
        """Oldest first, jobs in ``states``, locked for this unit of work.

        Rows locked by another open unit of work are skipped, so concurrent workers never claim
        the same job.
        """
        ...


class AttemptRepository(Protocol):
    async def add(self, attempt: Attempt) -> None: ...

    async def get(self, attempt_id: str) -> Attempt | None: ...

    async def update(self, attempt: Attempt, expected: AttemptState) -> None:
        """Compare-and-set, as JobRepository.update."""
        ...

    async def note_resume(self, attempt_id: str, resume: Resume) -> None:
        """Record what the attempt started from (``Attempt.resume``), whatever its state; the
        only writer of it (``update`` leaves it as it is, so an attempt read before it was
        noted never erases it). NotFound when the attempt does not exist."""
        ...

    async def for_job(self, job_id: str) -> list[Attempt]:
        """All attempts of a job, by number. Numbers are 1, 2, 3, … without gaps (the
        scheduler creates attempt n + 1 only after n; the memory adapter relies on it)."""
        ...


class MemberRepository(Protocol):
    async def add(self, member: Member) -> None: ...

    async def update(self, member: Member, expected: MemberState) -> None:
        """Compare-and-set, as JobRepository.update."""
        ...

    async def for_attempt(self, attempt_id: str) -> list[Member]:
        """All members of an attempt, by index. Indexes are 0, 1, 2, … without gaps."""
        ...

    async def get(self, member_id: str) -> Member | None: ...


class LogRepository(Protocol):
    async def save(self, attempt_id: str, member: int, data: bytes, truncated: bool) -> None:
        """Store the final log of member ``member`` (its index) of an attempt, replacing any
        earlier copy of that member's log (idempotent); every member has its own."""
        ...

    async def get(self, attempt_id: str, member: int) -> tuple[bytes, bool] | None:
        """(data, truncated) of that member's final log, or None if none was stored (never
        another member's)."""
        ...

    async def append_live(self, member_id: str, offset: int, data: bytes, limit: int) -> bool:
        """Store a piece of a running member's output at byte ``offset`` (the node backend's
        live log). A piece already stored at that offset is kept (re-sent pieces change
        nothing); a piece starting at or beyond ``limit`` is dropped. True when stored."""
        ...

    async def live(self, member_id: str, offset: int) -> builtins.list[tuple[int, bytes]]:
        """Stored pieces of the member's live log ending after ``offset``, by offset. Pieces
        may overlap (a node that restarted sends its output again): readers skip what they
        already have."""
        ...


class TokenRepository(Protocol):
    async def add(self, token: ApiToken) -> None:
        """Store a token; its user (``token.name``) must exist, else NotFound."""
        ...

    async def by_hash(self, token_hash: str) -> ApiToken | None: ...

    async def get(self, token_id: str) -> ApiToken | None: ...

    async def list(self, user: str | None = None) -> builtins.list[ApiToken]:
        """Every token (revoked and expired ones too), or ``user``'s; by user, then creation
        time, then id."""
        ...

    async def live_admin_tokens(self, now: datetime) -> builtins.list[ApiToken]:
        """The tokens that can act as an admin at ``now`` (not revoked, not expired, their user
        an admin and enabled), each locked until the unit ends: a racing revocation of the
        last of them waits for this unit, then sees what it did."""
        ...

    async def revoke(self, token_id: str, by: str, now: datetime) -> ApiToken | None:
        """Mark the token revoked at ``now`` by user ``by``; one already revoked keeps its
        first revocation. The token as stored after it, or None if there is no such token."""
        ...

    async def touch(self, token_id: str, now: datetime) -> None:
        """Record a use at ``now``, unless the stored last use is less than
        ``LAST_USED_PRECISION`` before it (or later): at most one write a minute a token."""
        ...

    async def count(self) -> int: ...


class FleetRepository(Protocol):
    """Pools, nodes and profiles: the operator's configuration of the fleet."""

    async def put_pool(self, pool: Pool) -> None:
        """Create or update a pool. Changing the node shape (GPUs, CPUs, memory) or the
        backend of a pool that has live reservations raises Conflict."""
        ...

    async def pools(self) -> builtins.list[Pool]:
        """All pools, by name."""
        ...

    async def held_pools(self) -> builtins.list[Pool]:
        """All pools, by name, each held against removal and reshaping until the unit of work
        ends (a shared row lock): what a profile is checked against while it is stored. A pool
        removed meanwhile by a committed transaction is not among them."""
        ...

    async def set_pool_unavailable(self, name: str, reason: str) -> None:
        """Record why a pool takes no new work although configured ("" clears it); the only
        writer of ``Pool.unavailable`` (``put_pool`` keeps it). NotFound if absent."""
        ...

    async def put_node(self, node: Node) -> None:
        """Create a node (its pool must exist, else NotFound) or update its states and pool;
        a node takes its pool's shape (GPUs, CPUs, memory). Moving a node to another pool
        while it has live reservations raises Conflict."""
        ...

    async def node(self, name: str) -> Node | None: ...

    async def nodes(self) -> builtins.list[Node]:
        """All nodes, by pool then name."""
        ...

    async def remove_node(self, name: str) -> Node:
        """Delete a node with its control link, credentials, security events and connectivity
        history, under its row lock (as ``reserve`` takes it); what jobs recorded about it
        (members, logs, timelines) keeps its name. Returns the node as it was. NotFound if
        absent; Conflict if it holds live reservations, or while a daemon holds a control stream
        for it (its link is open; both read under the lock)."""
        ...

    async def remove_pool(self, name: str) -> Pool:
        """Delete a pool with its checks and join tokens, under its row lock. Returns the pool
        as it was. NotFound if absent; Conflict while any node is in it."""
        ...

    async def node_counts(self) -> dict[str, int]:
        """How many nodes each pool has, whatever their states (a pool without nodes is
        absent): what a preview needs, without reading every node."""
        ...

    async def set_node_state(
        self,
        name: str,
        sched: SchedState | None = None,
        connectivity: Connectivity | None = None,
        at: datetime | None = None,
    ) -> Node:
        """Change a node's scheduling state and/or connectivity, at ``at`` (None: the store's
        clock): a changed state's ``*_changed_at`` becomes ``at``, and a changed connectivity
        joins the node's history. NotFound if absent."""
        ...

    async def connectivity_history(
        self, per_node: int
    ) -> dict[str, builtins.list[ConnectivityChange]]:
        """Each node's last ``per_node`` connectivity changes (1 to CONNECTIVITY_KEPT), newest
        first, by node name; a store keeps CONNECTIVITY_KEPT per node. Every write that changes
        a node's connectivity adds one (sessions opened and closed, revived, expired, a node
        declared lost, set_node_state), and a new node starts with one."""
        ...

    async def set_validation(
        self, name: str, validation: Validation, reason: str, at: datetime
    ) -> None:
        """Record a node's result in its pool's check, ended at ``at`` (nothing if the node is
        gone). ``put_node`` keeps it while the node stays in its pool; a new node, or one moved
        to another pool, is ``unchecked`` (the result was about its old peers)."""
        ...

    async def put_profile(self, profile: Profile) -> None:
        """Create or replace a named profile."""
        ...

    async def profiles(self) -> builtins.list[Profile]:
        """All named profiles, by name."""
        ...


class CheckRepository(Protocol):
    """Pool checks (`tp fleet check`): one row each, finished once."""

    async def add(self, check: PoolCheck) -> None: ...

    async def latest(self, pool: str) -> PoolCheck | None:
        """The pool's most recent check, finished or not."""
        ...

    async def unfinished(self) -> builtins.list[PoolCheck]: ...

    async def finish(
        self, check_id: str, results: Sequence[NodeResult], note: str, at: datetime
    ) -> bool:
        """Record the results once; False if it was finished already (by another process)."""
        ...


class PolicyRepository(Protocol):
    """Users, teams and queues."""

    async def put_user(self, user: User) -> None:
        """Create or update a user (role, teams, disabled). Every team must exist (NotFound).
        An update keeps the user's original ``created_at``."""
        ...

    async def user(self, name: str) -> User | None: ...

    async def users(self) -> builtins.list[User]:
        """All users, by name."""
        ...

    async def enabled_admins(self) -> builtins.list[User]:
        """The enabled admins, by name, each locked until the unit ends: a racing change of
        users that takes them too waits for this unit, then sees what it did (an admin demoted
        or disabled meanwhile is not among them). What keeps one enabled admin always left."""
        ...

    async def put_team(self, team: Team) -> None:
        """Create a team; an existing one is left as is."""
        ...

    async def teams(self) -> builtins.list[Team]: ...

    async def put_queue(self, queue: Queue) -> None:
        """Create or update a queue; its team must exist (NotFound)."""
        ...

    async def queue(self, name: str) -> Queue | None: ...

    async def queues(self) -> builtins.list[Queue]:
        """All queues, by name."""
        ...


class ReservationRepository(Protocol):
    """Launch reservations. The store itself makes double-booking impossible."""

    async def reserve(self, reservation: Reservation) -> None:
        """Reserve the whole envelope of one attempt in this unit of work, or raise Conflict
        when any GPU index is already reserved, a node would exceed its CPUs or memory, a node
        or GPU index does not exist, or the attempt already holds a reservation. After a
        Conflict the unit of work must be rolled back (nothing of it is kept)."""
        ...

    async def release(self, attempt_id: str) -> bool:
        """Release the attempt's reservation. Idempotent; True when this call released it."""
        ...

    async def get(self, attempt_id: str) -> Reservation | None:
        """The attempt's live reservation, or None. Assignments by member, GPU indices
        ascending."""
        ...

    async def live(self) -> builtins.list[Reservation]:
        """Every live reservation, by attempt id."""
        ...


@dataclass(frozen=True, slots=True)
class Start:
    """What storing one placement writes: the job's next attempt, its members, its reservation."""

    job_id: str
    attempt: Attempt
    members: tuple[Member, ...]
    reservation: Reservation


class SchedulingRepository(Protocol):
    async def snapshot(self, limit: int, now: datetime | None = None) -> Snapshot:
        """What ``admission.decide`` needs: every pool and node (free capacity = capacity minus
        live reservations; a node's ``why_not`` from its states), every queue with the GPUs
        and jobs its live reservations hold, and at most ``limit`` pending jobs, first in
        queue order (queue priority, then commit time, then id), each with the number of
        attempts it already had. With ``now``, a job waiting for its retry backoff (``not_before``
        later than ``now``) is left out."""
        ...

    async def pending_changes(self, since: int | None) -> PendingChanges:
        """The pending jobs changed since the mark ``since`` (a previous answer's ``mark``),
        each with its attempts so far and its ``not_before``, and the ids of the jobs changed
        since that are not pending; with ``since`` None (or where the adapter keeps no marks)
        every pending job, ``full``. Applying every answer in turn to a view gives the pending
        jobs as of the last read: no change committed before a read is missed by it."""
        ...

    async def start(self, starts: Sequence[Start], now: datetime) -> builtins.list[str]:
        """In this unit of work, for every job still pending: move it to starting (at
        ``now``), add its attempt and members and reserve its envelope. Jobs no longer
        pending are skipped. Returns the ids of the jobs started, in order. Raises Conflict
        when an attempt number is taken or a reservation cannot be made; the unit of work
        must then be rolled back. Batches cost a few round trips, not a few per job."""
        ...
