"""The ``system`` source: the collector's own samples of each live member's GPUs, CPU and
memory (docs/telemetry.md, "The system source").

Every ``period`` seconds (``TUNEPLANE_GPU_SAMPLE_SECONDS``, monotonic clock) each live member
that has GPUs or a known ``usage`` gets one JSONL record in the SDK's form appended to a file
the collector owns, ``<directory>/<member>.jsonl`` (0600 in a 0700 directory beside the spool,
out of the member's reach). The member's tail reads that file as its source ``system``, so the
samples travel the same way as the training files' records: spooled with their read position,
shipped, deduplicated by record offset after any crash, drained when the member ends.

Series: ``sys/gpu<i>/utilization`` (percent), ``sys/gpu<i>/memory_used_mb``, ``sys/gpu<i>/
power_w``, ``sys/gpu<i>/temperature_c``, where ``<i>`` is the member's own ordinal of the GPU
(``gpus[i]`` of its member file: its ``cuda:i``), and ``sys/cpu/utilization`` (cores used) and
``sys/memory/used_mb``. A quantity that cannot be read is left out of the record (never a
guess). The step counts the member's samples (0, 1, …, continued after a collector restart
from the file's last record); the wall time is the host's clock at the sample.

Bounds: while more than ``MAX_UNREAD`` bytes of the file are not read yet (the spool is full)
samples are skipped and counted; once the file passed ``ROTATE_BYTES`` and was read to its end
it is replaced by a new one (the source's next generation, ``system#1``, …).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from adapters.telemetry.usage import ProcessTable, UsageReader
from domain.gpus import GpuProbe, GpuReading
from domain.telemetry import UsageSource

log = logging.getLogger("tuneplane.collector")

DEFAULT_PERIOD = 5.0
MAX_UNREAD = 8 * 1024 * 1024
ROTATE_BYTES = 64 * 1024 * 1024
_OPEN = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_GPU_FIELDS = ("utilization", "memory_used_mb", "power_w", "temperature_c")


@dataclass(frozen=True, slots=True)
class Target:
    """A live member to sample, as its member file and its tail say."""

    member: str
    gpus: tuple[int, ...]  # host indices, in the member's order
    usage: UsageSource | None
    read: tuple[int, int, int] | None = None  # its tail of the file: (device, inode, position)


@dataclass
class _State:
    usage: UsageSource | None
    reader: UsageReader | None
    step: int = -1  # the last step written (-1: resume from the file)
    warned: set[str] = field(default_factory=set)
    skipped: int = 0


class SystemSampler:
    def __init__(
        self,
        directory: Path,
        probe: GpuProbe | None,
        period: float = DEFAULT_PERIOD,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        proc: Path = Path("/proc"),
    ) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory = directory
        self.probe = probe
        self.period = period
        self.monotonic = monotonic
        self.wall = wall
        self.proc = proc
        self.samples = 0  # records written
        self._next: float | None = None
        self._members: dict[str, _State] = {}
        self._gpus: frozenset[int] | None = None  # the probe's GPUs (read once)

    def path(self, member: str) -> Path:
        return self.directory / f"{member}.jsonl"

    def due(self) -> bool:
        return self._next is None or self.monotonic() >= self._next

    def sample(self, targets: Sequence[Target]) -> bool:
        """One record per target, if the period has passed since the last sample (blocking:
        the probe and /proc are read; run off the event loop). True when it sampled."""
        now = self.monotonic()
        if self._next is not None and now < self._next:
            return False
        late = self._next is not None and now > self._next + self.period
        self._next = now + self.period if self._next is None or late else self._next + self.period
        table = ProcessTable(self.proc)
        wall = self.wall()
        for t in targets:
            try:
                self._sample(t, now, wall, table)
            except Exception:  # a bug must not stop the collector, nor the other members
                self._warn(self._state(t), "bug", f"member {t.member}: sampling failed", True)
        return True

    def forget(self, member: str, *, remove: bool = False) -> None:
        """Stop sampling ``member``; ``remove``: its file too (drained: everything shipped)."""
        self._members.pop(member, None)
        if remove:
            self.path(member).unlink(missing_ok=True)

    # -- one member ---------------------------------------------------------------------------

    def _state(self, t: Target) -> _State:
        st = self._members.get(t.member)
        if st is None or st.usage != t.usage:
            reader = UsageReader(t.usage) if t.usage is not None else None
            old = st
            st = self._members[t.member] = _State(t.usage, reader)
            if old is not None:
                st.step, st.warned = old.step, old.warned
        return st

    def _sample(self, t: Target, now: float, wall: float, table: ProcessTable) -> None:
        st = self._state(t)
        metrics: dict[str, float] = {}
        if st.reader is not None:
            cores, memory = st.reader.read(now, table)
            _put(metrics, "sys/cpu/utilization", cores)
            _put(metrics, "sys/memory/used_mb", memory)
        for ordinal, reading in self._gpu_readings(t, st):
            for name in _GPU_FIELDS:
                _put(metrics, f"sys/gpu{ordinal}/{name}", getattr(reading, name))
        if metrics:
            self._append(t, st, wall, metrics)

    def _gpu_readings(self, t: Target, st: _State) -> list[tuple[int, GpuReading]]:
        if not t.gpus:
            return []
        if self.probe is None:
            self._warn(st, "no-probe", f"member {t.member}: no GPU can be read on this host")
            return []
        known = self._known_gpus()
        wanted = {host: i for i, host in enumerate(t.gpus) if host in known}
        if len(wanted) < len(t.gpus):
            missing = sorted(set(t.gpus) - known)
            self._warn(st, "missing", f"member {t.member}: the host has no GPU {missing}")
        if not wanted:
            return []
        try:
            readings = self.probe.read(list(wanted))
        except Exception as exc:
            self._warn(st, "read", f"member {t.member}: its GPUs cannot be read: {exc}")
            return []
        return [(wanted[r.index], r) for r in readings if r.index in wanted]

    def _known_gpus(self) -> frozenset[int]:
        if self._gpus is None:
            assert self.probe is not None
            try:
                self._gpus = frozenset(d.index for d in self.probe.inventory().devices)
            except Exception as exc:
                log.warning("the host's GPUs cannot be listed: %s; no GPU is sampled", exc)
                self._gpus = frozenset()
        return self._gpus

    def _append(self, t: Target, st: _State, wall: float, metrics: dict[str, float]) -> None:
        path = self.path(t.member)
        if st.step < 0:
            st.step = _resume(path)
        try:
            size, ident = _size(path)
        except OSError as exc:
            self._warn(st, "stat", f"member {t.member}: {path} cannot be read: {exc.strerror}")
            return
        read = t.read if t.read is not None and t.read[:2] == ident else None
        unread = size - read[2] if read is not None else size
        if unread > MAX_UNREAD:  # the spool is full and the file is the buffer: bounded
            st.skipped += 1
            self._warn(st, "full", f"member {t.member}: samples skipped while the spool is full")
            return
        if size >= ROTATE_BYTES and read is not None and unread <= 0:
            _rotate(path)
        record = {"step": st.step + 1, "wall_time": wall, "metrics": metrics}
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        if self._write(path, line, st, t.member):
            st.step += 1
            self.samples += 1

    def _write(self, path: Path, line: bytes, st: _State, member: str) -> bool:
        try:
            fd = os.open(path, _OPEN, 0o600)
        except OSError as exc:
            self._warn(st, "open", f"member {member}: {path} cannot be written: {exc.strerror}")
            return False
        try:
            before = os.fstat(fd).st_size
            try:
                done = os.write(fd, line)
            except OSError as exc:
                done = -1
                self._warn(st, "write", f"member {member}: a sample is lost: {exc.strerror}")
            if done != len(line):  # a cut line would merge with the next: take it back
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, before)
                return False
            return True
        finally:
            os.close(fd)

    def _warn(self, st: _State, key: str, text: str, trace: bool = False) -> None:
        if key not in st.warned:
            st.warned.add(key)
            log.warning("%s", text, exc_info=trace)


def _put(metrics: dict[str, float], name: str, value: float | None) -> None:
    if value is not None and math.isfinite(value) and value >= 0:
        metrics[name] = round(float(value), 3)


def _size(path: Path) -> tuple[int, tuple[int, int]]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0, (-1, -1)
    return st.st_size, (st.st_dev, st.st_ino)


def _rotate(path: Path) -> None:
    """Replace the file (read to its end) by an empty one: the tail finishes the old one through
    its descriptor and reads the new one as the source's next generation."""
    fresh = path.with_name(path.name + ".new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    os.replace(fresh, path)


def _resume(path: Path) -> int:
    """The step of the file's last complete record (-1: none), to go on counting from. A last
    line cut short (the file's writer killed mid-write) is taken back first, so that the next
    record does not merge with it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return -1
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - 65536)
        tail = os.pread(fd, size - start, start)
        if tail and not tail.endswith(b"\n"):
            cut = tail.rfind(b"\n")
            if cut >= 0:
                os.ftruncate(fd, start + cut + 1)
            else:  # a line longer than we look at: end it (it counts as corrupt)
                os.write(fd, b"\n")
    except OSError:
        return -1
    finally:
        os.close(fd)
    for line in reversed(tail.split(b"\n")[:-1]):
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            step = json.loads(line).get("step")
            if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
                return step
    return -1
