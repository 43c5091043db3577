"""Fleets, pools and nodes; teams, queues and quotas. Configured by the operator.

A pool is homogeneous (every node has the same GPUs, CPUs and memory) and belongs to one backend.
A node's *scheduling* state (may it take new work?) is kept apart from its *control
connectivity* (can the control plane talk to it?): a disconnected node's workloads keep running
and its reservations stay held, and a cordoned node is still connected.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from domain.catalog import check_name
from domain.errors import InvalidInput
from domain.retry import MAX_ATTEMPTS

MAX_GPUS_PER_NODE = 64
MIN_CPUS = 0.001  # CPUs are counted in thousandths
MAX_CPUS_PER_NODE = 100_000
MAX_MEMORY_MB_PER_NODE = 2**31 - 1  # a 32-bit column; about 2 PiB


class SchedState(StrEnum):
    SCHEDULABLE = "schedulable"
    CORDONED = "cordoned"  # takes no new work; running work stays
    DRAINING = "draining"  # takes no new work; the operator wants it empty


class Connectivity(StrEnum):
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"  # control contact lost: its members become `unknown`
    LOST = "lost"  # explicitly declared lost by an operator (fenced); its members have failed


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    fleet: str
    backend: str
    gpus_per_node: int
    cpus_per_node: float
    memory_mb_per_node: int
    gpu_model: str | None = None
    description: str = ""
    # Why the pool takes no new work although it is configured: its backend does not report it
    # (e.g. a Slurm pool whose partition does not exist), with the fix. "" when it is reported.
    # Set only by the capacity sync (``FleetRepository.set_pool_unavailable``); ``put_pool``
    # keeps it.
    unavailable: str = ""

    def check(self) -> Pool:
        check_name(self.name, "pool name", "name")
        check_name(self.fleet, "fleet name", "fleet")
        if not 0 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise InvalidInput(
                f"pool {self.name}: gpus_per_node {self.gpus_per_node} is out of range",
                fix=f"use 0 to {MAX_GPUS_PER_NODE}",
                field="gpus_per_node",
            )
        if (self.gpus_per_node > 0) != (self.gpu_model is not None):
            raise InvalidInput(
                f"pool {self.name}: a GPU pool needs a gpu_model and a CPU pool must not have one",
                fix="set gpu_model (e.g. h200) together with gpus_per_node > 0, or neither",
                field="gpu_model",
            )
        if self.gpu_model is not None:
            if self.gpu_model.lower() == "cpu":  # `cpu:N` asks for CPUs of a CPU pool
                raise InvalidInput(
                    f"pool {self.name}: GPU model {self.gpu_model!r} would be asked for as "
                    "cpu:N, which is a request for CPUs of a CPU pool",
                    fix="give the GPUs' model (e.g. h200, a100-80gb; `tp fleet ls` shows what "
                    "nodes detected), or make it a CPU pool: gpus_per_node 0 and no gpu_model",
                    field="gpu_model",
                )
            check_name(self.gpu_model, "GPU model", "gpu_model")
        if not MIN_CPUS <= self.cpus_per_node <= MAX_CPUS_PER_NODE:
            raise InvalidInput(
                f"pool {self.name}: cpus_per_node {self.cpus_per_node} is out of range",
                fix=f"give the CPUs of one node, from {MIN_CPUS} to {MAX_CPUS_PER_NODE}",
                field="cpus_per_node",
            )
        if not 1 <= self.memory_mb_per_node <= MAX_MEMORY_MB_PER_NODE:
            raise InvalidInput(
                f"pool {self.name}: memory_mb_per_node {self.memory_mb_per_node} is out of range",
                fix=f"give the memory of one node in MiB, from 1 to {MAX_MEMORY_MB_PER_NODE}",
                field="memory_mb_per_node",
            )
        return self

    @property
    def is_gpu(self) -> bool:
        return self.gpus_per_node > 0


class Validation(StrEnum):
    """The node's result in its pool's last check (`tp fleet check`): peers reachable on the
    rendezvous ports, shared storage the same. Separate from control connectivity."""

    UNCHECKED = "unchecked"
    PASSED = "passed"
    FAILED = "failed"  # takes no new work until a check passes


# The backend whose nodes each run TunePlane's daemon, which tells the control plane it is there
NODE_BACKEND = "node"


def new_node(name: str, pool: Pool) -> Node:
    """A node just added to ``pool``. On the node backend it is disconnected until its daemon's
    session opens (a node added with no daemon behind it is not there to run work: absence of
    evidence is never "connected"); elsewhere the backend stands for it (the local backend is
    this host; Slurm's and Kubernetes' capacity sync sets their nodes' states)."""
    connectivity = (
        Connectivity.DISCONNECTED if pool.backend == NODE_BACKEND else Connectivity.CONNECTED
    )
    return Node(name, pool.name, connectivity=connectivity)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    pool: str
    sched: SchedState = SchedState.SCHEDULABLE
    connectivity: Connectivity = Connectivity.CONNECTED
    validation: Validation = Validation.UNCHECKED
    validation_reason: str = ""  # why it failed
    validated_at: datetime | None = None  # when the check that set ``validation`` ended
    # when ``sched`` and ``connectivity`` last changed (None: not known); bookkeeping kept by
    # the store on every change, so not part of a node's equality
    sched_changed_at: datetime | None = field(default=None, compare=False)
    connectivity_changed_at: datetime | None = field(default=None, compare=False)

    def moved(
        self,
        at: datetime,
        sched: SchedState | None = None,
        connectivity: Connectivity | None = None,
    ) -> Node:
        """This node in the given states, each change's time ``at`` (what the store does in
        the statement that changes a node; the in-memory store calls it on every change)."""
        s = sched if sched is not None else self.sched
        c = connectivity if connectivity is not None else self.connectivity
        return replace(
            self,
            sched=s,
            connectivity=c,
            sched_changed_at=at if s is not self.sched else self.sched_changed_at,
            connectivity_changed_at=(
                at if c is not self.connectivity else self.connectivity_changed_at
            ),
        )

    @property
    def eligible(self) -> bool:
        """May the scheduler place new members here?"""
        return not self.why_not

    @property
    def why_not(self) -> str:
        """Why it takes no new work ("" when it does)."""
        if self.connectivity is not Connectivity.CONNECTED:
            return str(self.connectivity)
        if self.sched is not SchedState.SCHEDULABLE:
            return str(self.sched)
        if self.validation is Validation.FAILED:
            return "failed its pool check"
        return ""


@dataclass(frozen=True, slots=True)
class Team:
    name: str


@dataclass(frozen=True, slots=True)
class Queue:
    """A team's queue. Higher ``priority`` is served first; FIFO within a priority.

    ``gpu_quota`` caps the GPUs its jobs hold at once; ``job_quota`` caps how many of its jobs
    hold a reservation at once; ``max_attempts`` caps the attempts a job's retry policy may
    make (applied when a submission is resolved, so its preview shows it). ``None`` means no
    cap.
    """

    name: str
    team: str
    priority: int = 0
    gpu_quota: int | None = None
    job_quota: int | None = None
    max_attempts: int | None = None

    def check(self) -> Queue:
        check_name(self.name, "queue name", "name")
        check_name(self.team, "team name", "team")
        for value, label in ((self.gpu_quota, "gpu_quota"), (self.job_quota, "job_quota")):
            if value is not None and value < 0:
                raise InvalidInput(
                    f"queue {self.name}: {label} is {value}",
                    fix=f"give {label} as 0 or more, or leave it out for no cap",
                    field=label,
                )
        if self.max_attempts is not None and not 1 <= self.max_attempts <= MAX_ATTEMPTS:
            raise InvalidInput(
                f"queue {self.name}: max_attempts is {self.max_attempts}",
                fix=f"give max_attempts from 1 (no retry) to {MAX_ATTEMPTS}, or leave it out",
                field="max_attempts",
            )
        if not -1000 <= self.priority <= 1000:
            raise InvalidInput(
                f"queue {self.name}: priority {self.priority} is out of range",
                fix="use a priority from -1000 to 1000",
                field="priority",
            )
        return self


CONNECTIVITY_KEPT = 50  # connectivity changes a store keeps per node (migration 0029)


@dataclass(frozen=True, slots=True)
class ConnectivityChange:
    """A node's connectivity became ``connectivity`` at ``at`` (its history, newest first)."""

    node: str
    at: datetime
    connectivity: Connectivity
