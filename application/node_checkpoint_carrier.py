"""Checkpoints on a node (docs/checkpoints.md): the daemon's side.

Every member of an attempt on this node shares the attempt's checkpoint directory
(``<state>/checkpoints/<job>/<attempt>/work``, its ``TUNEPLANE_CHECKPOINT_DIR``). While any of
them runs, each complete checkpoint found there is kept through the gateway (``upload``): offered
with its manifest, the files the gateway lacks sent, offered again to be recorded. So a node
that is lost later took nothing with it. An exit waits for one last upload before it is
reported, so the next attempt finds the last checkpoint too (unless the gateway does not
answer within ``FINISH_SECONDS``: the exit is then reported without it, and the upload goes on
while the member is held).

Before voting yes to a Prepare that names a checkpoint to resume from (``fetch``), the daemon
fetches every file of it into the attempt's resume directory, checks each file's digest against
the manifest the Prepare carries, and seals it (a repeated Prepare fetches nothing again). A
checkpoint that cannot be fetched whole makes a *busy* no: the launch is aborted and the job
queued again, and the gateway, which found the damage, names the checkpoint before it next time.
"""

from __future__ import annotations

import asyncio
import logging

from domain.artifact_ports import CheckpointCourier, CheckpointStorage
from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import KEEP, Found
from domain.errors import TunePlaneError
from domain.node_messages import CheckpointOffer, PrepareOrder
from domain.node_protocol import MemberRef

log = logging.getLogger("tuneplane.node")

Attempt = tuple[str, int]  # (job id, attempt number)
FINISH_SECONDS = 120.0  # how long an exit's report waits for its last upload


class CheckpointCarrier:
    def __init__(self, storage: CheckpointStorage, courier: CheckpointCourier) -> None:
        self.storage = storage
        self.courier = courier
        self._kept: set[tuple[str, int, str]] = set()  # (job, attempt, name) recorded
        self._locks: dict[Attempt, asyncio.Lock] = {}
        self._uploads: dict[Attempt, asyncio.Task[int]] = {}
        self.finish_seconds = FINISH_SECONDS

    def _lock(self, key: Attempt) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    async def directories(self, order: PrepareOrder) -> tuple[str, str] | None:
        """(checkpoint directory, resume directory) of the order's attempt on this host, made;
        None for an order from a control plane that sends no attempt number."""
        if order.attempt < 1:
            return None
        return await self.storage.prepare(order.job_id, order.attempt)

    # -- resuming -------------------------------------------------------------------------

    async def fetch(self, order: PrepareOrder) -> str | None:
        """Place the checkpoint ``order`` resumes from; None when done (or nothing to do), else
        why it cannot be placed now."""
        resume = order.resume
        if resume is None or order.attempt < 1:
            return None
        job, attempt, name = order.job_id, order.attempt, resume.name
        async with self._lock((job, attempt)):  # members of one attempt share the directory
            await self.storage.prepare(job, attempt)
            if await self.storage.resumed(job, attempt, name) == resume.manifest.digest:
                return None
            await self.storage.clear(job, attempt, name)
            for f in resume.manifest.files:
                why = await self._fetch_file(order.ref, job, attempt, name, f)
                if why is not None:
                    await self.storage.clear(job, attempt, name)
                    return (
                        f"checkpoint {name} of attempt {resume.attempt} cannot be placed: "
                        f"{f.path}: {why}"
                    )
            await self.storage.seal(job, attempt, name, resume.manifest.digest)
        log.info("checkpoint %s of job %s placed for attempt %d", name, job, attempt)
        return None

    async def _fetch_file(
        self, ref: MemberRef, job: str, attempt: int, name: str, f: ArtifactFile
    ) -> str | None:
        try:
            target = await self.storage.resume_path(job, attempt, name, f.path)
            sha256, size = await self.courier.get_file(ref, job, f.sha256, target)
        except TunePlaneError as exc:
            return exc.message
        except OSError as exc:  # this node's disk: full, read-only, …
            return f"it cannot be written on this node: {exc}"
        if (sha256, size) != (f.sha256, f.size):
            return f"arrived as {size} bytes with digest {sha256}, not {f.size} with {f.sha256}"
        return None

    # -- keeping --------------------------------------------------------------------------

    def keep_uploading(self, ref: MemberRef, job: str, attempt: int) -> None:
        """Upload the attempt's new complete checkpoints in the background, unless already."""
        key = (job, attempt)
        running = self._uploads.get(key)
        if attempt >= 1 and (running is None or running.done()):
            self._uploads[key] = asyncio.create_task(self.upload(ref, job, attempt))

    async def upload(self, ref: MemberRef, job: str, attempt: int) -> int:
        """Keep every complete checkpoint of the attempt's directory not kept yet, through
        member ``ref``; returns how many were recorded. Errors are logged: the next call tries
        again."""
        kept = 0
        async with self._lock((job, attempt)):
            try:
                found = await self.storage.complete(job, attempt)
            except (OSError, TunePlaneError) as exc:
                log.warning("checkpoints of job %s cannot be listed: %s", job, exc)
                return 0
            for checkpoint in newest(found):
                if (job, attempt, checkpoint.name) in self._kept:
                    continue
                try:
                    await self._upload_one(ref, job, checkpoint)
                except (OSError, TunePlaneError) as exc:
                    log.warning(
                        "checkpoint %s of job %s not kept yet: %s", checkpoint.name, job, exc
                    )
                    continue
                self._kept.add((job, attempt, checkpoint.name))
                kept += 1
        return kept

    async def _upload_one(self, ref: MemberRef, job: str, found: Found) -> None:
        paths: dict[str, str] = {}
        files = []
        for rel, path in found.files:  # read from under the checkpoint only
            sha256, size = await self.storage.hashed(path, found.root)
            files.append(ArtifactFile(rel, size, sha256))
            paths.setdefault(sha256, path)
        offered = CheckpointOffer(ref, job, found.name, found.step, Manifest.of(files))
        recorded, missing = await self.courier.offer(offered)
        if recorded:
            return
        for sha256 in missing:
            content = self.storage.read(paths[sha256], found.root)
            await self.courier.put_file(ref, job, sha256, content)
        recorded, missing = await self.courier.offer(offered)
        if not recorded:  # changed while it was sent: hashed again at the next call
            raise OSError(f"{len(missing)} of its files changed while they were sent")

    async def finish(self, ref: MemberRef, job: str, attempt: int) -> None:
        """One last upload before the member's exit is reported: waited for at most
        ``finish_seconds`` (a gateway that does not answer must not hold the report back
        forever); past that it goes on in the background while the member is held."""
        if attempt < 1:
            return
        key = (job, attempt)
        running = self._uploads.pop(key, None)
        if running is not None:
            await asyncio.wait({running}, timeout=self.finish_seconds)
        last = asyncio.create_task(self.upload(ref, job, attempt))
        self._uploads[key] = last
        await asyncio.wait({last}, timeout=self.finish_seconds)

    async def discard(self, job: str, attempt: int) -> None:
        """The attempt's directories on this node, once no member of it is held here."""
        running = self._uploads.pop((job, attempt), None)
        if running is not None:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        if attempt >= 1:
            await self.storage.discard(job, attempt)
        self._locks.pop((job, attempt), None)
        self._kept = {k for k in self._kept if k[:2] != (job, attempt)}

    async def close(self) -> None:
        tasks = list(self._uploads.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._uploads.clear()


def newest(found: list[Found]) -> list[Found]:
    """The ``KEEP`` newest, oldest first: an older one would be collected as soon as kept."""
    return sorted(found, key=lambda f: (f.step is None, f.step or 0))[-KEEP:]
