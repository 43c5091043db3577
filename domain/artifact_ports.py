"""Ports of artifacts: the recorded manifests, and the directories members write into."""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from domain.artifacts import ArtifactRecord, Manifest
from domain.checkpoints import Checkpoint, Found
from domain.node_messages import CheckpointOffer
from domain.node_protocol import MemberRef


class ArtifactRepository(Protocol):
    async def record(self, record: ArtifactRecord) -> bool:
        """Record a member's manifest unless one is recorded already (the first one stays:
        a repeated observation of the same exit records nothing). True when this call did."""
        ...

    async def for_job(self, job_id: str) -> builtins.list[ArtifactRecord]:
        """The job's manifests, by attempt number, then member index."""
        ...


class OutputStorage(Protocol):
    """Host directories for members' outputs (backends with shared outputs mount them at
    ``domain.artifacts.OUTPUT_DIR``). Reading and hashing files may take a while: callers
    never hold a transaction open around these calls."""

    async def prepare(self, job_id: str, attempt_id: str, member_index: int) -> str:
        """The member's output directory on the host, made if missing."""
        ...

    async def scan(self, job_id: str, attempt_id: str, member_index: int) -> Manifest | None:
        """The manifest of what the member's directory holds now; None if it has none."""
        ...

    async def open(
        self, job_id: str, attempt_id: str, member_index: int, path: str
    ) -> tuple[int, AsyncGenerator[bytes, None]]:
        """(size, content) of the regular file ``path`` (checked with
        ``domain.artifacts.check_artifact_path``) below the member's directory, opened now
        without following a symbolic link on the way: NotFound when it is gone, Conflict when
        something on the way is a link or it is not a regular file. The content is read as it
        is iterated; closing the iterator closes the file."""
        ...


class CheckpointRepository(Protocol):
    async def record(self, checkpoint: Checkpoint) -> bool:
        """Record a complete checkpoint unless one of that job, attempt and name is (the first
        stays). True when this call recorded it."""
        ...

    async def for_job(self, job_id: str) -> builtins.list[Checkpoint]:
        """The job's recorded checkpoints, by attempt, then name."""
        ...

    async def drop(self, job_id: str, attempt: int, name: str) -> None:
        """Forget one (its files' blobs are then collected unless something else names them)."""
        ...


class CheckpointStorage(Protocol):
    """Host directories for checkpoints of backends whose members mount this host's
    directories (the local backend): ``<job>/<attempt>/work`` is the members'
    TUNEPLANE_CHECKPOINT_DIR, ``<job>/<attempt>/resume/<name>`` the checkpoint it resumes
    from. Reading and hashing files may take a while: never inside a transaction."""

    async def prepare(self, job_id: str, attempt: int) -> tuple[str, str]:
        """(the attempt's checkpoint directory, its resume directory), made if missing."""
        ...

    async def complete(self, job_id: str, attempt: int) -> builtins.list[Found]:
        """The complete checkpoints the attempt's directory holds (``COMPLETE`` in them, a
        plain name, regular files only), by name; [] when there is no such directory."""
        ...

    async def jobs(self) -> builtins.list[str]:
        """The jobs that have a directory here."""
        ...

    async def attempts(self, job_id: str) -> builtins.list[int]:
        """The attempts of the job that still have a directory here."""
        ...

    async def discard(self, job_id: str, attempt: int) -> None:
        """Remove the attempt's directories (once its checkpoints are in the blob store)."""
        ...

    async def resumed(self, job_id: str, attempt: int, name: str) -> str | None:
        """The manifest digest of the checkpoint ``name`` placed complete in the attempt's
        resume directory, or None when it is not (absent, or cut short)."""
        ...

    async def clear(self, job_id: str, attempt: int, name: str) -> None:
        """Remove whatever of ``name`` is in the attempt's resume directory."""
        ...

    async def resume_path(self, job_id: str, attempt: int, name: str, path: str) -> str:
        """Where the file ``path`` of checkpoint ``name`` goes in the attempt's resume directory
        (its directories made; InvalidInput for a path that would leave the checkpoint)."""
        ...

    async def hashed(self, path: str, beneath: str) -> tuple[str, int]:
        """(sha256 hex, size) of a file ``complete`` listed, read now from under its
        checkpoint's directory ``beneath`` (``Found.root``); InvalidInput for a link, or a file
        not under it once opened (a directory swapped for a link after the listing)."""
        ...

    def read(self, path: str, beneath: str) -> AsyncIterator[bytes]:
        """The content of a file ``complete`` listed, read as ``hashed`` reads it."""
        ...

    async def seal(self, job_id: str, attempt: int, name: str, digest: str) -> None:
        """Say checkpoint ``name`` is placed whole (``resumed`` then answers ``digest``)."""
        ...


class CheckpointCourier(Protocol):
    """A node daemon's way to the gateway's checkpoint calls (docs/checkpoints.md). Every call
    names a member this node holds; a refusal raises the domain error the gateway gave (a
    member fenced or moved: Forbidden/Unavailable; a damaged checkpoint: InvalidInput), a lost
    connection Unavailable."""

    async def offer(self, offered: CheckpointOffer) -> tuple[bool, builtins.list[str]]:
        """(recorded, the digests of the files the gateway lacks)."""
        ...

    async def put_file(
        self, ref: MemberRef, job_id: str, sha256: str, content: AsyncIterator[bytes]
    ) -> None:
        """Send a file's ``content``, which should have digest ``sha256``."""
        ...

    async def get_file(
        self, ref: MemberRef, job_id: str, sha256: str, path: str
    ) -> tuple[str, int]:
        """Write the file with digest ``sha256`` to the new file ``path``; (sha256 hex, size)
        of what was written, for the caller to check."""
        ...


class OutputCourier(Protocol):
    """A node daemon's way to send the gateway an output file it asked for (``FetchOutput``,
    docs/capsule.md#on-the-node-backend). A refusal raises the gateway's domain error (the
    request answered or lapsed: Forbidden; content not the one recorded: InvalidInput), a lost
    connection Unavailable."""

    async def put_output(
        self, request_id: str, content: AsyncIterator[bytes] | None, error: str = ""
    ) -> None:
        """Send the file's ``content``, or (``content`` None) ``error``: why it cannot."""
        ...


class CheckpointsInPlace(Protocol):
    """Checkpoint directories a backend's members write where the next attempt reads them, and
    this control plane reads too (Slurm: ``<shared dir>/checkpoints/<job>/<attempt>/``): a
    checkpoint is kept where it was written, never copied (docs/checkpoints.md). Reading and
    hashing files may take a while: never inside a transaction. Unavailable when the
    directory cannot be read at all."""

    async def prepare(self, job_id: str, attempt: int) -> str:
        """The attempt's checkpoint directory (its members' TUNEPLANE_CHECKPOINT_DIR), made if
        missing."""
        ...

    async def complete(self, job_id: str, attempt: int) -> builtins.list[Found]:
        """The complete checkpoints the attempt's directory holds (as
        ``CheckpointStorage.complete``); [] when there is no such directory."""
        ...

    async def manifest(self, found: Found) -> Manifest | str:
        """The manifest of a found checkpoint's files (each read without following a link),
        or why it cannot be made (a file gone or unreadable)."""
        ...

    def path(self, job_id: str, attempt: int, name: str) -> str:
        """The directory of checkpoint ``name`` of the attempt."""
        ...

    async def verify(self, checkpoint: Checkpoint) -> str | None:
        """None when the checkpoint's directory holds exactly the files of its manifest (sizes
        and sha256), else what is wrong: a file changed, missing, added, a link."""
        ...

    async def seal(self, job_id: str, attempt: int, name: str) -> None:
        """Make the checkpoint read-only (another attempt resumes from it)."""
        ...

    async def prune(self, job_id: str, attempt: int, keep: builtins.set[str]) -> None:
        """Remove everything of the attempt's directory but the checkpoints named in ``keep``;
        the directory itself (and the job's, once empty) when it keeps none."""
        ...

    async def jobs(self) -> builtins.list[str]:
        """The jobs that have a directory here."""
        ...

    async def attempts(self, job_id: str) -> builtins.list[int]:
        """The attempts of the job that have a directory here."""
        ...
