"""Submission intent → resolved JobSpec → immutable Preview (with a content digest).

``resolve`` is a pure function: the application layer hands it the catalog, the runtime pin it
looked up, the new id and the current time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from domain import plugins
from domain.canonical import digest as content_digest
from domain.capsule import CapsuleRef
from domain.catalog import (
    Catalog,
    Method,
    ParamValue,
    RecipeLock,
    Resources,
    RuntimePin,
    check_name,
    resolve_params,
)
from domain.errors import Conflict, Expired, InvalidInput
from domain.plugins import PluginPin, PluginUse
from domain.requests import DEFAULT_ROLE, RoleSpec
from domain.retry import NO_RETRY, RetryPolicy

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_ENV = 64
MAX_PARAMS = 256


@dataclass(frozen=True, slots=True)
class SourceRef:
    """A source archive already uploaded to the blob store (gzip-compressed tar)."""

    digest: str
    size: int

    def to_dict(self) -> dict[str, object]:
        return {"digest": self.digest, "size": self.size}


@dataclass(frozen=True, slots=True)
class SubmissionIntent:
    """What the user asked for, before resolution."""

    experiment: str
    method: str
    profiles: tuple[str, ...]  # `--profile` values, e.g. ("h200:8",) or ("train=h200:8", …)
    params: dict[str, ParamValue] = field(default_factory=dict)
    runtime: str | None = None
    source: SourceRef | None = None
    env: dict[str, str] = field(default_factory=dict)
    queue: str | None = None  # None: the user's default queue
    recipe_lock: RecipeLock | None = None  # the experiment's recipe.lock.json, if it has one
    plugins: tuple[PluginPin, ...] = ()  # experiment.toml [plugins] (docs/plugins.md)
    retry: RetryPolicy | None = None  # experiment.toml [retry] / --retry N; None: no retry

    def to_dict(self) -> dict[str, Any]:
        retry = {"retry": self.retry.to_dict()} if self.retry else {}  # absent: as before
        return {
            "experiment": self.experiment,
            "method": self.method,
            "profiles": list(self.profiles),
            "queue": self.queue,
            "params": dict(self.params),
            "runtime": self.runtime,
            "source": self.source.to_dict() if self.source else None,
            "env": dict(self.env),
            "recipe_lock": self.recipe_lock.to_dict() if self.recipe_lock else None,
            "plugins": [p.to_dict() for p in self.plugins],
            **retry,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> SubmissionIntent:
        src = d.get("source")
        profiles = d.get("profiles") or ([d["profile"]] if d.get("profile") else [])
        return SubmissionIntent(
            experiment=d["experiment"],
            method=d["method"],
            profiles=tuple(profiles),
            queue=d.get("queue"),
            params=dict(d.get("params") or {}),
            runtime=d.get("runtime"),
            source=SourceRef(digest=src["digest"], size=int(src["size"])) if src else None,
            env=dict(d.get("env") or {}),
            recipe_lock=RecipeLock(**d["recipe_lock"]) if d.get("recipe_lock") else None,
            plugins=tuple(PluginPin.from_dict(p) for p in d.get("plugins") or ()),
            retry=RetryPolicy.parse(d["retry"]) if d.get("retry") else None,
        )


@dataclass(frozen=True, slots=True)
class JobSpec:
    """The fully resolved job: exactly what will run, and where."""

    experiment: str
    method: str
    params: dict[str, ParamValue]
    command: tuple[str, ...]
    runtime: RuntimePin
    backend: str
    queue: str
    roles: tuple[RoleSpec, ...]
    source: SourceRef | None
    env: dict[str, str]
    capsule: CapsuleRef | None = None  # None: the backend runs the command as it is
    plugins: tuple[PluginUse, ...] = ()  # the plugin packages it uses, by digest
    retry: RetryPolicy = NO_RETRY  # capped by its queue's max_attempts

    @property
    def members(self) -> int:
        return sum(r.members for r in self.roles)

    @property
    def blobs(self) -> frozenset[str]:
        """The blobs it needs: its source archive and its Job Capsule."""
        found = {self.source.digest if self.source else None}
        found.add(self.capsule.blob if self.capsule else None)
        return frozenset(b for b in found if b is not None)

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    @property
    def profile(self) -> str:
        """The request as the user wrote it (roles named when there are several)."""
        if len(self.roles) == 1:
            return self.roles[0].profile
        return " ".join(f"{r.name}={r.profile}" for r in self.roles)

    @property
    def resources(self) -> Resources:
        """Per-member resources of the first role."""
        return self.roles[0].resources

    def member_roles(self) -> list[RoleSpec]:
        """The role of each member index (roles in order, members of a role together)."""
        return [r for r in self.roles for _ in range(r.members)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "method": self.method,
            "params": dict(self.params),
            "command": list(self.command),
            "runtime": self.runtime.to_dict(),
            "backend": self.backend,
            "queue": self.queue,
            "roles": [r.to_dict() for r in self.roles],
            "source": self.source.to_dict() if self.source else None,
            "env": dict(self.env),
            "capsule": self.capsule.to_dict() if self.capsule else None,
            "plugins": [p.to_dict() for p in self.plugins],
            # no retry (the default) is absent, so digests of earlier previews stay the same
            **({"retry": self.retry.to_dict()} if self.retry != NO_RETRY else {}),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> JobSpec:
        src = d.get("source")
        capsule = d.get("capsule")
        return JobSpec(
            experiment=d["experiment"],
            method=d["method"],
            params=dict(d["params"]),
            command=tuple(d["command"]),
            runtime=RuntimePin(**d["runtime"]),
            backend=d["backend"],
            queue=d.get("queue", "default"),
            roles=_roles_from(d),
            source=SourceRef(**src) if src else None,
            env=dict(d["env"]),
            capsule=CapsuleRef(**capsule) if capsule else None,
            plugins=tuple(PluginUse.from_dict(p) for p in d.get("plugins") or ()),
            retry=RetryPolicy.parse(d["retry"]) if d.get("retry") else NO_RETRY,
        )


def _roles_from(d: dict[str, Any]) -> tuple[RoleSpec, ...]:
    if "roles" in d:
        return tuple(RoleSpec.from_dict(r) for r in d["roles"])
    # a spec stored before roles existed: one role on the local pool
    return (
        RoleSpec(
            DEFAULT_ROLE, d["profile"], "local", int(d["members"]), Resources(**d["resources"])
        ),
    )


@dataclass(frozen=True, slots=True)
class Preview:
    """An immutable, resolved submission that creates no job until committed."""

    id: str
    owner: str
    digest: str
    created_at: datetime
    expires_at: datetime
    intent: SubmissionIntent
    spec: JobSpec

    def check_digest(self, digest: str) -> None:
        """Refuse a commit (or a replay of one) whose digest differs from this preview's."""
        if digest != self.digest:
            raise Conflict(
                f"digest {digest} does not match preview {self.id} ({self.digest})",
                fix="the preview file was changed or is stale: run `tp submit --preview` again",
                field="digest",
            )

    def check_commit(self, digest: str, now: datetime) -> None:
        """Refuse a commit whose digest differs from this preview's, or that comes too late."""
        self.check_digest(digest)
        if now >= self.expires_at:
            raise Expired(
                f"preview {self.id} expired at {self.expires_at.isoformat()}",
                fix="run `tp submit --preview` again to get a fresh preview",
                field="preview_id",
            )


def preview_content(intent: SubmissionIntent, spec: JobSpec) -> dict[str, Any]:
    return {"intent": intent.to_dict(), "spec": spec.to_dict()}


def render_command(method: Method, params: dict[str, ParamValue]) -> tuple[str, ...]:
    """The argv a member runs: a recipe's entry (its integration artifact), or the user's
    command under /bin/sh for ``custom/custom``."""
    if method.entry:
        return method.entry
    if method.name == "custom/custom":
        return ("/bin/sh", "-c", str(params["command"]))
    raise InvalidInput(  # pragma: no cover - the catalog only offers renderable methods
        f"method {method.name} has no command renderer",
        fix="use custom/custom",
        field="intent.method",
    )


def check_intent(intent: SubmissionIntent) -> None:
    check_name(intent.experiment, "experiment name", "intent.experiment")
    if len(intent.params) > MAX_PARAMS:
        raise InvalidInput(
            f"{len(intent.params)} parameters given; at most {MAX_PARAMS} are accepted",
            fix="move bulk configuration into a file in the experiment's source",
            field="intent.params",
        )
    if len(intent.env) > MAX_ENV:
        raise InvalidInput(
            f"{len(intent.env)} environment variables given; at most {MAX_ENV} are accepted",
            fix="move bulk configuration into a file in the experiment's source",
            field="intent.env",
        )
    for name in intent.env:
        if not ENV_NAME_RE.fullmatch(name) or name.upper().startswith("TUNEPLANE_"):
            raise InvalidInput(
                f"environment variable name {name!r} is not allowed",
                fix="use letters, digits and '_', not starting with a digit or TUNEPLANE_",
                field=f"intent.env.{name}",
            )
    _check_pins(intent.plugins)
    if intent.source is not None and not DIGEST_RE.fullmatch(intent.source.digest):
        raise InvalidInput(
            f"source digest {intent.source.digest!r} is not a sha256 digest",
            fix="upload the archive first (POST /v1/archives) and use the digest it returns",
            field="intent.source.digest",
        )


def _check_pins(pins: tuple[PluginPin, ...]) -> None:
    if len(pins) > plugins.MAX_PER_SUBMISSION:
        raise InvalidInput(
            f"{len(pins)} plugins named; a submission uses at most {plugins.MAX_PER_SUBMISSION}",
            fix="use fewer plugins",
            field="intent.plugins",
        )
    for i, pin in enumerate(pins):
        where = f"intent.plugins[{i}]"
        plugins.check_name(pin.name, f"{where}.name")
        plugins.check_version(pin.version, f"{where}.version")
        if pin.digest is not None and not DIGEST_RE.fullmatch(pin.digest):
            raise InvalidInput(
                f"plugin digest {pin.digest!r} is not a sha256 digest",
                fix="pin the digest `tp plugin install` wrote",
                field=f"{where}.digest",
            )
        if any(p.name == pin.name for p in pins[:i]):
            raise InvalidInput(
                f"plugin {pin.name} is named twice", fix="name each plugin once", field=where
            )


def resolve(
    intent: SubmissionIntent,
    catalog: Catalog,
    runtime: RuntimePin,
    roles: tuple[RoleSpec, ...],
    backend: str,
    queue: str,
    max_attempts: int | None = None,
) -> JobSpec:
    """Resolve ``intent`` into a JobSpec. Raises InvalidInput naming the offending field.

    ``roles`` come from ``requests.resolve_roles`` and ``queue`` (with its ``max_attempts``, the
    cap on the retry policy) from the queue policy; both need the operator's configuration,
    which the application layer reads.
    """
    check_intent(intent)
    method = catalog.method(intent.method)
    if intent.recipe_lock is not None:
        intent.recipe_lock.check(method, runtime)
    params = resolve_params(method, intent.params)
    return JobSpec(
        experiment=intent.experiment,
        method=method.name,
        params=params,
        command=render_command(method, params),
        runtime=runtime,
        backend=backend,
        queue=queue,
        roles=roles,
        source=intent.source,
        env=dict(intent.env),
        retry=(intent.retry or NO_RETRY).capped(max_attempts),
    )


def make_preview(
    *,
    preview_id: str,
    owner: str,
    intent: SubmissionIntent,
    spec: JobSpec,
    now: datetime,
    ttl: timedelta,
) -> Preview:
    return Preview(
        id=preview_id,
        owner=owner,
        digest=content_digest(preview_content(intent, spec)),
        created_at=now,
        expires_at=now + ttl,
        intent=intent,
        spec=spec,
    )
