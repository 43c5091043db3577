"""The web console: static pages built from console/ (npm) and served at /console/.

The assets carry no data and need no token; the pages ask for an API token and call the JSON API
with it (``Authorization: Bearer``), so the console sees exactly what the token's owner may see.
Every console answer carries a Content-Security-Policy that allows only this origin's scripts,
styles and API: no inline script, no third-party origin, no framing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Request, Response, Router, get
from litestar.datastructures import CacheControlHeader
from litestar.exceptions import HTTPException, NotFoundException
from litestar.static_files import create_static_files_router

from entrypoints.api.problems import EXCEPTION_HANDLERS

CONSOLE_PATH = "/console"
DEFAULT_DIST = Path(__file__).with_name("console_dist")

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}

NOT_BUILT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>TunePlane console not built</title></head>
<body><main><h1>The console is not built</h1>
<p>The control plane found no built console in <code>{dist}</code>.</p>
<p>Fix: run <code>bash -c 'source deploy/dev/setup.sh'</code> (it runs <code>npm ci</code> and
<code>npm run build</code> in <code>console/</code>), or set <code>TUNEPLANE_CONSOLE_DIR</code>
to a directory holding a built console, then reload this page.</p></main></body></html>
"""


def console_dir() -> Path:
    """Where the built console lives: ``TUNEPLANE_CONSOLE_DIR`` or the package's console_dist."""
    from entrypoints.settings import Settings
    from entrypoints.settings_loader import load_one

    configured: Path | None = load_one(Settings, "console_dir")
    return configured or DEFAULT_DIST


async def _add_security_headers(response: Response[object]) -> Response[object]:
    response.headers.update(SECURITY_HEADERS)
    return response


def _console_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """The API's problem answer (a 404 for a file the build lacks), with the console's
    headers: every /console/ answer carries them, an error too."""
    response: Response[Any] = EXCEPTION_HANDLERS[HTTPException](request, exc)
    response.headers.update(SECURITY_HEADERS)
    return response


def console_router(dist: Path | None = None) -> Router:
    """The /console/ routes: the built files when there are some, else one page saying how to
    build them (503)."""
    where = dist or console_dir()
    if (where / "index.html").is_file():
        return create_static_files_router(
            path=CONSOLE_PATH,
            directories=[where],
            html_mode=True,
            name="console",
            include_in_schema=False,
            after_request=_add_security_headers,
            # per class, as the app's map names them: the closest class in the error's MRO wins
            exception_handlers={NotFoundException: _console_error, HTTPException: _console_error},
            cache_control=CacheControlHeader(no_cache=True),
        )

    @get(["/", "/{rest:path}"], include_in_schema=False, sync_to_thread=False)
    def not_built() -> Response[str]:
        return Response(
            NOT_BUILT.format(dist=where),
            status_code=503,
            media_type="text/html",
            headers=SECURITY_HEADERS,
        )

    return Router(path=CONSOLE_PATH, route_handlers=[not_built])
