"""Keep a child process running: the one supervisor of `tp up`'s children (the gateways and the
local node daemon) and of the node daemon's collector.

``Supervisor.run`` starts the child with ``spawn`` (which builds its command line and environment
afresh at each start, e.g. a join token for a daemon not enrolled yet), waits for it and, when it
exits for whatever reason (a crash, kill -9, an operator's ``kill PID`` to restart it), logs its
exit status and starts it again after a delay: ``Backoff.first``, doubling at each exit up to
``Backoff.ceiling``, and back to ``first`` once the child had run ``Backoff.healthy_after``
seconds. Cancelling ``run`` stops the child: SIGTERM, then SIGKILL after ``grace`` seconds.
Each start writes the child's pid to ``pid_file`` (removed when it is stopped), so an operator
can find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from adapters.child_env import child_environ
from entrypoints.process import PARENT_ENV

log = logging.getLogger("tuneplane.supervise")

_PR_SET_PDEATHSIG = 1


class Process(Protocol):
    """What the supervisor needs of a child (``asyncio.subprocess.Process`` has it)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Backoff:
    first: float = 1.0  # seconds before the first restart, and after a healthy run
    ceiling: float = 60.0  # the delay doubles at each quick exit, up to this
    healthy_after: float = 30.0  # a child that ran this long was healthy: the delay resets

    def after(self, previous: float | None, ran_for: float) -> float:
        """The delay before the next start: ``previous`` is the last delay (None: none yet),
        ``ran_for`` how long the child that just exited had run."""
        if previous is None or ran_for >= self.healthy_after:
            return self.first
        return min(previous * 2, self.ceiling)


def exit_status(code: int) -> str:
    """``-9`` → "was killed by SIGKILL"; ``1`` → "exited with status 1"."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:  # pragma: no cover - not glibc/musl: only the parent check remains
        return None


_LIBC = _libc()  # loaded here, never between fork and exec (dlopen is not fork-safe)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """The child gets SIGKILL when the thread that started it ends (the supervisor killed -9);
    if the parent had already gone before the child asked for that, it ends itself now."""

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl: no signal would come
            os._exit(1)

    return preexec


async def spawn_logged(
    args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
) -> Process:
    """Start ``args`` with stdout and stderr appended to ``log_path`` (0600), no stdin, in a
    session of its own (a Ctrl-C at the terminal reaches the parent, which stops its children
    itself), and SIGKILL when its parent goes (``PR_SET_PDEATHSIG``; and ``TUNEPLANE_PARENT_PID``
    for its own check, ``entrypoints.process.until_signalled``)."""
    child_env = dict(env) if env is not None else child_environ()
    child_env[PARENT_ENV] = str(os.getpid())
    out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return await asyncio.create_subprocess_exec(
            *args,
            stdout=out,
            stderr=out,
            stdin=asyncio.subprocess.DEVNULL,
            env=child_env,
            preexec_fn=_die_with_parent(os.getpid()),
            start_new_session=True,
        )
    finally:
        os.close(out)


class Supervisor:
    def __init__(
        self,
        name: str,
        spawn: Callable[[], Awaitable[Process]],
        *,
        log_path: Path | None = None,
        pid_file: Path | None = None,
        backoff: Backoff = Backoff(),
        grace: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.name = name  # "the telemetry gateway": how log lines name the child
        self.spawn = spawn
        self.log_path = log_path
        self.pid_file = pid_file
        self.backoff = backoff
        self.grace = grace
        self.clock = clock
        self.sleep = sleep
        self.proc: Process | None = None
        self.starts = 0
        self.delays: list[float] = []  # every delay waited before a restart, in order
        self._started_at = 0.0

    async def start(self) -> Process:
        """Start the child once (``run`` then supervises it); an error of ``spawn`` is raised."""
        proc = await self.spawn()
        self.proc, self._started_at = proc, self.clock()
        self.starts += 1
        if self.pid_file is not None:
            with contextlib.suppress(OSError):
                self.pid_file.write_text(f"{proc.pid}\n")
        return proc

    async def run(self) -> None:
        """Keep the child running until cancelled (starting it unless ``start`` did); then stop
        it. A failed start is logged and tried again like an exit."""
        delay: float | None = None
        where = f" (log {self.log_path})" if self.log_path else ""
        try:
            if self.proc is None:
                await self._try_start()
            while True:
                if self.proc is not None:
                    code = await self.proc.wait()
                    ran_for = self.clock() - self._started_at
                    what = f"{self.name} (pid {self.proc.pid}) {exit_status(code)}"
                    what += f" after {ran_for:.0f} s{where}"
                else:
                    ran_for, what = 0.0, f"{self.name} could not be started"
                delay = self.backoff.after(delay, ran_for)
                self.delays.append(delay)
                log.warning("%s; starting it again in %.0f s", what, delay)
                await self.sleep(delay)
                if (proc := await self._try_start()) is not None:
                    log.info("%s started again (pid %d)", self.name, proc.pid)
        finally:
            await self.stop()

    async def _try_start(self) -> Process | None:
        try:
            return await self.start()
        except Exception:
            log.exception("starting %s failed", self.name)
            self.proc = None
            return None

    async def stop(self) -> None:
        """Stop the child: SIGTERM, then SIGKILL after ``grace`` seconds."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), self.grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)
