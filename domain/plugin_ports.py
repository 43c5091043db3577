"""The port of published plugins (``UnitOfWork.plugins``; see domain.ports for conventions)."""

from __future__ import annotations

import builtins
from typing import Protocol

from domain.plugins import Disabled, PluginRecord


class PluginRepository(Protocol):
    """Published plugin versions, keyed by (name, version); immutable but for ``disabled``."""

    async def add(self, record: PluginRecord) -> PluginRecord | None:
        """Store a new version. None when this call stored it; otherwise the stored row of the
        same (name, version), whatever its digest, and nothing is written. Concurrent adds of
        one (name, version) store exactly one row; the others wait, then see it."""
        ...

    async def get(self, name: str, version: str) -> PluginRecord | None: ...

    async def versions(self, name: str) -> builtins.list[PluginRecord]:
        """Every version of ``name``, newest first (semantic-version precedence)."""
        ...

    async def list(self, group: str | None = None) -> builtins.list[PluginRecord]:
        """Every version of every plugin (of ``group`` if given), by group in
        ``domain.plugins.GROUPS`` order, then name, then newest version first."""
        ...

    async def set_disabled(
        self, name: str, version: str, disabled: Disabled | None
    ) -> PluginRecord | None:
        """Disable (``disabled``) or enable (None) a version; the updated row, or None when
        there is no such version."""
        ...
