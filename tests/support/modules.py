"""What a fresh `tp` process has imported: for the tests that keep start-up lean."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(*argv: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh `tp ARGV` process has imported when it exits."""
    code = (
        "import json, sys\n"
        "from entrypoints.cli.main import run\n"
        f"code = run({list(argv)!r})\n"
        "print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
        env=env,
    )  # fmt: skip
    return set(json.loads(done.stdout.strip().splitlines()[-1]))
