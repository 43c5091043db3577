"""The effective settings as rows (`tp config show`, the generated docs table): every section of
the model, the processes that read each, and masking of secrets."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from entrypoints.settings import Settings
from entrypoints.settings_loader import Entry, load_entries
from entrypoints.settings_metrics import MetricsSettings
from entrypoints.settings_sections import CliSettings, NodeSettings, SupervisionSettings

MASK = "****"
# the sections each deployable process reads (`tp config show --process`)
PROCESSES: dict[str, tuple[str, ...]] = {
    "api": (
        "general", "database", "api", "logging", "console", "docker", "blobs", "limits",
        "telemetry", "slurm", "kubernetes", "postgres", "build", "webhooks", "metrics",
        "supervision",
    ),
    "node-gateway": (
        "general", "database", "logging", "node-gateway", "tls", "metrics", "supervision",
    ),
    "telemetry-gateway": (
        "general", "database", "logging", "telemetry", "tls", "metrics", "supervision",
    ),
    "node": ("logging", "node", "metrics", "supervision"),
    "collector": ("logging", "metrics", "supervision"),
}  # fmt: skip
SECTION_ORDER = (
    "general", "database", "api", "logging", "console", "docker", "blobs", "limits",
    "node-gateway", "tls", "telemetry", "slurm", "kubernetes", "postgres", "build", "webhooks",
    "node", "metrics", "cli", "supervision",
)  # fmt: skip


def entries(environ: Mapping[str, str] | None = None) -> list[Entry]:
    """Every setting, in section order (SystemExit on a bad value, as at a process's start)."""
    found: list[Entry] = []
    for cls in (Settings, NodeSettings, MetricsSettings, CliSettings, SupervisionSettings):
        found += load_entries(cls, environ)[1]
    return sorted(found, key=lambda e: SECTION_ORDER.index(e.var.section))


def mask(entry: Entry) -> Any:
    """The value to show: a secret's password or whole value replaced by ****."""
    value = entry.value
    if not entry.var.secret or value is None:
        return value
    parts = urlsplit(str(value))
    if parts.scheme and parts.hostname:  # a URL: only its password is secret
        if parts.password is None:
            return value
        netloc = f"{parts.username or ''}:{MASK}@{parts.hostname}"
        netloc += f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=netloc))
    return MASK


def shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Path | float | int | str):
        return str(value)
    if isinstance(value, range):
        return f"{value.start}-{value.stop - 1}"

    return repr(value)


def rows(process: str | None, environ: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """``{section, variable, value, source}`` for ``process``'s sections (all: None)."""
    wanted = PROCESSES[process] if process else SECTION_ORDER
    return [
        {
            "section": e.var.section,
            "variable": e.var.env,
            "value": shown(mask(e)),
            "source": e.source,
        }
        for e in entries(environ)
        if e.var.section in wanted
    ]
