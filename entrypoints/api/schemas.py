"""Wire shapes of the HTTP API (msgspec), and their conversion from the domain."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from application.explain import QueuePositions
from application.jobs import JobDetails
from application.submissions import RETRY_KEY_MAX, RETRY_KEY_MIN, RETRY_KEY_PATTERN
from domain import plugins
from domain.catalog import Method, RecipeLock, method_digest
from domain.errors import InvalidInput
from domain.jobs import Attempt, Job, JobProgress, Receipt
from domain.lifecycle import JOB_FINAL, JobState
from domain.plugins import PluginPin
from domain.retry import RetryPolicy
from domain.submission import Preview, SourceRef, SubmissionIntent
from entrypoints.api.preview_summary import PreviewSummaryOut, preview_summary
from entrypoints.wire import Digest, Ident, Name

Text = Annotated[str, Meta(max_length=65536)]


class Problem(Struct, kw_only=True):
    """RFC 9457 problem details, plus ``fix``, ``field`` and the request's id (the one in
    ``X-Request-Id`` and on the server's log lines of the request)."""

    type: str
    title: str
    status: int
    detail: str
    fix: str = ""
    field: str | None = None
    request_id: str | None = None


class SourceIn(Struct, forbid_unknown_fields=True):
    digest: Digest
    size: Annotated[int, Meta(ge=0)]


ProfileText = Annotated[str, Meta(min_length=1, max_length=128)]


class RecipeLockIn(Struct, forbid_unknown_fields=True):
    """The experiment's recipe.lock.json: the preview is refused (409) when it is stale."""

    method: Annotated[str, Meta(min_length=1, max_length=128)]
    version: Annotated[str, Meta(min_length=1, max_length=64)]
    digest: Digest
    framework: Annotated[str, Meta(min_length=1, max_length=100)] | None = None
    framework_version: Annotated[str, Meta(min_length=1, max_length=64)] | None = None


class PluginPinIn(Struct, forbid_unknown_fields=True):
    """A plugin the experiment uses (experiment.toml [plugins]); ``digest`` when pinned."""

    name: Annotated[str, Meta(min_length=1, max_length=127, pattern=plugins.NAME_RE.pattern)]
    version: Annotated[str, Meta(min_length=1, max_length=64, pattern=plugins.VERSION_RE.pattern)]
    digest: Digest | None = None


class RetryIn(Struct, forbid_unknown_fields=True, kw_only=True):
    """experiment.toml ``[retry]`` (``tp submit --retry N`` sends ``max_attempts``); what is
    left out takes its default (docs/lifecycles.md#retries)."""

    max_attempts: int | None = None
    on: Annotated[list[Annotated[str, Meta(max_length=32)]], Meta(max_length=8)] | None = None
    exit_codes: Annotated[list[int], Meta(max_length=255)] | None = None
    backoff_seconds: float | None = None
    max_backoff_seconds: float | None = None

    def policy(self) -> RetryPolicy:
        given = {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}
        try:
            return RetryPolicy.parse(given)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, fix=exc.fix, field=f"intent.{exc.field}") from None


class PreviewIn(Struct, forbid_unknown_fields=True, kw_only=True):
    experiment: Name
    method: Annotated[str, Meta(min_length=1, max_length=128)]
    profiles: Annotated[
        list[ProfileText],
        Meta(max_length=16, description="`--profile` values, one per role: h200:8, train=h200:8"),
    ] = []
    profile: Annotated[
        ProfileText | None, Meta(description="one role: the same as profiles=[profile]")
    ] = None
    queue: Annotated[Name | None, Meta(description="null: your default queue")] = None
    params: dict[Annotated[str, Meta(max_length=128)], Text | int | float | bool] = {}
    runtime: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    source: SourceIn | None = None
    env: dict[Annotated[str, Meta(max_length=128)], Text] = {}
    recipe_lock: RecipeLockIn | None = None
    plugins: Annotated[list[PluginPinIn], Meta(max_length=16)] = []
    retry: RetryIn | None = None

    def to_intent(self) -> SubmissionIntent:
        if self.profile is not None and self.profiles:
            raise InvalidInput(
                "both profile and profiles are given",
                fix="send the roles in profiles only",
                field="profile",
            )
        return SubmissionIntent(
            experiment=self.experiment,
            method=self.method,
            profiles=tuple(self.profiles or ([self.profile] if self.profile else [])),
            queue=self.queue,
            params=dict(self.params),
            runtime=self.runtime,
            source=SourceRef(self.source.digest, self.source.size) if self.source else None,
            env=dict(self.env),
            recipe_lock=RecipeLock(**msgspec.structs.asdict(self.recipe_lock))
            if self.recipe_lock
            else None,
            plugins=tuple(PluginPin(p.name, p.version, p.digest) for p in self.plugins),
            retry=self.retry.policy() if self.retry else None,
        )


class CommitIn(Struct, forbid_unknown_fields=True):
    preview_id: Ident
    digest: Annotated[str, Meta(min_length=1, max_length=80)]
    retry_key: Annotated[
        str,
        Meta(
            min_length=RETRY_KEY_MIN,
            max_length=RETRY_KEY_MAX,
            pattern=RETRY_KEY_PATTERN,
            description="printable ASCII (a uuid4); the caller's own: another user's keys "
            "do not collide with it",
        ),
    ]


class FileOut(Struct):
    """One file of a manifest (a member's outputs, a plugin's files)."""

    path: str
    size: int
    sha256: str


class ArchiveOut(Struct):
    digest: str
    size: int


class ArchiveLimitsOut(Struct, kw_only=True):
    """What `POST /v1/archives` accepts: the compressed size, what it may unpack to, its
    entries, and the formats (a gzip-compressed tar, or a plain tar)."""

    max_bytes: int
    max_unpacked_bytes: int
    max_entries: int
    formats: list[str]


class PreviewOut(Struct):
    id: str
    digest: str
    owner: str
    created_at: datetime
    expires_at: datetime
    intent: dict[str, Any]
    spec: dict[str, Any]
    summary: PreviewSummaryOut  # the spec's resolution in typed fields (and words)


class MemberOut(Struct):
    id: str
    index: int
    state: str
    handle: str | None
    exit_code: int | None
    reason: str
    node: str | None = None  # where its reservation placed it
    role: str = "main"


class ResumeOut(Struct):
    """What an attempt started from: the checkpoint it resumed from (null: from the
    beginning), the attempt that wrote it and its step, and the newer ones skipped, with why."""

    checkpoint: str | None
    attempt: int | None  # the attempt that wrote it
    step: int | None
    skipped: list[str]
    words: list[str]  # as `tp job why` says it


class AttemptOut(Struct):
    id: str
    number: int
    state: str
    reason: str
    exit_code: int | None
    created_at: datetime
    updated_at: datetime
    members: list[MemberOut]
    # how it ended, for the retry policy: node-lost, preempted, launch-failed, failed (an exit),
    # cancelled, requeued (aborted for no fault of the job); "" while it runs or if it succeeded
    end: str = ""
    # what it resumed from (docs/checkpoints.md); null: not recorded (a first attempt, or a
    # backend that keeps no checkpoints yet)
    resume: ResumeOut | None = None


class RetryOut(Struct):
    """A job's retry policy, every field filled in (docs/lifecycles.md#retries)."""

    max_attempts: int
    on: list[str]
    exit_codes: list[int]
    backoff_seconds: float
    max_backoff_seconds: float


class JobOut(Struct):
    id: str
    state: str
    owner: str
    experiment: str
    method: str
    profile: str
    backend: str
    preview_id: str
    created_at: datetime
    updated_at: datetime
    reason: str
    exit_code: int | None
    spec: dict[str, Any]
    attempts: list[AttemptOut] = []
    queue: str = ""
    retry: RetryOut | None = None  # its retry policy (docs/lifecycles.md#retries)
    next_attempt_at: datetime | None = None  # pending again: its next attempt not before
    # why a pending job waits (quota, capacity, holds), only when the list is asked why=true
    waits: str | None = None
    gpus: int = 0  # the job's whole GPU request (every member of every role)
    cpus: float = 0.0  # the job's whole CPU request
    progress: JobProgressOut | None = None  # in a list (GET /v1/jobs) only


class JobProgressOut(Struct):
    """What a jobs list shows beside each job, read for the whole page at once."""

    attempts: int  # attempts it has had (0 while it never started)
    started_at: datetime | None  # its first entry into running
    ended_at: datetime | None  # its entry into its final state (succeeded, failed, cancelled)
    pending_since: datetime | None  # its latest entry into pending (null when not pending)
    # a pending job's 1-based rank in queue order among every pending job (the scheduler's
    # order: queue priority, then FIFO); null when not pending or waiting for its backoff
    queue_position: int | None


class JobPageOut(Struct):
    jobs: list[JobOut]
    next_cursor: str | None
    # pending jobs in the queue-order pass that gave the positions; null when the page held
    # no pending job (no pass was made)
    pending_total: int | None = None


class JobEventOut(Struct):
    stage: str  # previewed, committed, admitted, requeued, running, stopping, or a final state
    at: datetime
    state: str | None  # the job state entered; null for previewed
    reason: str


class JobEventsOut(Struct):
    job_id: str
    events: list[JobEventOut]


class ReceiptOut(Struct):
    job_id: str
    preview_id: str
    retry_key: str
    created: bool
    job: JobOut


class ParamOut(Struct):
    name: str
    type: str
    help: str
    required: bool
    # JSON numbers: an integer is also a "number", so the schema names number, not both
    default: float | str | bool | None
    choices: list[float | str | bool]
    minimum: float | None
    maximum: float | None
    config: str = ""  # the dotted path it sets in the recipe's config.json


class MethodOut(Struct):
    name: str
    description: str
    default_runtime: str
    primary_metrics: list[str]
    params: list[ParamOut]
    version: str = "1"
    digest: str = ""  # what a recipe.lock.json pins
    roles: list[str] = []
    entry: list[str] = []  # what runs instead of a command (the integration artifact)
    artifact: list[str] = []  # the artifact's files
    needs: list[str] = []
    framework: str | None = None  # the Python distribution it is written against
    framework_requires: str = ""  # a PEP 440 specifier the runtime's version must satisfy


class WhoAmI(Struct):
    name: str
    role: str
    teams: list[str] = []


class Health(Struct):
    status: str
    database: str | None = None


def preview_out(p: Preview) -> PreviewOut:
    return PreviewOut(
        p.id,
        p.digest,
        p.owner,
        p.created_at,
        p.expires_at,
        p.intent.to_dict(),
        p.spec.to_dict(),
        preview_summary(p.spec),
    )


def resume_out(attempt: Attempt) -> ResumeOut | None:
    r = attempt.resume
    if r is None:
        return None
    return ResumeOut(r.name, r.attempt, r.step, list(r.skipped), r.words(attempt.number))


def job_out(
    job: Job, details: JobDetails | None = None, progress: JobProgressOut | None = None
) -> JobOut:
    attempts = [
        AttemptOut(
            a.attempt.id,
            a.attempt.number,
            str(a.attempt.state),
            a.attempt.reason,
            a.attempt.exit_code,
            a.attempt.created_at,
            a.attempt.updated_at,
            [
                MemberOut(
                    m.id, m.index, str(m.state), m.handle, m.exit_code, m.reason, m.node, m.role
                )
                for m in a.members
            ],
            a.attempt.end,
            resume_out(a.attempt),
        )
        for a in (details.attempts if details else [])
    ]
    return JobOut(
        id=job.id,
        state=str(job.state),
        owner=job.owner,
        experiment=job.spec.experiment,
        method=job.spec.method,
        profile=job.spec.profile,
        backend=job.spec.backend,
        preview_id=job.preview_id,
        created_at=job.created_at,
        updated_at=job.updated_at,
        reason=job.reason,
        exit_code=job.exit_code,
        spec=job.spec.to_dict(),
        attempts=attempts,
        queue=job.spec.queue,
        retry=RetryOut(**job.spec.retry.to_dict()),
        next_attempt_at=job.not_before,
        gpus=job.spec.gpus,
        cpus=sum(r.members * r.resources.cpus for r in job.spec.roles),
        progress=progress,
    )


def progress_out(
    job: Job, progress: JobProgress | None, ranks: QueuePositions | None
) -> JobProgressOut:
    """A listed job's progress: its final state's time is the job's ``updated_at`` (a final
    job never changes again)."""
    pending = job.state is JobState.PENDING
    return JobProgressOut(
        attempts=progress.attempts if progress else 0,
        started_at=progress.started_at if progress else None,
        ended_at=job.updated_at if job.state in JOB_FINAL else None,
        pending_since=(progress.pending_since if progress else None) if pending else None,
        queue_position=ranks.positions.get(job.id) if ranks and pending else None,
    )


def receipt_out(r: Receipt) -> ReceiptOut:
    return ReceiptOut(r.job_id, r.preview_id, r.retry_key, r.created, job_out(r.job))


def method_out(m: Method) -> MethodOut:
    return MethodOut(
        m.name,
        m.description,
        m.default_runtime,
        list(m.primary_metrics),
        [
            ParamOut(
                p.name,
                p.type,
                p.help,
                p.required,
                p.default,
                list(p.choices),
                p.minimum,
                p.maximum,
                p.config,
            )
            for p in m.params
        ],
        m.version,
        method_digest(m),
        list(m.roles),
        list(m.entry),
        [name for name, _ in m.artifact],
        list(m.needs),
        m.framework,
        m.framework_requires,
    )


encode = msgspec.json.encode
