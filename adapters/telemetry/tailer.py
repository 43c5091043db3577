"""Tailing one member's metrics directory into the spool (docs/telemetry.md, "Sources").

Every regular file below the directory that a parser claims (``parsers.parser_for``) is a
source named ``<relative path>#<generation>``. Each poll reads what was appended since the last
one, in chunks of ``CHUNK`` bytes (at most ``PER_POLL`` per file), and spools the records with
the file's new read position in one transaction. One parser object per source stays in memory;
after a restart a fresh parser starts at the spooled position (a TensorBoard tag's plugin, named
only with its first value, is then unknown: rank-0 numeric tensors of such tags are still taken
as scalars). A file descriptor is kept per source, so a file renamed away or deleted is still
read to its end through it:

* the path names another file now (another inode): the old file is finished through its
  descriptor (once it stopped growing; then a cut-short last record counts as corrupt) and the
  new one is read from offset 0 as the path's next generation;
* the file shrank below the read position, or the bytes just before the read position changed
  (truncated, or rewritten in place): the next generation starts at offset 0, and the bytes seen
  but never read are counted as dropped;
* the file vanished: finished through its descriptor, or, with none (the collector restarted in
  between), the bytes it was last seen to have beyond the read position count as dropped.

When the spool is full nothing is read (the files are the buffer). Symbolic links, FIFOs and
devices are never opened: the directory is written by the workload, the collector reads it with
more privileges. A file renamed to another name the parsers claim is read again as a new source.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adapters.telemetry.columns import Parsed, Points, SourceParser
from adapters.telemetry.jsonl import JsonlParser
from adapters.telemetry.parsers import parser_for
from adapters.telemetry.spool import SourceState, Spool
from adapters.telemetry.tfrecord import MAX_RECORD as MAX_TFRECORD
from adapters.telemetry.tfrecord import header_ok
from domain.telemetry import MAX_SOURCE, SourceKind, tag_refused

log = logging.getLogger("tuneplane.collector")

CHUNK = 1024 * 1024
PER_POLL = 2 * CHUNK  # per file and poll: one busy file does not hold up the others, and
# what was read ships while the next poll reads on (the collector polls again at once)
LONGEST = {"jsonl": 16 * CHUNK, "tfevents": MAX_TFRECORD + 16}  # a longer JSONL line is corrupt
MARK = 32  # bytes before the read position remembered to notice a rewritten file
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass
class Progress:
    read: int = 0  # bytes parsed by this poll
    behind: bool = False  # something is left to read (the spool is full, a file grows, …)
    lag: int = 0  # bytes in the files beyond what was read, after this poll


@dataclass
class _Source:
    state: SourceState
    parser: SourceParser
    fd: int | None = None
    stalled: int = -1  # file size at which the last read found no complete record
    # the record pending at the read position (the last read found it incomplete): a
    # TFRecord's end as its header says, or how far a JSONL line is known to have no newline;
    # it is not read again before it can be complete (0: not known)
    pending: int = 0
    pending_at: int = -1  # the read position ``pending`` was found at
    retired_size: int = -1  # a retired file's size at the last poll (it stopped growing?)


class MemberTail:
    """``extra``: source name → a JSONL file outside the metrics directory read as that source
    (the collector's own ``system`` samples); its name is one no file of the directory can
    have as a source (a name no parser claims)."""

    def __init__(
        self,
        member: str,
        metrics_dir: Path,
        spool: Spool,
        *,
        chunk: int = CHUNK,
        extra: Mapping[str, Path] | None = None,
    ):
        self.member = member
        self.root = metrics_dir
        self.spool = spool
        self.chunk = chunk
        self.extra = dict(extra or {})
        assert not any(parser_for(Path(name)) for name in self.extra)
        self._kinds: dict[str, SourceKind | None] = {}
        self._good_tags: set[str] = set()
        self._warned: set[str] = set()
        self._given_up: set[str] = set()  # paths not to read again (final and unreadable)
        self._retiring: list[_Source] = []
        self._current: dict[str, _Source] = {}
        spool.settle_retired(member)
        for path, state in spool.sources(member).items():
            parser = self._parser(path)
            if parser is not None:
                self._current[path] = _Source(state, parser)

    def close(self) -> None:
        for src in [*self._current.values(), *self._retiring]:
            _close(src)

    def poll(self, *, final: bool = False) -> Progress:
        """Read what is new in every source; ``final``: the member ended, so read every source
        to its end and take a cut-short last record as corrupt."""
        progress = Progress()
        found = self._scan()
        extra = self._scan_extra()
        if found is None and not extra and not self._retiring:
            return progress  # no metrics directory (yet): nothing vanished
        for src in list(self._retiring):
            self._finish(src, final, progress)
        for rel, st in sorted({**(found or {}), **extra}.items()):
            self._poll_path(rel, st, final, progress)
        for rel in list(self._current):
            # a file of the directory vanished only if the directory could be listed
            seen = extra if rel in self.extra else found
            if seen is not None and rel not in seen:
                self._retire(self._current.pop(rel), final, progress)
        return progress

    def position(self, name: str) -> tuple[int, int, int] | None:
        """(device, inode, read position) of the file the source ``name`` reads now."""
        src = self._current.get(name)
        return None if src is None else (src.state.device, src.state.inode, src.state.position)

    # -- finding files ------------------------------------------------------------------------

    def _scan(self) -> dict[str, os.stat_result] | None:
        if not self.root.is_dir():
            return None
        found: dict[str, os.stat_result] = {}
        for top, _, names in os.walk(self.root):  # symlinked directories are not followed
            for name in names:
                full = os.path.join(top, name)
                rel = os.path.relpath(full, self.root)
                if self._kind(rel) is None or rel in self._given_up or rel in self.extra:
                    continue
                with contextlib.suppress(OSError):
                    st = os.lstat(full)
                    if stat.S_ISREG(st.st_mode):
                        found[rel] = st
        return found

    def _scan_extra(self) -> dict[str, os.stat_result]:
        found = {}
        for name, path in self.extra.items():
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and name not in self._given_up:
                    found[name] = st
        return found

    def _parser(self, rel: str) -> SourceParser | None:
        return JsonlParser() if rel in self.extra else parser_for(Path(rel))

    def _kind(self, rel: str) -> SourceKind | None:
        if rel not in self._kinds:
            parser = parser_for(Path(rel))
            kind = parser.kind if parser is not None else None
            if kind is not None and not _valid_name(rel):  # once: a warning, no traceback
                shown = rel.encode(errors="surrogateescape").decode(errors="replace")[:80]
                self._warn(rel, f"{shown!r}: the path is not valid UTF-8, so it cannot name a "
                           "source; skipped")  # fmt: skip
                kind = None
            elif kind is not None and len(rel) > MAX_SOURCE - 8:
                self._warn(rel, f"{rel[:80]}…: the path is too long for a source name; skipped")
                kind = None
            self._kinds[rel] = kind
        return self._kinds[rel]

    # -- one path -----------------------------------------------------------------------------

    def _poll_path(self, rel: str, st: os.stat_result, final: bool, progress: Progress) -> None:
        src = self._current.get(rel)
        inode = (st.st_dev, st.st_ino)
        if src is not None and (src.state.device, src.state.inode) != inode:  # replaced
            self._retire(self._current.pop(rel), final, progress)
            src = None
        if src is None:
            src = self._current[rel] = self._new(rel, inode, st.st_size)
        if src.fd is None and not self._open(src, rel):
            if final:  # the member ended and this file cannot be read: give it up
                src.state.size_seen = max(src.state.size_seen, st.st_size)
                self.spool.retire(self.member, src.state, _unread(src.state))
                del self._current[rel]
                self._given_up.add(rel)
            else:
                progress.behind |= st.st_size > src.state.position
                progress.lag += max(0, st.st_size - src.state.position)
            return
        assert src.fd is not None
        if st.st_size < src.state.position or not self._mark_holds(src, st.st_size):
            self.spool.retire(self.member, src.state, _unread(src.state))  # truncated/rewritten
            fd, src.fd = src.fd, None
            src = self._current[rel] = self._new(rel, inode, st.st_size)
            src.fd = fd
        self._read(src, st.st_size, final, progress)
        progress.lag += max(0, st.st_size - src.state.position)

    def _new(self, rel: str, inode: tuple[int, int], size: int) -> _Source:
        parser = self._parser(rel)
        assert parser is not None
        state = self.spool.new_source(self.member, rel, parser.kind, *inode, size)
        return _Source(state, parser)

    def _open(self, src: _Source, rel: str) -> bool:
        try:
            fd = os.open(self.extra.get(rel) or self.root / rel, _OPEN)
        except OSError as exc:
            self._warn(rel, f"cannot open {rel}: {exc.strerror}")
            return False
        st = os.fstat(fd)
        inside = rel in self.extra or _inside(fd, self.root)
        if (st.st_dev, st.st_ino) != (src.state.device, src.state.inode) or not inside:
            os.close(fd)  # replaced since it was listed (seen at the next poll), or moved out
            return False
        os.set_blocking(fd, True)
        src.fd = fd
        return True

    def _mark_holds(self, src: _Source, size: int) -> bool:
        s = src.state
        if not s.mark or size <= s.position or src.fd is None:
            return True
        with contextlib.suppress(OSError):
            return os.pread(src.fd, len(s.mark), s.position - len(s.mark)) == s.mark
        return True

    def _retire(self, src: _Source, final: bool, progress: Progress) -> None:
        """The source's path no longer names its file: finish it through its descriptor, or
        count what was never read."""
        if src.fd is None:
            self.spool.retire(self.member, src.state, _unread(src.state))
            return
        with contextlib.suppress(OSError):
            src.state.size_seen = max(src.state.size_seen, os.fstat(src.fd).st_size)
        self.spool.retire(self.member, src.state)  # a restart now counts the rest as dropped
        self._retiring.append(src)
        self._finish(src, final, progress)

    def _finish(self, src: _Source, final: bool, progress: Progress) -> None:
        """Read a retired file on; once it stopped growing, to its very end."""
        assert src.fd is not None
        try:
            size = os.fstat(src.fd).st_size
        except OSError:
            size = src.state.size_seen
        final = final or size == src.retired_size
        src.retired_size = size
        self._read(src, size, final, progress)
        if final and src.state.position >= size and not self.spool.full:
            _close(src)
            self._retiring.remove(src)
            self.spool.retire(self.member, src.state)
        else:
            progress.behind = True

    # -- reading ------------------------------------------------------------------------------

    def _read(self, src: _Source, size: int, final: bool, progress: Progress) -> None:
        s = src.state
        assert src.fd is not None
        grew = size > s.size_seen
        s.size_seen = max(size, s.size_seen, s.position)
        want, read, saved = self.chunk, 0, False
        while read < PER_POLL and size > s.position and (final or not self._waits(src, size)):
            if self.spool.full:
                progress.behind = True
                break
            try:
                data = os.pread(src.fd, want, s.position)
            except OSError as exc:
                self._warn(s.path, f"cannot read {s.path}: {exc.strerror}")
                break
            at_end = len(data) < want
            parsed = self._feed(src, data, final and at_end)
            if parsed.consumed == 0:
                if at_end:
                    src.stalled = size
                    src.pending, src.pending_at = _pending_end(s.kind, data, s.position), s.position
                    break
                if want >= LONGEST[s.kind]:  # a record longer than any we take: skip it
                    parsed = self._feed(src, data, True)
                else:
                    want = min(want * 8, LONGEST[s.kind])
                    continue
            want = self.chunk
            points, bad = self._clean(parsed.points)
            s.mark = (s.mark + data[: parsed.consumed])[-MARK:]
            s.position += parsed.consumed
            s.size_seen = max(s.size_seen, s.position)
            self.spool.append(self.member, s, points, parsed.corrupt + bad)
            read, saved = read + parsed.consumed, True
            if at_end:
                break
        if grew and not saved:
            self.spool.save(self.member, s)  # what was seen counts if the file vanishes
        progress.read += read
        progress.behind |= s.size_seen > s.position

    def _waits(self, src: _Source, size: int) -> bool:
        """Whether the record pending at the read position cannot be complete at ``size``: a
        large record being written is then not read again at every poll (a 250 MiB TFRecord
        growing a byte at a time cost a read of all of it per poll)."""
        s = src.state
        if size == src.stalled:
            return True
        if src.pending_at != s.position or src.pending <= s.position:
            return False
        if s.kind == "tfevents":
            return size < src.pending
        if src.pending - s.position >= LONGEST["jsonl"]:
            return False  # too long already: read, to skip it as corrupt
        try:  # only the bytes new since: does the line end in them?
            new = os.pread(src.fd or -1, min(size - src.pending, self.chunk), src.pending)
        except OSError:
            return False
        if b"\n" in new or not new:
            return False
        src.pending += len(new)
        src.stalled = size if src.pending >= size else -1
        return True

    def _feed(self, src: _Source, data: bytes, final: bool) -> Parsed:
        offset = src.state.position
        try:
            return src.parser.feed(data, offset, final=final)
        except Exception:  # a parser must not raise; if one does, the collector goes on
            log.exception("the %s parser failed on %s", src.state.kind, src.state.name)
        if src.state.kind != "jsonl":
            return Parsed(Points.empty(), 1, 1)  # skip a byte: the TFRecord framing resynchronises
        parsed, parts = Parsed(), []  # line by line: only the line that fails is lost
        lines = data.split(b"\n")
        for i, text in enumerate(lines):
            line = text + b"\n" if i < len(lines) - 1 else text
            if not line or (not line.endswith(b"\n") and not final):
                break
            try:
                one = src.parser.feed(line, offset + parsed.consumed, final=final)
            except Exception:
                one = Parsed(Points.empty(), len(line), 1)
            parts.append(one.points)
            parsed.corrupt += one.corrupt
            parsed.consumed += len(line)
        parsed.points = Points.concat(parts)
        return parsed

    def _clean(self, points: Points) -> tuple[Points, int]:
        """Leave out scalars the gateway would refuse; a record that lost one counts corrupt."""
        if not len(points):
            return points, 0
        good = np.array([self._tag_ok(t) for t in points.tags], dtype=bool)
        keep = good[points.tag] & (points.step >= 0)
        if keep.all():
            return points, 0
        return points.take(keep).compact(), len(np.unique(points.offset[~keep]))

    def _tag_ok(self, tag: str) -> bool:
        if tag in self._good_tags:
            return True
        try:
            tag.encode()
        except UnicodeEncodeError:
            return False
        if tag_refused(tag):  # empty, too long, a control character (NUL: PostgreSQL refuses)
            return False
        if len(self._good_tags) < 100_000:
            self._good_tags.add(tag)
        return True

    def _warn(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("member %s: %s", self.member, text)


def _pending_end(kind: SourceKind, data: bytes, position: int) -> int:
    """Where the incomplete record at ``position`` (``data`` read from there) ends at the
    earliest: a TFRecord's end as its header (its CRC checked) says, the end of ``data`` for a
    JSONL line (it has no newline yet); 0 when not known."""
    if kind == "jsonl":
        return position + len(data)
    if len(data) >= 12 and header_ok(data, 0):
        return position + 16 + int.from_bytes(data[:8], "little")
    return 0


def _valid_name(rel: str) -> bool:
    """Whether ``rel`` can name a source: valid UTF-8 (os.walk hands undecodable bytes over as
    lone surrogates, which neither the spool nor the wire can carry; a file name cannot hold
    NUL)."""
    try:
        rel.encode()
    except UnicodeEncodeError:
        return False
    return True


def _unread(state: SourceState) -> int:
    """Bytes seen in the file beyond its read position, now lost: counted once (the state then
    claims nothing more)."""
    lost = max(0, state.size_seen - state.position)
    state.size_seen = state.position
    return lost


def _inside(fd: int, root: Path) -> bool:
    """Whether the opened file lies below ``root`` (no directory symlink led elsewhere)."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return True  # no /proc: nothing to check against
    top = os.path.realpath(root)
    return where.startswith(top.rstrip("/") + "/")


def _close(src: _Source) -> None:
    if src.fd is not None:
        with contextlib.suppress(OSError):
            os.close(src.fd)
        src.fd = None
