"""A preview's resolution in typed fields (``PreviewOut.summary``): what the console's
submission dialog says in words before anything is created, without digging into the free-form
``spec``. Every value comes from the resolved JobSpec; the words are the domain's own
(``RoleSpec.describe``, ``RetryPolicy.words``), the same as `tp submit`'s preview."""

from __future__ import annotations

from msgspec import Struct

from domain.submission import JobSpec


class RoleSummaryOut(Struct):
    """One role: ``members`` identical members in ``pool``, each with these resources."""

    name: str
    profile: str  # as the user wrote it, e.g. h200:8
    pool: str
    members: int
    gpus: int  # per member; 0 for a CPU job
    gpu_model: str | None
    cpus: float  # per member
    memory_mb: int  # per member
    words: str  # "2×8 h200 GPUs in pool a", "1 CPU in pool local"


class RuntimeSummaryOut(Struct):
    name: str
    image: str
    digest: str  # the pinned content digest ("" when the runtime is not pinned)


class SourceSummaryOut(Struct):
    digest: str
    size: int


class PluginSummaryOut(Struct):
    name: str
    version: str
    digest: str
    group: str
    executes: str


class PreviewSummaryOut(Struct):
    backend: str
    queue: str
    roles: list[RoleSummaryOut]
    runtime: RuntimeSummaryOut
    retry: str  # the policy in words: "no retry (1 attempt)", "3 attempts, a new one after …"
    retry_attempts: int
    source: SourceSummaryOut | None  # the uploaded source archive, if any
    env: list[str]  # the names of the variables set (values are in the spec)
    plugins: list[PluginSummaryOut]
    command: list[str]


def preview_summary(spec: JobSpec) -> PreviewSummaryOut:
    return PreviewSummaryOut(
        backend=spec.backend,
        queue=spec.queue,
        roles=[
            RoleSummaryOut(
                r.name,
                r.profile,
                r.pool,
                r.members,
                r.resources.gpus,
                r.resources.gpu_model,
                r.resources.cpus,
                r.resources.memory_mb,
                r.describe(),
            )
            for r in spec.roles
        ],
        runtime=RuntimeSummaryOut(spec.runtime.name, spec.runtime.image, spec.runtime.digest),
        retry=spec.retry.words(),
        retry_attempts=spec.retry.max_attempts,
        source=SourceSummaryOut(spec.source.digest, spec.source.size) if spec.source else None,
        env=sorted(spec.env),
        plugins=[
            PluginSummaryOut(p.name, p.version, p.digest, p.group, p.executes) for p in spec.plugins
        ],
        command=list(spec.command),
    )
