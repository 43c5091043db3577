"""Plugins: versioned, immutable packages of files with a declared purpose (docs/plugins.md).

A package is a directory holding ``plugin.toml`` (its *declaration*: name, version, group,
description, capabilities, where it executes and, for a workload plugin, its entry) and any
other files. Its **digest** is the digest of its file manifest (``domain.artifacts.Manifest``:
every file's path, size and sha256, sorted by path; sha256 of the canonical JSON), so it depends
on the files' paths and contents only, never on how they were packed.

A published (name, version) never changes: publishing it again with other files is refused.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from domain.artifacts import ArtifactFile, Manifest
from domain.documents import toml_loads
from domain.errors import Conflict, InvalidInput

PLUGIN_FILE = "plugin.toml"
CAPSULE_PLUGINS = "plugins"  # workload plugins' files: plugins/<name>/… in the Job Capsule
MAX_PACKAGE_BYTES = 16 * 1024 * 1024  # the files, unpacked (the upload's limit is the same)
MAX_FILES = 2000
MAX_PER_SUBMISSION = 16

GROUPS: dict[str, str] = {  # purpose groups, in the order listings show them
    "algorithm": "training algorithms and losses a recipe can use",
    "data-prep": "preparing, filtering and formatting data sets",
    "evaluation": "evaluating checkpoints and models, scoring outputs",
    "reward": "reward functions and reward models for RL methods",
    "export": "converting, quantising and exporting checkpoints",
}
EXECUTES: dict[str, str] = {
    "control-plane": "in the control plane's process (admins publish these)",
    "node": "in a node daemon, outside the workload (admins publish these)",
    "workload": "inside the job's containers: its files travel in the Job Capsule",
}
CAPABILITIES: dict[str, str] = {
    "read-source": "reads the experiment's source (/workspace)",
    "read-datasets": "reads data sets from storage",
    "read-outputs": "reads the job's output directory",
    "write-outputs": "writes files into the job's output directory",
    "report-metrics": "reports metrics (JSONL or TensorBoard files the collector ships)",
    "read-metrics": "reads jobs' metrics through the API",
    "network": "needs network access outside the cluster",
    "gpu": "uses GPUs",
}
Executes = Literal["control-plane", "node", "workload"]

_PART = r"[a-z0-9][a-z0-9-]{0,62}"
NAME_RE = re.compile(rf"^(?:{_PART}\.)?{_PART}$")
_NUM = r"(?:0|[1-9][0-9]{0,8})"
_PRE = r"(?:0|[1-9][0-9]{0,8}|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
VERSION_RE = re.compile(rf"^{_NUM}\.{_NUM}\.{_NUM}(?:-{_PRE}(?:\.{_PRE})*)?$")
_KEYS = ("name", "version", "group", "description", "capabilities", "executes", "entry")
_WHERE = PLUGIN_FILE


def _bad(key: str, message: str, fix: str) -> InvalidInput:
    return InvalidInput(f"{_WHERE}: {message}", fix=fix, field=f"{_WHERE}:{key}")


def check_name(name: str, field: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"plugin name {name!r} is not valid",
            fix="use lower-case letters, digits and '-', starting with a letter or digit, at "
            "most 63 characters; optionally one namespace before a dot (acme.rouge-eval)",
            field=field,
        )
    return name


def check_version(version: str, field: str) -> str:
    if len(version) > 64 or not VERSION_RE.fullmatch(version):
        raise InvalidInput(
            f"plugin version {version!r} is not a semantic version",
            fix="write MAJOR.MINOR.PATCH, optionally with a pre-release: 1.0.0, 0.3.1-rc.1 "
            "(no leading zeros, no +build metadata)",
            field=field,
        )
    return version


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key of semantic-version precedence (a pre-release sorts before its release)."""
    core, _, pre = version.partition("-")
    numbers = tuple(int(n) for n in core.split("."))
    if not pre:
        return (numbers, 1, ())
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (numbers, 0, ids)


@dataclass(frozen=True, slots=True)
class Declaration:
    """What ``plugin.toml`` declares."""

    name: str
    version: str
    group: str
    description: str
    capabilities: tuple[str, ...]
    executes: Executes
    entry: tuple[str, ...] = ()  # a workload plugin's command, run from its directory

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "group": self.group,
            "description": self.description,
            "capabilities": list(self.capabilities),
            "executes": self.executes,
            "entry": list(self.entry),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Declaration:
        return Declaration(
            d["name"],
            d["version"],
            d["group"],
            d["description"],
            tuple(d["capabilities"]),
            d["executes"],
            tuple(d.get("entry", ())),
        )


def _string(data: dict[str, Any], key: str, fix: str) -> str:
    if key not in data:
        raise _bad(key, f"missing required key {key!r}", fix)
    value = data[key]
    if not isinstance(value, str):
        raise _bad(
            key,
            f"{key!r} must be a string, got {type(value).__name__}",
            f'write it in quotes: {key} = "..."',
        )
    return value


def _strings(data: dict[str, Any], key: str, fix: str) -> tuple[str, ...]:
    value = data[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _bad(key, f"{key!r} must be a list of non-empty strings", fix)
    return tuple(value)


def _closed(key: str, value: str, allowed: dict[str, str]) -> str:
    if value not in allowed:
        raise _bad(
            key,
            f"{key} {value!r} is not one of: {', '.join(allowed)}",
            f"choose one of: {', '.join(allowed)} (docs/plugins.md)",
        )
    return value


def _control(text: str, allowed: str = "") -> str:
    """The first control character of ``text`` not in ``allowed``, written as an escape
    (``\\x00``, ``\\x1b``); "" when there is none. C0, DEL and C1: NUL, which PostgreSQL cannot
    store, and those that move a terminal's cursor or start an escape sequence."""
    for c in text:
        if (ord(c) < 32 or 127 <= ord(c) < 160) and c not in allowed:
            return f"\\x{ord(c):02x}"
    return ""


def parse_declaration(raw: bytes) -> Declaration:
    """Check ``plugin.toml``; each error names the key and how to fix it."""
    try:
        data = toml_loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"{_WHERE}: not valid TOML: {exc}",
            fix="fix the syntax at the place named",
            field=_WHERE,
        ) from None
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise _bad(unknown[0], f"unknown key {unknown[0]!r}", "the keys are: " + ", ".join(_KEYS))
    name = check_name(_string(data, "name", 'add name = "my-plugin"'), f"{_WHERE}:name")
    version = check_version(_string(data, "version", 'add version = "1.0.0"'), f"{_WHERE}:version")
    group = _closed("group", _string(data, "group", 'add group = "evaluation"'), GROUPS)
    description = _string(data, "description", 'add description = "what it does"').strip()
    if not description or len(description) > 500:
        raise _bad(
            "description",
            "'description' must say what the plugin does in 1-500 characters",
            "write one sentence",
        )
    found = _control(description)
    if found:
        raise _bad(
            "description",
            f"'description' holds a control character ({found}); listings and terminals show it",
            "write one line of plain text, without tabs, line breaks or escape sequences",
        )
    executes = _closed("executes", _string(data, "executes", 'add executes = "workload"'), EXECUTES)
    if "capabilities" not in data:
        raise _bad(
            "capabilities",
            "missing required key 'capabilities'",
            'declare what it does, e.g. capabilities = ["read-outputs"] (or [] for nothing)',
        )
    capabilities = _strings(data, "capabilities", 'e.g. capabilities = ["read-outputs"]')
    for cap in capabilities:
        _closed("capabilities", cap, CAPABILITIES)
    if len(set(capabilities)) != len(capabilities):
        raise _bad("capabilities", "a capability is declared twice", "declare each once")
    entry: tuple[str, ...] = ()
    if "entry" in data:
        entry = _strings(data, "entry", 'e.g. entry = ["python3", "evaluate.py"]')
        if not 1 <= len(entry) <= 64:
            raise _bad("entry", "'entry' must have 1-64 arguments", "give the command's argv")
        for i, arg in enumerate(entry):
            found = _control(arg, allowed="\t\n")  # a script's lines (sh -c) are arguments
            if found:
                raise _bad(
                    "entry",
                    f"entry[{i}] holds a control character ({found})",
                    "remove it: an argument holds no NUL (a process cannot receive one) and no "
                    "control character but a tab or a line break",
                )
    if executes == "workload" and not entry:
        raise _bad(
            "entry",
            "a workload plugin needs an 'entry' (its command)",
            'add e.g. entry = ["python3", "evaluate.py"], run from its directory',
        )
    where = cast(Executes, executes)
    return Declaration(name, version, group, description, tuple(sorted(capabilities)), where, entry)


@dataclass(frozen=True, slots=True)
class Package:
    """A plugin package read into memory: its declaration, its files and their manifest."""

    declaration: Declaration
    files: dict[str, bytes]
    manifest: Manifest

    @property
    def digest(self) -> str:
        return self.manifest.digest


def manifest_of(files: dict[str, bytes]) -> Manifest:
    return Manifest.of(
        [ArtifactFile(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()]
    )


def open_package(files: dict[str, bytes]) -> Package:
    """Check a package's files (paths already checked by ``domain.tarball``)."""
    if PLUGIN_FILE not in files:
        raise InvalidInput(
            f"the package has no {PLUGIN_FILE} at its top",
            fix=f"publish the directory that holds {PLUGIN_FILE} (docs/plugins.md)",
            field=PLUGIN_FILE,
        )
    if len(files) > MAX_FILES or sum(map(len, files.values())) > MAX_PACKAGE_BYTES:
        raise InvalidInput(
            f"the package is larger than {MAX_FILES} files or {MAX_PACKAGE_BYTES} bytes",
            fix="leave data sets, checkpoints and caches out of the plugin",
            field="package",
        )
    return Package(parse_declaration(files[PLUGIN_FILE]), dict(files), manifest_of(files))


@dataclass(frozen=True, slots=True)
class Disabled:
    at: datetime
    by: str
    reason: str


@dataclass(frozen=True, slots=True)
class PluginRecord:
    """A published version: immutable but for being disabled (and enabled again) by an admin."""

    declaration: Declaration
    manifest: Manifest  # the package's files
    blob: str  # the blob holding its canonical tar (``domain.tarball.pack`` of its files)
    size: int  # of its files together
    published_by: str
    published_at: datetime
    disabled: Disabled | None = None

    @property
    def name(self) -> str:
        return self.declaration.name

    @property
    def version(self) -> str:
        return self.declaration.version

    @property
    def digest(self) -> str:
        return self.manifest.digest


@dataclass(frozen=True, slots=True)
class PluginPin:
    """A plugin a submission names (experiment.toml ``[plugins]``); ``digest`` when pinned."""

    name: str
    version: str
    digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "digest": self.digest}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PluginPin:
        return PluginPin(d["name"], d["version"], d.get("digest"))


@dataclass(frozen=True, slots=True)
class PluginUse:
    """A plugin as the resolved JobSpec records it: exactly which package, and where."""

    name: str
    version: str
    digest: str
    group: str
    executes: str
    path: str | None = None  # a workload plugin's directory in the member's container

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "digest": self.digest,
            "group": self.group,
            "executes": self.executes,
            "path": self.path,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PluginUse:
        return PluginUse(
            d["name"], d["version"], d["digest"], d["group"], d["executes"], d.get("path")
        )


def check_usable(record: PluginRecord, pin: PluginPin, field: str) -> None:
    """Refuse a disabled version, or one whose digest is not the pinned one."""
    if record.disabled is not None:
        d = record.disabled
        raise Conflict(
            f"plugin {record.declaration.ref} was disabled for new submissions by {d.by} on "
            f"{d.at:%Y-%m-%d %H:%M} UTC: {d.reason}",
            fix=f"use another version (`tp plugin info {record.name}`), or ask an admin to "
            f"enable it (`tp plugin enable {record.declaration.ref}`)",
            field=field,
        )
    if pin.digest is not None and pin.digest != record.digest:
        raise Conflict(
            f"plugin {record.declaration.ref} is {record.digest} on this server, not the "
            f"pinned {pin.digest}",
            fix=f"check which server you use; to take this one: `tp plugin install "
            f"{record.declaration.ref}`",
            field=field,
        )


def integrity_failure(record: PluginRecord, detail: str) -> Conflict:
    return Conflict(
        f"plugin {record.declaration.ref} failed its integrity check: {detail}",
        fix="an admin can restore it by publishing the same directory again (`tp plugin "
        f"publish DIR`), or disable it (`tp plugin disable {record.declaration.ref}`)",
        field="plugin",
    )


def check_loaded(record: PluginRecord, files: dict[str, bytes]) -> None:
    """Refuse files read back from storage that are not the published package."""
    found = manifest_of(files).digest
    if found != record.digest:
        raise integrity_failure(
            record,
            f"its stored files have digest {found}, not the published {record.digest} (the "
            "blob store was changed)",
        )


def parse_ref(text: str, field: str, version_required: bool = True) -> tuple[str, str | None]:
    """``NAME@VERSION`` (or ``NAME`` when the version is optional) → (name, version)."""
    name, sep, version = text.partition("@")
    if not sep and version_required:
        raise InvalidInput(
            f"{text!r} names no version",
            fix=f"write {text}@VERSION (see `tp plugin info {text}`)",
            field=field,
        )
    check_name(name, field)
    return name, check_version(version, field) if sep else None


def listing_order(records: Iterable[PluginRecord]) -> list[PluginRecord]:
    """By group (``GROUPS`` order), then name, then newest version first."""
    newest = sorted(records, key=lambda r: version_key(r.version), reverse=True)
    order = list(GROUPS)

    def group(r: PluginRecord) -> int:
        g = r.declaration.group
        return order.index(g) if g in order else len(order)

    return sorted(newest, key=lambda r: (group(r), r.name))
