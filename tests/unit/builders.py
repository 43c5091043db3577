"""Test-data builders for domain values: ``a_job(...)``, ``an_intent(...)``, ``a_spec(...)``."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from domain.catalog import Resources, RuntimePin
from domain.jobs import Job
from domain.lifecycle import JobState
from domain.requests import RoleSpec
from domain.submission import JobSpec, SubmissionIntent

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PIN = RuntimePin(
    "busybox", "localhost/tuneplane/runtime-busybox:1", "sha256:" + "a" * 64, None, "single-process"
)


def an_intent(**overrides: Any) -> SubmissionIntent:
    base = SubmissionIntent(
        experiment="hello",
        method="custom/custom",
        profiles=("cpu:1",),
        params={"command": "echo hi"},
    )
    return replace(base, **overrides)


def a_spec(**overrides: Any) -> JobSpec:
    base = JobSpec(
        experiment="hello",
        method="custom/custom",
        params={"command": "echo hi"},
        command=("/bin/sh", "-c", "echo hi"),
        runtime=PIN,
        backend="local",
        queue="default",
        roles=(RoleSpec("main", "cpu:1", "local", 1, Resources(1.0, 2048)),),
        source=None,
        env={},
    )
    return replace(base, **overrides)


def a_job(**overrides: Any) -> Job:
    base = Job(
        id="job-1",
        preview_id="pv-1",
        owner="alice",
        spec=a_spec(),
        state=JobState.PENDING,
        created_at=T0,
        updated_at=T0,
    )
    return replace(base, **overrides)
