"""An in-process HTTP transport to a litestar app, for httpx clients in tests."""

from __future__ import annotations

import httpx
from litestar.types import ASGIApp


def asgi_transport(app: ASGIApp) -> httpx.ASGITransport:
    """``app`` (the API, or the API wrapped by middleware) served in-process to an httpx client.

    Both sides speak ASGI, but their stubs disagree: httpx types the app's scope and messages as
    plain mappings, litestar as its own typed dicts, which mypy cannot match."""
    return httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # stubs disagree (see above)
