"""Checkpoints that carry across attempts (issue 22 item 3): the workload's contract and the
pure rules over recorded checkpoints (docs/checkpoints.md: where each backend keeps them).

The contract: every member gets ``TUNEPLANE_CHECKPOINT_DIR`` (a directory it may write), its
attempt's number ``TUNEPLANE_ATTEMPT``, and ``TUNEPLANE_RESUME_FROM``: the directory of the
latest complete checkpoint that verifies, or empty on a first attempt (or when none does). A
checkpoint is one directory directly under ``TUNEPLANE_CHECKPOINT_DIR``; it is **complete**
once the workload wrote the file ``COMPLETE`` into it, last (``report.checkpoint(path, step)``
in the SDK does so, after syncing every file); the marker may hold the step as a whole number.
A complete checkpoint is recorded with a manifest (path, size and sha256 of every file, as for
artifacts) and kept where the next attempt can read it; one whose files no longer match its
manifest is skipped for the one before it. The last ``KEEP`` per job are kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain.artifacts import Manifest
from domain.errors import InvalidInput

CHECKPOINT_MOUNT = "/tuneplane/checkpoints"  # in a member's container (local backend)
RESUME_MOUNT = "/tuneplane/resume"  # read-only: the checkpoint it resumes from, under its name
CHECKPOINT_ENV = "TUNEPLANE_CHECKPOINT_DIR"
RESUME_ENV = "TUNEPLANE_RESUME_FROM"
ATTEMPT_ENV = "TUNEPLANE_ATTEMPT"
COMPLETE = "COMPLETE"  # the marker a workload writes last into a finished checkpoint
KEEP = 2  # complete checkpoints kept per job
MAX_FILES = 10_000  # files of one checkpoint (as a member's reported outputs)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]{0,127}$")
_STEP = re.compile(r"^\s*(\d{1,18})\s*$")


def check_name(name: str) -> str:
    """A checkpoint's name: its directory under the checkpoint directory, one path segment."""
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"checkpoint name {name!r} is not one plain path segment",
            fix="name checkpoint directories with letters, digits and . _ + = @ - "
            "(at most 128), e.g. checkpoint-1200",
            field="checkpoint",
        )
    return name


def marker_step(text: str) -> int | None:
    """The step a ``COMPLETE`` marker names: a whole number, or None when it names none (an
    empty marker still completes its checkpoint)."""
    found = _STEP.fullmatch(text)
    return int(found.group(1)) if found else None


def step_from_name(name: str) -> int | None:
    """The step in a name such as ``checkpoint-1200`` (TRL's and most trainers' naming)."""
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits and len(digits[-1]) <= 18 else None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    job_id: str
    attempt: int  # the attempt that wrote it
    name: str
    step: int | None
    manifest: Manifest
    recorded_at: datetime
    # where its files are when they are not in the blob store: the checkpoint's directory, kept
    # in place where the next attempt reads it (Slurm's shared directory); "" the blob store,
    # by content (its manifest's blobs are then referred to, kept from blob collection)
    kept_in: str = ""

    @property
    def digest(self) -> str:
        return self.manifest.digest


def skipped(checkpoint: Checkpoint, why: str) -> str:
    """A checkpoint that did not verify, in words: "checkpoint-300 of attempt 1 skipped: …"."""
    named = checkpoint.name  # "checkpoint-300", or "checkpoint final"
    named = named if named.startswith("checkpoint") else f"checkpoint {named}"
    return f"{named} of attempt {checkpoint.attempt} skipped: {why}"


def newest_first(found: Sequence[Checkpoint]) -> list[Checkpoint]:
    """Newest first: by attempt (a later attempt went on from what the earlier ones left, or
    started again when none verified: either way it is the latest truth), then step (one
    without a step first among its attempt's: written last), then the time it was recorded."""
    return sorted(
        found,
        key=lambda c: (c.attempt, c.step is None, c.step or 0, c.recorded_at),
        reverse=True,
    )


def kept(
    found: Sequence[Checkpoint], keep: int = KEEP
) -> tuple[list[Checkpoint], list[Checkpoint]]:
    """(the ``keep`` newest, the rest to collect)."""
    if keep < 1:
        raise ValueError("keep at least one checkpoint")
    ordered = newest_first(found)
    return ordered[:keep], ordered[keep:]


def outranked(
    recorded: Sequence[Checkpoint], attempt: int, step: int | None, keep: int = KEEP
) -> bool:
    """Whether a checkpoint of ``attempt`` at ``step``, recorded now, would be collected at once
    (``keep`` recorded ones are newer, by ``newest_first``'s order): then it is not worth
    hashing. Recorded now, it is newer than a recorded one of the same attempt and step."""

    def rank(a: int, s: int | None) -> tuple[int, bool, int]:
        return (a, s is None, s or 0)

    return sum(rank(c.attempt, c.step) > rank(attempt, step) for c in recorded) >= keep


@dataclass(frozen=True, slots=True)
class Found:
    """A complete checkpoint in an attempt's checkpoint directory, before it is recorded:
    its files as (path relative to the checkpoint, path to read it from)."""

    name: str
    step: int | None
    files: tuple[tuple[str, str], ...]
    # the checkpoint's directory: its files are read only from under it (a directory swapped
    # for a link after the listing leads nowhere else)
    root: str = ""


@dataclass(frozen=True, slots=True)
class ResumeFrom:
    """The recorded checkpoint a new attempt's members resume from, as a node receives it in
    its Prepare: the node fetches every file of the manifest, checks its digest, and places it
    under ``RESUME_MOUNT/<name>`` before voting yes."""

    name: str
    attempt: int  # the attempt that wrote it
    step: int | None
    manifest: Manifest


def resume_for(found: Sequence[Checkpoint], attempt: int) -> ResumeFrom | None:
    """The checkpoint attempt ``attempt`` resumes from: the newest recorded by an earlier one
    in the blob store (a damaged one is forgotten when found, so the one before it is chosen
    next time; one kept in place names no blobs)."""
    earlier = newest_first([c for c in found if c.attempt < attempt and not c.kept_in])
    if not earlier:
        return None
    c = earlier[0]
    return ResumeFrom(c.name, c.attempt, c.step, c.manifest)


@dataclass(frozen=True, slots=True)
class Resume:
    """What an attempt started from, recorded on it when its members launched: the checkpoint
    it resumed from (``name`` None: from the beginning), which attempt wrote it and at which
    step, and the newer ones skipped because they did not verify (each "checkpoint … of attempt
    … skipped: why")."""

    name: str | None = None
    attempt: int | None = None  # the attempt that wrote it
    step: int | None = None
    skipped: tuple[str, ...] = ()

    def words(self, number: int) -> list[str]:
        """For `tp job why`: "attempt 2 resumed from checkpoint-200 (step 200, written by
        attempt 1)", then the skipped ones."""
        if self.name is not None:
            origin = [f"step {self.step}"] if self.step is not None else []
            origin += [f"written by attempt {self.attempt}"] if self.attempt is not None else []
            said = f"attempt {number} resumed from {self.name}"
            said += f" ({', '.join(origin)})" if origin else ""
        elif self.skipped:
            said = f"attempt {number} started from the beginning: no checkpoint verified"
        else:
            said = f"attempt {number} started from the beginning: no checkpoint was recorded"
        return [said, *self.skipped]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "attempt": self.attempt,
            "step": self.step,
            "skipped": list(self.skipped),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Resume:
        skipped = tuple(raw.get("skipped") or ())
        return cls(raw.get("name"), raw.get("attempt"), raw.get("step"), skipped)
