"""The version layer: Slurm REST API shapes ↔ TunePlane's own Slurm types, in one place.

slurmrestd serves several OpenAPI versions side by side (``/slurm/v0.0.NN/...``). Debian 12's
Slurm 22.05 serves v0.0.36 to v0.0.38; current releases serve v0.0.40 (23.11+), v0.0.41 (24.05+),
v0.0.42 (24.11+). What differs between the ones we support (docs/slurm.md, "Versions"):

================  ==============================  ==========================================
                  v0.0.38                         v0.0.40, v0.0.41, v0.0.42
================  ==============================  ==========================================
submit            ``script`` beside ``job``        ``script`` inside ``job`` (or ``jobs[0]``)
environment       object ``{NAME: value}``        list of ``NAME=value``
nodes             integer                         string (a count range, ``"2"``)
memory_per_node   integer (MiB)                   ``{"set": true, "number": N}``
exit_code         raw wait status (768 = exit 3)  ``{"status": [..], "return_code": {..},
                                                  "signal": {"id": {..}, "name": ..}}``
job_state         string ``RUNNING``              list ``["RUNNING", "COMPLETING"]``
no requeue        ``no_requeue: true`` (sbatch's    ``requeue: false``
                  option names; ``requeue`` of
                  any value is ``--requeue``)
node state        string ``idle`` + state_flags   list ``["IDLE", "DRAIN"]``
numbers           plain integers                  often ``{"set", "infinite", "number"}``
================  ==============================  ==========================================

Everything else (paths, ``errors[].error_number``, the meaning of error 2017) is the same.
Pure: no I/O here; :mod:`adapters.slurm.client` does the HTTP.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SUPPORTED = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38")  # preferred first
INVALID_JOB_ID = 2017  # "Invalid job id specified": the job is unknown (HTTP 500, not 404)

# the job states after which Slurm has nothing more to run (allocation may still be ending)
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "LAUNCH_FAILED",
        "SPECIAL_EXIT",
    }
)
BASE_STATES = FINAL_STATES | {"PENDING", "RUNNING", "SUSPENDED", "REQUEUED"}


@dataclass(frozen=True, slots=True)
class SlurmError:
    code: int
    message: str

    def __str__(self) -> str:
        return f"{self.message} (Slurm error {self.code})"

    @property
    def transient(self) -> bool:
        """A failure to reach or hear from slurmctld or slurmdbd (system errnos, Slurm's 1xxx
        protocol and communication errors, 6xxx authentication, 7xxx database connection), as
        opposed to Slurm refusing the request itself (2xxx job errors and the rest)."""
        return self.code < 2000 or 6000 <= self.code < 8000


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One component of a Slurm job (several make a heterogeneous job)."""

    name: str
    comment: str
    nodes: int
    cwd: str
    stdout: str
    environment: Mapping[str, str]
    partition: str | None = None
    cpus_per_task: int = 1
    memory_mb_per_node: int = 0  # 0: the partition's default
    gpus_per_node: int = 0
    gres_name: str = "gpu"
    time_limit_minutes: int | None = None


@dataclass(frozen=True, slots=True)
class SlurmJob:
    job_id: int
    name: str
    comment: str
    state: str  # the base state, e.g. RUNNING, COMPLETED
    flags: frozenset[str]  # further state flags, e.g. COMPLETING, CONFIGURING
    reason: str
    exit_code: int | None  # decoded: 0..255, 128+signal when killed; None when not known
    nodes: str
    partition: str
    het_job_id: int = 0
    het_job_offset: int = 0
    cancelled_by: str = ""  # accounting's ``kill_request_user`` (who ran scancel), if known
    restarts: int = 0  # ``restart_cnt``: how often slurmctld requeued it (adapters/slurm/ends.py)

    @property
    def allocation_ended(self) -> bool:
        """Slurm has nothing left to run and no node still cleans up after it."""
        return (
            self.state in FINAL_STATES
            and "COMPLETING" not in self.flags
            and "STAGE_OUT" not in self.flags
        )


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, ...
    flags: frozenset[str]  # lower case: drain, not_responding, ...
    cpus: int
    memory_mb: int
    partitions: tuple[str, ...]
    gres: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SlurmPartition:
    name: str
    nodes: str
    total_nodes: int
    total_cpus: int


@dataclass(frozen=True, slots=True)
class SubmitResult:
    job_id: int | None
    errors: tuple[SlurmError, ...] = field(default=())


def number(value: Any) -> int | None:
    """A plain integer, or a v0.0.40+ ``{"set", "infinite", "number"}`` (None unless set)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        got = value.get("number")
        return got if isinstance(got, int) else None
    return None


def exit_from_wait_status(status: int) -> int:
    """A raw wait status (v0.0.38, sacct) as a shell would report it: 768 → 3, 15 → 143."""
    code = os.waitstatus_to_exitcode(status) if status >= 0 else status
    return 128 - code if code < 0 else code


def errors_of(body: Any) -> tuple[SlurmError, ...]:
    """The ``errors`` list of any answer (every version: ``error_number`` and ``error``)."""
    out = []
    for e in (body or {}).get("errors") or [] if isinstance(body, Mapping) else []:
        if isinstance(e, Mapping):
            code = e.get("error_number", e.get("error_code", 0))
            text = e.get("description") or e.get("error") or "unknown error"
            if e.get("error") and e.get("description") and e["error"] != e["description"]:
                text = f"{e['error']}: {e['description']}"
            out.append(SlurmError(int(code) if isinstance(code, int) else 0, str(text)))
    return tuple(out)


def _states(value: Any) -> tuple[str, frozenset[str]]:
    items = [value] if isinstance(value, str) else list(value or [])
    upper = [str(s).upper() for s in items]
    base = next((s for s in upper if s in BASE_STATES), upper[0] if upper else "UNKNOWN")
    return base, frozenset(s for s in upper if s != base)


class Dialect:
    """The shapes of one OpenAPI version. Subclasses override only what differs."""

    version = "v0.0.38"

    @property
    def prefix(self) -> str:
        return f"/slurm/{self.version}"

    # -- requests -------------------------------------------------------------------------------

    def submit_body(self, script: str, parts: Sequence[JobRequest]) -> dict[str, Any]:
        """The ``POST job/submit`` body; several parts make a heterogeneous job."""
        jobs = [self._job(p) for p in parts]
        if len(jobs) == 1:
            return {"script": script, "job": jobs[0]}
        return {"script": script, "jobs": jobs}

    def _job(self, p: JobRequest) -> dict[str, Any]:
        job: dict[str, Any] = {
            "name": p.name,
            "comment": p.comment,
            "nodes": p.nodes,
            "tasks": p.nodes,  # one task per node: srun's default in every (het) component
            "tasks_per_node": 1,
            "cpus_per_task": p.cpus_per_task,
            "current_working_directory": p.cwd,
            "standard_output": p.stdout,
            "environment": dict(p.environment),
            # never requeued by slurmctld (preemption, node failure, `scontrol requeue`): such
            # an end is the attempt's, and a retry is a new job (docs/slurm.md#ends-and-retries).
            # v0.0.38 takes sbatch's option names (``requeue`` of any value is --requeue)
            "no_requeue": True,
        }
        if p.partition:
            job["partition"] = p.partition
        if p.memory_mb_per_node:
            job["memory_per_node"] = p.memory_mb_per_node
        if p.gpus_per_node:
            job["gres"] = f"{p.gres_name}:{p.gpus_per_node}"
        if p.time_limit_minutes:
            job["time_limit"] = p.time_limit_minutes
        return job

    # -- answers --------------------------------------------------------------------------------

    def submitted(self, body: Any) -> SubmitResult:
        job_id = body.get("job_id") if isinstance(body, Mapping) else None
        if job_id is None and isinstance(body, Mapping):  # v0.0.40+ also nests it (deprecated)
            job_id = (body.get("result") or {}).get("job_id")
        return SubmitResult(int(job_id) if isinstance(job_id, int) else None, errors_of(body))

    def exit_code(self, value: Any) -> int | None:
        return exit_from_wait_status(value) if isinstance(value, int) else None

    def job(self, d: Mapping[str, Any]) -> SlurmJob:
        state, flags = _states(d.get("job_state"))
        exit_code = None if state in ("PENDING", "RUNNING") else self.exit_code(d.get("exit_code"))
        return SlurmJob(
            job_id=int(d["job_id"]),
            name=str(d.get("name") or ""),
            comment=str(d.get("comment") or ""),
            state=state,
            flags=flags,
            reason=str(d.get("state_reason") or ""),
            exit_code=exit_code,
            nodes=str(d.get("nodes") or ""),
            partition=str(d.get("partition") or ""),
            het_job_id=number(d.get("het_job_id")) or 0,
            het_job_offset=number(d.get("het_job_offset")) or 0,
            restarts=number(d.get("restart_cnt")) or 0,
        )

    def node(self, d: Mapping[str, Any]) -> SlurmNode:
        raw = d.get("state")
        if isinstance(raw, str):  # v0.0.38: "idle" and a separate list of flags
            base, flags = raw.lower(), frozenset(str(f).lower() for f in d.get("state_flags") or [])
        else:
            upper, more = _node_states(raw)
            base, flags = upper.lower(), frozenset(f.lower() for f in more)
        parts = d.get("partitions") or []
        return SlurmNode(
            name=str(d["name"]),
            state=base,
            flags=flags,
            cpus=number(d.get("cpus")) or 0,
            memory_mb=number(d.get("real_memory")) or 0,
            partitions=tuple(parts.split(",") if isinstance(parts, str) else parts),
            gres=str(d.get("gres") or ""),
            reason=str(d.get("reason") or ""),
        )

    def accounted(self, d: Mapping[str, Any]) -> SlurmJob:
        """A job from accounting (``GET /slurmdb/<version>/job/{id}``, what ``sacct`` shows):
        ``state.current``, ``exit_code`` as status, return code and signal."""
        state, flags = _states((d.get("state") or {}).get("current"))
        comment = d.get("comment")
        het = d.get("het") or {}
        return SlurmJob(
            job_id=int(d["job_id"]),
            name=str(d.get("name") or ""),
            comment=str((comment or {}).get("job") or "" if isinstance(comment, Mapping) else ""),
            state=state,
            flags=flags,
            reason=str((d.get("state") or {}).get("reason") or ""),
            exit_code=None if state in ("PENDING", "RUNNING") else _db_exit(d.get("exit_code")),
            nodes=str(d.get("nodes") or ""),
            partition=str(d.get("partition") or ""),
            het_job_id=number(het.get("job_id")) or 0,
            het_job_offset=number(het.get("job_offset")) or 0,
            cancelled_by=str(d.get("kill_request_user") or ""),
        )

    def partition(self, d: Mapping[str, Any]) -> SlurmPartition:
        return SlurmPartition(
            name=str(d["name"]),
            nodes=str(d.get("nodes") or ""),
            total_nodes=number(d.get("total_nodes")) or 0,
            total_cpus=number(d.get("total_cpus")) or 0,
        )


def _db_exit(value: Any) -> int | None:
    """Accounting's exit code, every version: ``status`` (a string in dbv0.0.38, a list
    later), ``return_code`` and ``signal`` (``signal_id`` in dbv0.0.38, ``id`` later)."""
    if not isinstance(value, Mapping):
        return None
    raw = value.get("status")
    status = {str(s).upper() for s in ([raw] if isinstance(raw, str) else raw or [])}
    if status & {"SIGNALED", "CORE_DUMPED"}:
        sig = value.get("signal") or {}
        got = number(sig.get("id", sig.get("signal_id")))
        return 128 + got if got is not None else None
    if status & {"PENDING", "INVALID"}:
        return None
    return number(value.get("return_code"))


_NODE_BASE = ("IDLE", "MIXED", "ALLOCATED", "DOWN", "ERROR", "FUTURE", "UNKNOWN")


def _node_states(value: Any) -> tuple[str, list[str]]:
    items = [str(s).upper() for s in (value or [])]
    base = next((s for s in items if s in _NODE_BASE), "UNKNOWN")
    return base, [s for s in items if s != base]


class Dialect40(Dialect):
    """v0.0.40 (Slurm 23.11) and later: the script in ``job``, environment as a list, numbers
    as ``{"set", "number"}``, states as lists, exit codes decoded into status and signal."""

    version = "v0.0.40"

    def submit_body(self, script: str, parts: Sequence[JobRequest]) -> dict[str, Any]:
        jobs = [self._job(p) for p in parts]
        jobs[0]["script"] = script
        return {"job": jobs[0]} if len(jobs) == 1 else {"jobs": jobs}

    def _job(self, p: JobRequest) -> dict[str, Any]:
        job = super()._job(p)
        job["nodes"] = str(p.nodes)
        job["environment"] = [f"{k}={v}" for k, v in p.environment.items()]
        del job["no_requeue"]
        job["requeue"] = False  # job_desc_msg's field (data_parser), not an sbatch option
        if p.memory_mb_per_node:
            job["memory_per_node"] = {"set": True, "number": p.memory_mb_per_node}
        if p.gpus_per_node:
            del job["gres"]
            job["tres_per_node"] = f"gres/{p.gres_name}:{p.gpus_per_node}"
        if p.time_limit_minutes:
            job["time_limit"] = {"set": True, "number": p.time_limit_minutes}
        return job

    def exit_code(self, value: Any) -> int | None:
        return _db_exit(value)  # the same decoded shape as accounting's

    def partition(self, d: Mapping[str, Any]) -> SlurmPartition:
        nodes, cpus = d.get("nodes") or {}, d.get("cpus") or {}
        return SlurmPartition(
            name=str(d["name"]),
            nodes=str(nodes.get("configured") or ""),
            total_nodes=number(nodes.get("total")) or 0,
            total_cpus=number(cpus.get("total")) or 0,
        )


def dialect(version: str) -> Dialect:
    """The dialect of ``version`` (``v0.0.38``, ``v0.0.40``, ``v0.0.41``, ``v0.0.42``)."""
    if version == "v0.0.38":
        return Dialect()
    if version in ("v0.0.40", "v0.0.41", "v0.0.42"):
        d = Dialect40()
        d.version = version
        return d
    raise ValueError(f"unsupported Slurm REST API version {version!r}; use one of {SUPPORTED}")


def choose(paths: Sequence[str]) -> str | None:
    """The newest supported version among an OpenAPI document's paths, or None."""
    served = {p.split("/")[2] for p in paths if p.startswith("/slurm/v")}
    return next((v for v in SUPPORTED if v in served), None)
