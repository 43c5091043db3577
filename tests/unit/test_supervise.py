"""The one child supervisor (`tp up`'s children, the node daemon's collector) on a fake clock:
restarts after every exit, delays that double on quick exits and reset after a healthy run
(issue 18, defect 6: the collector's delay doubled to 60 s and never came back), each exit logged
with its status, a failed start retried, the child stopped when the supervisor is."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from entrypoints.supervise import Backoff, Supervisor, exit_status

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeProcess:
    """Exits with ``code`` after running ``runs`` seconds of the fake clock; with ``runs`` None
    it runs until terminated."""

    def __init__(self, pid: int, clock: Clock, runs: float | None, code: int) -> None:
        self.pid, self.clock, self.runs, self.code = pid, clock, runs, code
        self.returncode: int | None = None
        self.signals: list[str] = []
        self._ended = asyncio.Event()

    async def wait(self) -> int:
        if self.runs is not None and self.returncode is None:
            self.clock.now += self.runs
            self.returncode = self.code
        if self.returncode is None:
            await self._ended.wait()
        assert self.returncode is not None
        return self.returncode

    def terminate(self) -> None:
        self.signals.append("TERM")
        self.returncode = -15
        self._ended.set()

    def kill(self) -> None:  # pragma: no cover - terminate suffices here
        self.signals.append("KILL")


class Script:
    """``spawn`` for the supervisor: one process per (runs, code); then one that stays up.
    A code of None makes that start fail."""

    def __init__(self, clock: Clock, runs: list[tuple[float, int | None]]) -> None:
        self.clock, self.runs = clock, list(runs)
        self.started: list[FakeProcess] = []
        self.last_started = asyncio.Event()

    async def __call__(self) -> FakeProcess:
        if not self.runs:
            proc = FakeProcess(100 + len(self.started), self.clock, None, 0)
            self.started.append(proc)
            self.last_started.set()
            return proc
        runs, code = self.runs.pop(0)
        if code is None:
            raise OSError("no such file")
        proc = FakeProcess(100 + len(self.started), self.clock, runs, code)
        self.started.append(proc)
        return proc


async def supervise(
    runs: list[tuple[float, int | None]], tmp_path: Path
) -> tuple[Supervisor, Script]:
    clock = Clock()

    async def sleep(seconds: float) -> None:
        clock.now += seconds

    script = Script(clock, runs)
    sup = Supervisor(
        "the telemetry gateway",
        script,
        log_path=tmp_path / "child.log",
        pid_file=tmp_path / "child.pid",
        clock=clock,
        sleep=sleep,
    )
    task = asyncio.create_task(sup.run())
    await asyncio.wait_for(script.last_started.wait(), 5)
    assert (tmp_path / "child.pid").read_text() == f"{script.started[-1].pid}\n"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return sup, script


async def test_quick_exits_double_the_delay_and_a_healthy_run_resets_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tuneplane.supervise")
    healthy = Backoff().healthy_after
    runs: list[tuple[float, int | None]] = [(1, 1)] * 8 + [(healthy, -9), (2, 3), (2, 3)]
    sup, script = await supervise(runs, tmp_path)
    assert sup.delays == [1, 2, 4, 8, 16, 32, 60, 60, 1, 2, 4]
    assert sup.starts == len(script.started) == 12
    assert script.started[-1].signals == ["TERM"]  # stopped with the supervisor
    assert not (tmp_path / "child.pid").exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings[0] == (
        f"the telemetry gateway (pid 100) exited with status 1 after 1 s (log {tmp_path}/"
        "child.log); starting it again in 1 s"
    )
    assert warnings[8].startswith(
        f"the telemetry gateway (pid 108) was killed by SIGKILL after {healthy:.0f} s"
    )
    assert "the telemetry gateway started again (pid 111)" in caplog.messages


async def test_a_failed_start_is_logged_and_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sup, script = await supervise([(5, 0), (0, None), (0, None)], tmp_path)
    assert sup.delays == [1, 2, 4]
    assert len(script.started) == 2
    assert "starting the telemetry gateway failed" in caplog.messages
    assert any("could not be started; starting it again in 2 s" in m for m in caplog.messages)


def test_backoff_and_exit_status() -> None:
    b = Backoff(first=0.5, ceiling=3, healthy_after=10)
    assert [b.after(None, 0), b.after(0.5, 9.9), b.after(2, 1), b.after(3, 1)] == [0.5, 1, 3, 3]
    assert b.after(3, 10) == 0.5
    assert [exit_status(0), exit_status(2), exit_status(-9), exit_status(-15)] == [
        "exited with status 0",
        "exited with status 2",
        "was killed by SIGKILL",
        "was killed by SIGTERM",
    ]
    assert exit_status(-99) == "was killed by signal 99"
