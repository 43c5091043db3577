"""Tailing one member's metrics directory into the spool.

Every file below the directory that a parser claims (``parsers.parser_for``) is a source named
``<relative path>#<generation>``. Each poll reads what was appended since the last one, in
chunks of at most ``CHUNK`` bytes, and spools the records with the new position in one
transaction. An open file descriptor is kept per source, so a file renamed away or deleted
(log rotation) is still read to its end through it:

* the path now names another file (another inode): the old one is finished from its
  descriptor, then the new one starts at offset 0 as the next generation;
* the file shrank below the read position (truncated in place): the next generation starts at
  offset 0; bytes written before the truncation and never read are counted as dropped;
* a source vanished and no descriptor reaches it (the collector restarted in between): the
  bytes it was last seen to have beyond the read position are counted as dropped.

After a restart parsers start afresh at the spooled position (a TensorBoard tag's plugin, named
only by its first value, is then unknown: rank-0 numeric tensors are still taken as scalars).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from adapters.telemetry.parsers import parser_for
from adapters.telemetry.spool import SourceState, Spool
from domain.telemetry import SourceParser

log = logging.getLogger("tuneplane.collector")

CHUNK = 1024 * 1024
MAX_READ = 512 * CHUNK  # the longest record read whole (TFRecord allows 256 MiB)


@dataclass
class _Open:
    fd: int
    inode: tuple[int, int]
    parser: SourceParser


class MemberTail:
    def __init__(self, member: str, metrics_dir: Path, spool: Spool) -> None:
        self.member = member
        self.root = metrics_dir
        self.spool = spool
        self._open: dict[str, _Open] = {}

    def close(self) -> None:
        for o in self._open.values():
            with contextlib.suppress(OSError):
                os.close(o.fd)
        self._open.clear()

    def poll(self, *, final: bool = False, budget: int = 16 * CHUNK) -> int:
        """Read what is new in every source (up to ``budget`` bytes); with ``final`` read every
        source to its end and take a cut-short last record as corrupt. Returns bytes read."""
        states = self.spool.sources(self.member)
        seen = set()
        read = 0
        for path in self._files():
            rel = str(path.relative_to(self.root))
            seen.add(rel)
            if self.spool.full or read >= budget:
                break
            read += self._poll_file(path, rel, states.get(rel), final, budget - read)
        for rel, state in states.items():
            if rel not in seen:
                read += self._vanished(rel, state, final)
        return read

    def _files(self) -> list[Path]:
        try:
            found = [p for p in self.root.rglob("*") if p.is_file() and parser_for(p)]
        except OSError:
            return []
        return sorted(found)

    def _poll_file(
        self, path: Path, rel: str, state: SourceState | None, final: bool, budget: int
    ) -> int:
        try:
            st = os.stat(path)
        except OSError:
            return 0
        inode = (st.st_dev, st.st_ino)
        parser = parser_for(path)
        assert parser is not None
        if state is None:
            state = SourceState(rel, parser.kind, 0, *inode, 0, st.st_size)
            self.spool.put_source(self.member, state)
        elif (state.device, state.inode) != inode:  # replaced: finish the old file, then next
            read = self._finish_old(rel, state)
            state = SourceState(rel, parser.kind, state.generation + 1, *inode, 0, st.st_size)
            self.spool.put_source(self.member, state)
            return read
        elif st.st_size < state.position:  # truncated in place
            self._drop(state.size_seen - state.position)
            self._forget_open(rel)
            state = SourceState(rel, parser.kind, state.generation + 1, *inode, 0, st.st_size)
            self.spool.put_source(self.member, state)
        opened = self._opened(rel, path, inode)
        if opened is None:
            return 0
        state.size_seen = st.st_size
        return self._read(opened, state, final, budget)

    def _opened(self, rel: str, path: Path, inode: tuple[int, int]) -> _Open | None:
        o = self._open.get(rel)
        if o is not None and o.inode == inode:
            return o
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != inode:  # replaced between stat and open: next poll
            os.close(fd)
            return None
        parser = parser_for(path)
        assert parser is not None
        self._forget_open(rel)
        o = self._open[rel] = _Open(fd, inode, parser)
        return o

    def _read(self, o: _Open, state: SourceState, final: bool, budget: int) -> int:
        read = 0
        size = CHUNK
        while read < budget and not self.spool.full:
            try:
                data = os.pread(o.fd, size, state.position)
            except OSError as exc:
                log.warning("cannot read %s of member %s: %s", state.path, self.member, exc)
                break
            at_end = len(data) < size
            parsed = o.parser.feed(data, state.position, final=final and at_end)
            if parsed.consumed == 0:
                if at_end or size >= MAX_READ:
                    break  # nothing complete yet
                size *= 8  # a record longer than the chunk
                continue
            size = CHUNK
            state.position += parsed.consumed
            state.size_seen = max(state.size_seen, state.position)
            self.spool.append(self.member, state, parsed.records, parsed.corrupt)
            read += parsed.consumed
            if at_end:
                break
        return read

    def _finish_old(self, rel: str, state: SourceState) -> int:
        o = self._open.get(rel)
        if o is None or o.inode != (state.device, state.inode):
            self._drop(state.size_seen - state.position)
            return 0
        with contextlib.suppress(OSError):
            state.size_seen = os.fstat(o.fd).st_size
        read = self._read(o, state, True, 1 << 62)
        self._forget_open(rel)
        return read

    def _vanished(self, rel: str, state: SourceState, final: bool) -> int:
        if state.position >= state.size_seen and rel not in self._open:
            return 0
        read = self._finish_old(rel, state)
        state.size_seen = state.position
        self.spool.put_source(self.member, state)
        return read

    def _forget_open(self, rel: str) -> None:
        o = self._open.pop(rel, None)
        if o is not None:
            with contextlib.suppress(OSError):
                os.close(o.fd)

    def _drop(self, n: int) -> None:
        if n > 0:
            self.spool.count(self.member, "dropped_bytes", n)
