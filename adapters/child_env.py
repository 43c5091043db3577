"""The one place that builds a child process's environment from this process's (and takes a
variable out of it): settings are read by ``entrypoints.settings_loader`` only, but a child
(PostgreSQL's tools, pip, `tp up`'s children) inherits what this process was given."""

from __future__ import annotations

import os
from collections.abc import Mapping


def child_environ(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``overrides``: what a child process is given."""
    return {**os.environ, **(overrides or {})}


def forget(name: str) -> None:
    """Take ``name`` out of this process's environment, so that no child inherits it."""
    os.environ.pop(name, None)


def passed_on(names: tuple[str, ...]) -> dict[str, str]:
    """Only ``names`` of this process's environment (a member's start: never the rest)."""
    return {k: os.environ[k] for k in names if k in os.environ}
