"""The port of the runtime registry."""

from __future__ import annotations

import builtins
from typing import Protocol

from domain.catalog import RuntimeSpec


class RuntimeRepository(Protocol):
    """The runtime registry (docs/runtimes.md): runtimes the operator added, by name. The
    built-in runtimes are not stored here."""

    async def get(self, name: str) -> RuntimeSpec | None: ...

    async def list(self) -> builtins.list[RuntimeSpec]:
        """Every stored runtime, by name."""
        ...

    async def add(self, runtime: RuntimeSpec) -> RuntimeSpec | None:
        """Store ``runtime`` unless its name is taken; None when this call stored it, else the
        stored one. Concurrent adds of one name store exactly one (the others wait for it)."""
        ...

    async def replace(self, runtime: RuntimeSpec, revision: int) -> bool:
        """Overwrite the stored runtime of that name if its revision is still ``revision``;
        False when it is not (changed or removed since it was read)."""
        ...
