"""What a submission may name: methods (recipes) and runtimes (profiles: domain.requests).

The catalog is data, configured by the operator; here are the shapes and the validation rules.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from domain.canonical import digest as content_digest
from domain.errors import Conflict, InvalidInput

ParamType = Literal["str", "int", "float", "bool"]
ParamValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared parameter of a method."""

    name: str
    type: ParamType
    help: str
    required: bool = False
    default: ParamValue | None = None
    choices: tuple[ParamValue, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    config: str = ""  # the dotted path it sets in the recipe's config.json ("": its name)


@dataclass(frozen=True, slots=True)
class Method:
    """A recipe: ``<framework>/<method>`` with declared parameters and a default runtime.

    A recipe with an integration artifact (``artifact``: its files, by relative path) runs
    ``entry`` instead of a user's command: the artifact and ``config.json`` (the parameters
    placed at their config paths) travel in the Job Capsule (docs/capsule.md). ``needs``: the
    storage capabilities its backend must offer (``capsule``, ``shared_outputs``, …).
    ``framework``: the Python distribution it is written against (``trl``, ``numpy``; None:
    none), which the resolved runtime must provide at a version ``framework_requires`` (a PEP 440
    specifier, "" for any) accepts (docs/runtimes.md).
    """

    name: str
    description: str
    params: tuple[ParamSpec, ...]
    default_runtime: str
    primary_metrics: tuple[str, ...] = ()
    version: str = "1"
    roles: tuple[str, ...] = ("main",)
    entry: tuple[str, ...] = ()
    artifact: tuple[tuple[str, bytes], ...] = ()
    needs: tuple[str, ...] = ()
    framework: str | None = None
    framework_requires: str = ""

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    def config(self, params: dict[str, ParamValue]) -> dict[str, object]:
        """The parameters as the artifact reads them: each at its config path, nested."""
        out: dict[str, object] = {}
        for spec in self.params:
            if spec.name not in params:
                continue
            *parents, leaf = (spec.config or spec.name).split(".")
            node = out
            for key in parents:
                child = node.setdefault(key, {})
                assert isinstance(child, dict), f"config path {spec.config} crosses a value"
                node = child
            node[leaf] = params[spec.name]
        return out


@dataclass(frozen=True, slots=True)
class Resources:
    cpus: float
    memory_mb: int
    gpus: int = 0
    gpu_model: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "cpus": self.cpus,
            "memory_mb": self.memory_mb,
            "gpus": self.gpus,
            "gpu_model": self.gpu_model,
        }


@dataclass(frozen=True, slots=True)
class RuntimePin:
    """A runtime image pinned by content digest, with its contract (docs/runtimes.md)."""

    name: str
    image: str
    digest: str
    python: str | None
    process_model: str
    frameworks: dict[str, str] = field(default_factory=dict)  # distribution -> exact version
    # every Python distribution the image must hold, and nothing else (canonical name -> exact
    # version; the runner compares it with the image: docs/runtimes.md); empty: not checked
    packages: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "image": self.image,
            "digest": self.digest,
            "python": self.python,
            "process_model": self.process_model,
            "frameworks": dict(self.frameworks),
        }
        if self.packages:  # only when present: JobSpecs without it keep their digest
            out["packages"] = dict(sorted(self.packages.items()))
        return out


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    """A runtime as the operator declares it; a backend pins ``image`` to a digest.

    ``digest`` (``sha256:…``): the only content the backend may pin it to (None: whatever
    ``image`` names at preview, as for the built-in runtimes). ``frameworks``: the Python
    distributions it provides, each at an exact version (``{"numpy": "1.24.2"}``).
    ``packages``: every Python distribution the image holds (a built-in runtime's lock file),
    canonical name -> exact version; empty when the image's contents are not listed.
    ``added_by``/``added_at``/``revision``: the registry's record (None/None/0: built in).
    """

    name: str
    image: str
    python: str | None
    process_model: str  # domain.runtimes.PROCESS_MODELS
    description: str = ""
    digest: str | None = None
    frameworks: dict[str, str] = field(default_factory=dict)
    added_by: str | None = None
    added_at: datetime | None = None
    revision: int = 0
    packages: dict[str, str] = field(default_factory=dict)

    @property
    def builtin(self) -> bool:
        return self.added_by is None

    def content(self) -> dict[str, Any]:
        """What the runtime promises (without the registry's record): equal content, same
        runtime."""
        out = {
            "name": self.name,
            "image": self.image,
            "digest": self.digest,
            "python": self.python,
            "process_model": self.process_model,
            "frameworks": dict(sorted(self.frameworks.items())),
            "description": self.description,
        }
        if self.packages:  # only when present, as in RuntimePin.to_dict
            out["packages"] = dict(sorted(self.packages.items()))
        return out


@dataclass(frozen=True, slots=True)
class Catalog:
    methods: tuple[Method, ...]
    runtimes: tuple[RuntimeSpec, ...] = field(default=())

    def runtime(self, name: str) -> RuntimeSpec:
        return _lookup(self.runtimes, name, "runtime", "tp runtime ls")

    def method(self, name: str) -> Method:
        return _lookup(self.methods, name, "method", "tp methods")


def method_digest(m: Method) -> str:
    """The digest of a recipe: its declaration and every artifact file's sha256."""
    return content_digest(
        {
            "name": m.name,
            "version": m.version,
            "default_runtime": m.default_runtime,
            "primary_metrics": list(m.primary_metrics),
            "roles": list(m.roles),
            "entry": list(m.entry),
            "needs": list(m.needs),
            "params": [
                [
                    p.name,
                    p.type,
                    p.required,
                    p.default,
                    list(p.choices),
                    p.minimum,
                    p.maximum,
                    p.config,
                ]
                for p in m.params
            ],
            "artifact": {name: hashlib.sha256(data).hexdigest() for name, data in m.artifact},
            # only when declared, so that recipes without a framework keep their digests
            **({"framework": [m.framework, m.framework_requires]} if m.framework else {}),
        }
    )


@dataclass(frozen=True, slots=True)
class RecipeLock:
    """What an experiment's ``recipe.lock.json`` pins: the recipe's name, version and digest,
    and, for a recipe written against a framework, that framework's version as the runtime
    provided it when the lock was written."""

    method: str
    version: str
    digest: str
    framework: str | None = None
    framework_version: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"method": self.method, "version": self.version, "digest": self.digest}
        if self.framework is not None:
            out["framework"] = self.framework
        if self.framework_version is not None:
            out["framework_version"] = self.framework_version
        return out

    def check(self, method: Method, runtime: RuntimePin | None = None) -> None:
        """Refuse a lock that no longer matches the recipe the server offers, or (given the
        resolved ``runtime``) whose framework version is not the one that runtime provides."""
        fix = (
            "review the recipe's changes (`tp methods NAME`), then `tp recipe upgrade"
            " EXPERIMENT` and validate again"
        )
        digest = method_digest(method)
        if (self.method, self.version, self.digest) != (method.name, method.version, digest):
            raise Conflict(
                f"recipe.lock.json is stale: it pins {self.method} version {self.version}"
                f" ({self.digest[:19]}…), the server offers {method.name} version"
                f" {method.version} ({digest[:19]}…)",
                fix=fix,
                field="intent.recipe_lock",
            )
        if runtime is None or method.framework is None:
            return
        provided = runtime.frameworks.get(method.framework)
        if (self.framework, self.framework_version) != (method.framework, provided):
            pinned = (
                f"{self.framework} {self.framework_version}"
                if self.framework and self.framework_version
                else f"no version of {method.framework}"
            )
            raise Conflict(
                f"recipe.lock.json is stale: it pins {pinned}; runtime {runtime.name} provides"
                f" {method.framework} {provided or '(none)'}",
                fix="`tp recipe upgrade EXPERIMENT` to lock the version the runtime provides"
                " (or choose the runtime the lock was made with: `--runtime`)",
                field="intent.recipe_lock",
            )


N = TypeVar("N", Method, RuntimeSpec)


def _lookup(items: tuple[N, ...], name: str, what: str, listing: str) -> N:
    for item in items:
        if item.name == name:
            return item
    known = ", ".join(i.name for i in items) or "none configured"
    raise InvalidInput(
        f"unknown {what} {name!r}",
        fix=f"use one of: {known} (see `{listing}`)",
        field=f"intent.{what}",
    )


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def coerce_param(spec: ParamSpec, raw: ParamValue, where: str) -> ParamValue:
    """Convert ``raw`` (a value or a ``--set K=V`` string) to the declared type; check it."""
    value: ParamValue
    try:
        if spec.type == "bool":
            if isinstance(raw, bool):
                value = raw
            elif str(raw).lower() in _TRUE | _FALSE:
                value = str(raw).lower() in _TRUE
            else:
                raise ValueError(raw)
        elif spec.type == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError(raw)
            value = int(raw)
        elif spec.type == "float":
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = float(raw)
        else:
            value = str(raw)
    except ValueError:
        raise InvalidInput(
            f"parameter {spec.name!r} must be a {spec.type}, got {raw!r}",
            fix=f"pass a {spec.type}, e.g. --set {spec.name}=<{spec.type}>",
            field=where,
        ) from None
    if isinstance(value, float) and not math.isfinite(value):  # NaN passes every range check
        raise InvalidInput(
            f"parameter {spec.name!r} is {raw!r}, not a finite number",
            fix=f"pass a finite {spec.type}{_range(spec)}, e.g. --set {spec.name}=<{spec.type}>",
            field=where,
        )
    if spec.choices and value not in spec.choices:
        raise InvalidInput(
            f"parameter {spec.name!r} is {value!r}, not one of its choices",
            fix="choose one of: " + ", ".join(map(str, spec.choices)),
            field=where,
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if spec.minimum is not None and value < spec.minimum:
            raise InvalidInput(
                f"parameter {spec.name!r} is {value}, below its minimum {spec.minimum}",
                fix=f"set {spec.name} to at least {spec.minimum}",
                field=where,
            )
        if spec.maximum is not None and value > spec.maximum:
            raise InvalidInput(
                f"parameter {spec.name!r} is {value}, above its maximum {spec.maximum}",
                fix=f"set {spec.name} to at most {spec.maximum}",
                field=where,
            )
    return value


def _range(spec: ParamSpec) -> str:
    if spec.minimum is not None and spec.maximum is not None:
        return f" from {spec.minimum} to {spec.maximum}"
    if spec.minimum is not None:
        return f" of at least {spec.minimum}"
    if spec.maximum is not None:
        return f" of at most {spec.maximum}"
    return ""


def resolve_params(method: Method, given: dict[str, ParamValue]) -> dict[str, ParamValue]:
    """Validate ``given`` against ``method``'s declaration; fill defaults; refuse unknown names."""
    out: dict[str, ParamValue] = {}
    for name, raw in given.items():
        spec = method.param(name)
        if spec is None:
            known = ", ".join(p.name for p in method.params) or "none"
            raise InvalidInput(
                f"method {method.name} has no parameter {name!r}",
                fix=f"its parameters are: {known} (see `tp methods {method.name}`)",
                field=f"intent.params.{name}",
            )
        out[name] = coerce_param(spec, raw, f"intent.params.{name}")
    for spec in method.params:
        if spec.name in out:
            continue
        if spec.default is not None:
            out[spec.name] = spec.default
        elif spec.required:
            raise InvalidInput(
                f"method {method.name} needs parameter {spec.name!r} ({spec.help})",
                fix=f"set it in the experiment file or with --set {spec.name}=...",
                field=f"intent.params.{spec.name}",
            )
    return out


NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def check_name(value: str, what: str, field_name: str) -> str:
    if not NAME_RE.fullmatch(value):
        shown = repr(value[:80]) + (f" (cut, {len(value)} characters)" if len(value) > 80 else "")
        raise InvalidInput(
            f"{what} {shown} is not a valid name",
            fix="use 1-63 characters: lower-case letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            field=field_name,
        )
    return value
