"""Children die with their parent (issue 19 item 7): a child started by ``spawn_logged`` is
killed when its supervising process is killed with SIGKILL (``PR_SET_PDEATHSIG``), and a child
that outlived its parent anyway (re-parented) stops by itself (``until_signalled`` watches
``$TUNEPLANE_PARENT_PID``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from entrypoints import process

pytestmark = pytest.mark.integration

PARENT = """
import asyncio, sys
from pathlib import Path
from entrypoints.supervise import spawn_logged

async def main():
    proc = await spawn_logged(["sleep", "600"], Path(sys.argv[1]))
    print(proc.pid, flush=True)
    await proc.wait()

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_child_dies_when_its_supervisor_is_killed_9(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "child.log")],
        stdout=subprocess.PIPE,
        cwd=root,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while _alive(child):  # the kernel signals it at once; wait on the condition
        assert time.monotonic() < deadline, f"child {child} outlived its parent"
        time.sleep(0.05)


async def test_a_child_whose_parent_is_gone_stops_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback: the pid it was started by is no longer its parent."""
    monkeypatch.setenv(process.PARENT_ENV, str(os.getppid() + 1_000_000))
    monkeypatch.setattr(process, "PARENT_CHECK_SECONDS", 0.01)
    await asyncio.wait_for(process.until_signalled(asyncio.Event().wait()), 30)


async def test_a_child_whose_parent_lives_keeps_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(process.PARENT_ENV, str(os.getppid()))
    monkeypatch.setattr(process, "PARENT_CHECK_SECONDS", 0.01)
    done = asyncio.Event()

    async def work() -> None:
        await asyncio.sleep(0.2)  # several parent checks pass while it works
        done.set()

    await process.until_signalled(work())
    assert done.is_set()
