"""An attempt's directory in the Slurm backend's shared directory, what its members leave
there and what can be read from it: which member has which rank (``member-N.id``), each
member's exit status written by its task (``member-N.exit``), and which members the control
plane released (``released-N``; the directory goes with the last)."""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from adapters.slurm.files import write_whole
from domain.backend_ports import LaunchRequest


@dataclass(frozen=True, slots=True)
class Handle:
    job_id: int
    rank: int
    attempt_id: str

    def __str__(self) -> str:
        return f"{self.job_id}:{self.rank}:{self.attempt_id}"

    @staticmethod
    def parse(text: str) -> Handle | None:
        parts = text.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or not parts[2]:
            return None
        if "/" in parts[2] or parts[2].startswith("."):
            return None
        return Handle(int(parts[0]), int(parts[1]), parts[2])


class AttemptDirs:
    """The attempts' directories under ``root`` (the shared directory)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def dir(self, attempt_id: str) -> Path:
        return self.root / attempt_id

    def note_member(self, directory: Path, request: LaunchRequest) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        write_whole(directory / f"member-{request.member_index}.id", request.member_id.encode())

    def members(self, attempt_id: str) -> dict[int, str]:
        directory = self.dir(attempt_id)
        found = {}
        for path in directory.glob("member-*.id") if directory.is_dir() else []:
            rank = path.name.removeprefix("member-").removesuffix(".id")
            if rank.isdigit():
                found[int(rank)] = path.read_text().strip()
        return found

    def released(self, h: Handle) -> bool:
        directory = self.dir(h.attempt_id)
        return not directory.is_dir() or (directory / f"released-{h.rank}").exists()

    def release(self, h: Handle) -> bool:
        """Mark the member released; True when that was the last and the directory is gone."""
        directory = self.dir(h.attempt_id)
        if not directory.is_dir():
            return False
        write_whole(directory / f"released-{h.rank}", b"")
        ranks = self.members(h.attempt_id)
        if all((directory / f"released-{r}").exists() for r in ranks):
            shutil.rmtree(directory, ignore_errors=True)
            return True
        return False

    def others_unfinished(self, h: Handle) -> bool:
        """Another member of the attempt has not written its exit file yet."""
        directory = self.dir(h.attempt_id)
        others = [r for r in self.members(h.attempt_id) if r != h.rank]
        return any(not (directory / f"member-{r}.exit").exists() for r in others)

    def stopped_for(self, h: Handle, code: int) -> str | None:
        """``srun --kill-on-bad-exit`` ends the other tasks with SIGTERM once one exits
        non-zero: a member that died of SIGTERM while another wrote a failing exit status was
        stopped by that failure, as the gang rule reports it on every backend."""
        if code != 128 + 15:
            return None
        for rank in sorted(self.members(h.attempt_id)):
            other = self.exit_file(Handle(h.job_id, rank, h.attempt_id))
            if rank != h.rank and other not in (None, 0, 128 + 15):
                return f"stopped: member {rank} failed"
        return None

    def exit_file(self, h: Handle) -> int | None:
        path = self.dir(h.attempt_id) / f"member-{h.rank}.exit"
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text().strip())
        return None
