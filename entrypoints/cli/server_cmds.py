"""Server-side commands (`tp up`, `tp serve`): registered on the CLI app by ``register``."""

from __future__ import annotations

from typing import Any


def register(app: Any) -> None:
    """Add the server commands to ``app`` (filled in by the control-plane entrypoint)."""
