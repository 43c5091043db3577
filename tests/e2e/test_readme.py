"""The README's five-minute walk-through, run as written: its shell blocks are read from
README.md and each command runs through bash, as a newcomer pastes it, against a live API
(`tp serve` with the local backend and the test's container engine; the README's
`bash deploy/dev/up.sh` is tests/e2e/test_up.py's business).

Only what a reader must fill in is filled in: the URL and token of `tp login` (the README's
`tp_...`), and `<job-id>`, `<first-job-id>`, `<second-job-id>` with the ids the block's own
`tp submit` lines printed. `source .venv/bin/activate` is the test's PATH. Every command must
exit 0, and where a comment promises something a reader would check (a job held by the quota,
the cordoned node in `tp job why`, the metric), the output says it. A README edit that breaks
a command fails here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.test_walkthrough import JOB_ID
from tests.fixtures.server import Servers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## A five-minute walk-through"
BIN = str(Path(sys.executable).parent)
PLACEHOLDER = re.compile(r"<(job-id|first-job-id|second-job-id)>")


def walkthrough_blocks(text: str) -> list[list[str]]:
    """The ```sh blocks of the walk-through section, each as its list of shell commands (a
    command that spans lines, an open quote, is joined back; blank lines dropped)."""
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    section = section.split("A real training job through a recipe", 1)[0]  # test_up.py's
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    out = []
    for block in blocks:
        commands, pending = [], ""
        for line in block.splitlines():
            pending = f"{pending}\n{line}" if pending else line
            try:
                shlex.split(pending, comments=True)
            except ValueError:  # an open quote: the command goes on on the next line
                continue
            if pending.strip():
                commands.append(pending)
            pending = ""
        assert not pending, f"a README command never closes its quote: {pending!r}"
        out.append(commands)
    return out


@dataclass
class Shell:
    home: Path
    url: str
    token: str
    cwd: Path
    ids: list[str] = field(default_factory=list)  # the current block's submitted jobs, in order
    outputs: list[tuple[str, str]] = field(default_factory=list)

    def run(self, command: str) -> str:
        if command.startswith("source .venv/bin/activate"):
            return ""  # PATH has the venv's bin already
        filled = command.replace("http://127.0.0.1:8470", self.url).replace("tp_...", self.token)
        filled = PLACEHOLDER.sub(self._job, filled)
        script = f"{filled}\nprintf '\\n@cwd=%s' \"$PWD\""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
        env.update(HOME=str(self.home), PATH=f"{BIN}:{env['PATH']}",
                   TUNEPLANE_CONFIG_DIR=str(self.home / "config"))  # fmt: skip
        done = subprocess.run(
            ["bash", "-c", script], cwd=self.cwd, env=env, capture_output=True, text=True,
            timeout=180,
        )  # fmt: skip
        out, _, cwd = done.stdout.rpartition("\n@cwd=")
        text = out + done.stderr
        assert done.returncode == 0, f"README command failed ({done.returncode}):\n{filled}\n{text}"
        assert "Traceback" not in text, text
        self.cwd = Path(cwd)
        if filled.lstrip().startswith("tp submit") and (found := JOB_ID.search(text)):
            self.ids.append(found.group(0))
        self.outputs.append((command, text))
        return text

    def _job(self, match: re.Match[str]) -> str:
        which = match.group(1)
        assert self.ids, f"{match.group(0)} before any `tp submit` in its block"
        if which == "first-job-id":
            return self.ids[0]
        if which == "second-job-id":
            return self.ids[1]
        return self.ids[-1]

    def said(self, prefix: str) -> str:
        """The output of the block's last command that starts with ``prefix``."""
        return next(text for command, text in reversed(self.outputs) if command.startswith(prefix))


def test_the_readme_walkthrough_runs_as_written(api_server: Servers, tmp_path: Path) -> None:
    blocks = walkthrough_blocks(README.read_text())
    assert len(blocks) == 3, blocks  # the first steps, metrics, queues and quotas
    shell = Shell(tmp_path, api_server.url, api_server.token, tmp_path)
    first, metrics, queues = blocks

    for command in first:
        shell.run(command)
    assert shell.said("tp --version").startswith("tp (TunePlane)")
    assert "custom/custom" in shell.said("tp methods")
    assert len(set(shell.ids)) == 2  # the committed preview, then the long job it stops
    assert "cancelled" in shell.said("tp job stop")

    shell.ids.clear()
    for command in metrics:
        shell.run(command)
    assert "train/loss" in shell.said("tp job metrics <job-id> --raw")

    shell.ids.clear()
    for command in queues:
        if command.startswith("tp job ls"):  # the second job is held by the quota
            wait_for_reason(shell, "quota 1/1")
        shell.run(command)
    assert "quota 1/1" in " ".join(shell.said("tp job ls").split())
    assert "cordoned" in shell.said("tp job why")  # the last one: after the cordon


def wait_for_reason(shell: Shell, words: str) -> None:
    """Wait until the scheduler has given the newest job its reason (a pass after its
    commit): what a reader typing the next line a second later would see."""
    deadline = time.monotonic() + 60
    while words not in " ".join(shell.run("tp job ls").split()):
        assert time.monotonic() < deadline, f"no job said {words!r}"
        time.sleep(0.5)
