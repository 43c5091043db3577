"""The `tp` command line (entrypoints/cli/main.py)."""

import sys

# httpx's own command line (httpx._main: click, pygments, rich.progress) is a third of its import
# and `tp` never runs it: marked absent here, before any module a `tp` process loads imports
# httpx (the client commands do not: entrypoints/cli/client.py is on http.client; `tp up` and
# `tp serve` do, for webhooks and slurmrestd), `import httpx` leaves it out (httpx.main is then
# httpx's own "not installed" stand-in).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
