"""The `tp` command line (entrypoints/cli/main.py)."""

import sys

# httpx's own command line (httpx._main: click, pygments, rich.progress) is a third of its import
# and `tp` never runs it: marked absent here, before any `tp` module imports httpx, `import httpx`
# leaves it out (httpx.main is then httpx's own "not installed" stand-in). A few hundredths of a
# second of every client command's start (tests/unit/test_cli_lazy.py)
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
