"""Test-data builders: valid domain values with every field overridable by keyword."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from domain.auth import ApiToken
from domain.catalog import Resources, RuntimePin
from domain.jobs import Attempt, Job, Member, Submission
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.requests import RoleSpec
from domain.submission import JobSpec, Preview, SourceRef, SubmissionIntent

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
_ids = itertools.count(1)


def new_id(kind: str) -> str:
    return f"{kind}-{next(_ids):06d}"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def an_intent(**kw: Any) -> SubmissionIntent:
    values: dict[str, Any] = {
        "experiment": "exp-1",
        "method": "custom/custom",
        "profiles": ("cpu:2",),
        "params": {"command": "python train.py", "epochs": 3, "lr": 0.5, "fast": True},
        "runtime": "python-3.11",
        "source": SourceRef(digest="sha256:" + "a" * 64, size=1234),
        "env": {"WANDB_MODE": "offline"},
    }
    return SubmissionIntent(**(values | kw))


def a_spec(**kw: Any) -> JobSpec:
    values: dict[str, Any] = {
        "experiment": "exp-1",
        "method": "custom/custom",
        "params": {"command": "python train.py", "epochs": 3, "lr": 0.5, "fast": True},
        "command": ("/bin/sh", "-c", "python train.py"),
        "runtime": RuntimePin(
            name="python-3.11",
            image="python:3.11-slim",
            digest="sha256:" + "b" * 64,
            python="3.11",
            process_model="single-process",
        ),
        "backend": "local",
        "queue": "default",
        "roles": (
            RoleSpec("main", "cpu:2", "local", 1, Resources(cpus=2.0, memory_mb=4096, gpus=0)),
        ),
        "source": SourceRef(digest="sha256:" + "a" * 64, size=1234),
        "env": {"WANDB_MODE": "offline"},
    }
    return JobSpec(**(values | kw))


def a_preview(**kw: Any) -> Preview:
    created = kw.pop("created_at", T0)
    values: dict[str, Any] = {
        "id": new_id("pre"),
        "owner": "alice",
        "digest": "sha256:" + "c" * 64,
        "created_at": created,
        "expires_at": created + timedelta(hours=1),
        "intent": an_intent(),
        "spec": a_spec(),
    }
    return Preview(**(values | kw))


def a_submission(**kw: Any) -> Submission:
    values: dict[str, Any] = {
        "retry_key": new_id("rk"),
        "preview_id": new_id("pre"),
        "digest": "sha256:" + "c" * 64,
        "job_id": new_id("job"),
        "owner": "alice",
        "created_at": T0,
    }
    return Submission(**(values | kw))


def a_job(**kw: Any) -> Job:
    created = kw.pop("created_at", T0)
    values: dict[str, Any] = {
        "id": new_id("job"),
        "preview_id": new_id("pre"),
        "owner": "alice",
        "spec": a_spec(),
        "state": JobState.PENDING,
        "created_at": created,
        "updated_at": created,
    }
    return Job(**(values | kw))


def an_attempt(job: Job, number: int = 1, **kw: Any) -> Attempt:
    values: dict[str, Any] = {
        "id": new_id("att"),
        "job_id": job.id,
        "number": number,
        "state": AttemptState.LAUNCHING,
        "created_at": at(number),
        "updated_at": at(number),
    }
    return Attempt(**(values | kw))


def a_member(attempt: Attempt, index: int = 0, **kw: Any) -> Member:
    values: dict[str, Any] = {
        "id": new_id("mem"),
        "attempt_id": attempt.id,
        "index": index,
        "state": MemberState.PENDING,
        "updated_at": T0,
    }
    return Member(**(values | kw))


def a_token(**kw: Any) -> ApiToken:
    token_id = kw.pop("id", new_id("tok"))
    values: dict[str, Any] = {
        "id": token_id,
        "name": "alice",
        "token_hash": f"{token_id:0>64}"[-64:],
        "created_at": T0,
    }
    return ApiToken(**(values | kw))
