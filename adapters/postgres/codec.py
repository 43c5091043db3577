"""Rows ↔ domain values. JobSpec and SubmissionIntent travel as JSONB (their ``to_dict``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from domain.admission import mcpu
from domain.auth import ApiToken, Role, User
from domain.checkpoints import Resume
from domain.fleet import Connectivity, Node, Pool, Queue, SchedState, Validation
from domain.gpus import GpuDevice, GpuInventory
from domain.jobs import Attempt, Job, Member, Submission
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.requests import Profile
from domain.submission import JobSpec, Preview, SubmissionIntent

Row = Mapping[Any, Any]


def intent_from_dict(d: Mapping[str, Any]) -> SubmissionIntent:
    return SubmissionIntent.from_dict(dict(d))


def preview_values(p: Preview) -> dict[str, Any]:
    return {
        "id": p.id,
        "owner": p.owner,
        "digest": p.digest,
        "created_at": p.created_at,
        "expires_at": p.expires_at,
        "intent": p.intent.to_dict(),
        "spec": p.spec.to_dict(),
    }


def preview_from_row(r: Row) -> Preview:
    return Preview(
        id=r["id"],
        owner=r["owner"],
        digest=r["digest"],
        created_at=r["created_at"],
        expires_at=r["expires_at"],
        intent=intent_from_dict(r["intent"]),
        spec=JobSpec.from_dict(r["spec"]),
    )


def submission_values(s: Submission) -> dict[str, Any]:
    return {
        "retry_key": s.retry_key,
        "preview_id": s.preview_id,
        "digest": s.digest,
        "job_id": s.job_id,
        "owner": s.owner,
        "created_at": s.created_at,
    }


def submission_from_row(r: Row) -> Submission:
    return Submission(
        retry_key=r["retry_key"],
        preview_id=r["preview_id"],
        digest=r["digest"],
        job_id=r["job_id"],
        owner=r["owner"],
        created_at=r["created_at"],
    )


def job_values(j: Job) -> dict[str, Any]:
    return {
        "id": j.id,
        "preview_id": j.preview_id,
        "owner": j.owner,
        "state": j.state.value,
        "spec": j.spec.to_dict(),
        "created_at": j.created_at,
        "updated_at": j.updated_at,
        "reason": j.reason,
        "exit_code": j.exit_code,
        "queue": j.spec.queue,
        "not_before": j.not_before,
    }


def job_from_row(r: Row) -> Job:
    return Job(
        id=r["id"],
        preview_id=r["preview_id"],
        owner=r["owner"],
        spec=JobSpec.from_dict(r["spec"]),
        state=JobState(r["state"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        reason=r["reason"],
        exit_code=r["exit_code"],
        not_before=r["not_before"],
    )


def attempt_values(a: Attempt) -> dict[str, Any]:
    """Every column but ``resume``, which only ``note_resume`` writes (an update from an
    attempt read before it was noted must not erase it)."""
    return {
        "id": a.id,
        "job_id": a.job_id,
        "number": a.number,
        "state": a.state.value,
        "created_at": a.created_at,
        "updated_at": a.updated_at,
        "reason": a.reason,
        "exit_code": a.exit_code,
        "cause": a.cause,
    }


def attempt_from_row(r: Row) -> Attempt:
    return Attempt(
        id=r["id"],
        job_id=r["job_id"],
        number=r["number"],
        state=AttemptState(r["state"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        reason=r["reason"],
        exit_code=r["exit_code"],
        cause=r["cause"],
        resume=Resume.from_dict(r["resume"]) if r["resume"] is not None else None,
    )


def member_values(m: Member) -> dict[str, Any]:
    return {
        "id": m.id,
        "attempt_id": m.attempt_id,
        "index": m.index,
        "state": m.state.value,
        "handle": m.handle,
        "exit_code": m.exit_code,
        "reason": m.reason,
        "updated_at": m.updated_at,
        "node": m.node,
        "role": m.role,
    }


def member_from_row(r: Row) -> Member:
    return Member(
        id=r["id"],
        attempt_id=r["attempt_id"],
        index=r["index"],
        state=MemberState(r["state"]),
        updated_at=r["updated_at"],
        handle=r["handle"],
        exit_code=r["exit_code"],
        reason=r["reason"],
        node=r["node"],
        role=r["role"],
    )


def token_values(t: ApiToken) -> dict[str, Any]:
    return {
        "id": t.id,
        "name": t.name,
        "token_hash": t.token_hash,
        "created_at": t.created_at,
        "label": t.label,
        "expires_at": t.expires_at,
        "last_used_at": t.last_used_at,
        "revoked_at": t.revoked_at,
        "revoked_by": t.revoked_by,
    }


def token_from_row(r: Row) -> ApiToken:
    return ApiToken(
        id=r["id"],
        name=r["name"],
        token_hash=r["token_hash"],
        created_at=r["created_at"],
        label=r["label"],
        expires_at=r["expires_at"],
        last_used_at=r["last_used_at"],
        revoked_at=r["revoked_at"],
        revoked_by=r["revoked_by"],
    )


def pool_values(p: Pool) -> dict[str, Any]:
    return {
        "name": p.name,
        "fleet": p.fleet,
        "backend": p.backend,
        "gpu_model": p.gpu_model,
        "gpus_per_node": p.gpus_per_node,
        "mcpu_per_node": mcpu(p.cpus_per_node),
        "memory_mb_per_node": p.memory_mb_per_node,
        "description": p.description,
    }


def pool_from_row(r: Row) -> Pool:
    mcpu_per_node: int = r["mcpu_per_node"]
    return Pool(
        name=r["name"],
        fleet=r["fleet"],
        backend=r["backend"],
        gpus_per_node=r["gpus_per_node"],
        cpus_per_node=mcpu_per_node / 1000,
        memory_mb_per_node=r["memory_mb_per_node"],
        gpu_model=r["gpu_model"],
        description=r["description"],
        unavailable=r["unavailable"],
    )


def node_from_row(r: Row) -> Node:
    return Node(
        name=r["name"],
        pool=r["pool"],
        sched=SchedState(r["sched"]),
        connectivity=Connectivity(r["connectivity"]),
        validation=Validation(r["validation"]),
        validation_reason=r["validation_reason"],
        validated_at=r["validated_at"],
        sched_changed_at=r.get("sched_changed_at"),
        connectivity_changed_at=r.get("connectivity_changed_at"),
    )


def profile_from_row(r: Row) -> Profile:
    return Profile(name=r["name"], request=r["request"], description=r["description"])


def queue_values(q: Queue) -> dict[str, Any]:
    return {
        "name": q.name,
        "team": q.team,
        "priority": q.priority,
        "gpu_quota": q.gpu_quota,
        "job_quota": q.job_quota,
        "max_attempts": q.max_attempts,
    }


def queue_from_row(r: Row) -> Queue:
    return Queue(
        name=r["name"],
        team=r["team"],
        priority=r["priority"],
        gpu_quota=r["gpu_quota"],
        job_quota=r["job_quota"],
        max_attempts=r["max_attempts"],
    )


def user_from_row(r: Row) -> User:
    """A ``users`` row with a ``teams`` column (the sorted team names)."""
    return User(
        name=r["name"],
        role=Role(r["role"]),
        teams=tuple(r["teams"] or ()),
        created_at=r["created_at"],
        disabled=r["disabled"],
    )


def gpu_inventory_json(inv: GpuInventory | None) -> str | None:
    """``node_links.gpu_inventory``: the inventory as JSON, None (NULL) for none."""
    if inv is None:
        return None
    devices = [
        {"index": d.index, "uuid": d.uuid, "name": d.name, "memory_mb": d.memory_mb,
         "mig": d.mig, "nvlink": d.nvlink}
        for d in inv.devices
    ]  # fmt: skip
    return json.dumps(
        {"devices": devices, "driver": inv.driver, "cuda": inv.cuda, "source": inv.source}
    )


def gpu_inventory_from(raw: Mapping[str, Any] | str | None) -> GpuInventory | None:
    if raw is None:
        return None
    doc = json.loads(raw) if isinstance(raw, str) else raw
    return GpuInventory(
        tuple(
            GpuDevice(d["index"], d["uuid"], d["name"], d["memory_mb"], d["mig"], d["nvlink"])
            for d in doc["devices"]
        ),
        doc["driver"],
        doc["cuda"],
        doc["source"],
    )
