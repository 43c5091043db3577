"""The node daemon's container executor (the ``MemberRuntime`` port) on the Docker Engine API.

Two-phase launch: :meth:`NodeExecutor.prepare` makes a member ready to start (image present,
pulled with progress if need be; container created with its resources, GPUs and labels; source
archive unpacked into ``/workspace``) and never starts it; :meth:`NodeExecutor.start` is the
commit, :meth:`NodeExecutor.remove` the abort. Every step is idempotent by the container's name
``tp-<member id>``, so a restarted daemon re-adopts its containers (:meth:`NodeExecutor.held`
lists only this node's of one installation, by the ``tuneplane.node`` and
``tuneplane.installation`` labels: daemons, and control planes, may share one engine).

Members run with the host's network (gang members on different machines reach member 0's
rendezvous port) and tini as PID 1. The container operations are shared with the local backend
(:class:`~adapters.container_engine.containers.ContainerEngine`) rather than copied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from adapters.container_engine.containers import ContainerEngine
from adapters.container_engine.engine import EngineError, engine_errors
from adapters.container_engine.spec import (
    LABEL_ATTEMPT,
    LABEL_EPOCH,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_MEMBER,
    LABEL_NODE,
    WORKDIR,
    container_name,
    create_body,
    gpus_by_index,
    member_labels,
    never_started,
    source_tar,
)
from adapters.node.cgroup_paths import usage_source_of
from adapters.node.collector_feed import METRICS_MOUNT
from adapters.node.host_ports import port_free
from adapters.node.member_view import NodeDirs
from domain.artifact_ports import CheckpointStorage, OutputStorage
from domain.errors import Conflict, InvalidInput, Unavailable
from domain.node_daemon_ports import FoundContainer, ProgressCallback
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef
from domain.ports import Observation
from domain.requests import require_limits
from domain.telemetry import UsageSource

log = logging.getLogger("tuneplane.node.executor")

Source = bytes | str | os.PathLike[str]
_IMAGE_ID = re.compile(r"^(sha256:)?[0-9a-f]{64}$")
_DONE = ("Download complete", "Pull complete", "Already exists")
LABEL_INSTALLATION = "tuneplane.installation"  # the control plane the member belongs to


def _quiet(stage: str, fraction: float, detail: str) -> None:
    return None


class NodeExecutor:
    """Runs the members of node ``node`` as containers of the engine at ``docker_host``
    (``$DOCKER_HOST`` by default). ``network_mode`` is ``host`` unless a test says otherwise;
    ``gpu_check`` refuses GPU members up front when the engine offers no NVIDIA runtime."""

    def __init__(
        self,
        node: str,
        docker_host: str | None = None,
        *,
        network_mode: str = "host",
        gpu_check: bool = True,
        shared_dir: Path | None = None,
        metrics_dir: Callable[[str], Path] | None = None,
        outputs: OutputStorage | None = None,
        checkpoints: CheckpointStorage | None = None,
    ) -> None:
        self.node = node
        # the site's shared storage, each member's metrics (collected), outputs (artifacts) and
        # its attempt's checkpoint directories (docs/checkpoints.md), mounted into every member
        self.dirs = NodeDirs(shared_dir, metrics_dir, outputs, checkpoints)
        self.engine = ContainerEngine(docker_host, network_mode=network_mode, init=True)
        self.host = self.engine.host
        self.gpu_check = gpu_check
        self._info: dict[str, Any] | None = None

    async def close(self) -> None:
        await self.engine.close()

    async def __aenter__(self) -> NodeExecutor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        """Raise Unavailable unless the engine answers."""
        await self.engine.ping()

    # -- prepare (phase one) ------------------------------------------------------------------

    async def prepare(
        self,
        order: PrepareOrder,
        source: Source | None,
        on_progress: ProgressCallback = _quiet,
    ) -> str:
        """Make the member ready to start; return its container id. Idempotent: a container
        of this member that exists is returned as it is (its source sent again if it never
        started). Raises InvalidInput (a reason to vote no) when it cannot, leaving nothing
        behind; Unavailable when the engine is unreachable; Conflict when the container name
        is taken by another member or node."""
        name = container_name(order.ref.member_id)
        require_limits(order.cpus, order.memory_mb, f"container {name}")  # before any pull
        tar = await asyncio.to_thread(_read_source, source) if source is not None else None
        async with self.engine.member_lock(name):
            info = await self.engine.inspect(name)
            if info is not None:
                self._check_owner(name, info, order.installation)
                if not never_started(info):
                    return str(info["Id"])  # committed already: never touched again
            else:
                if order.gpu_indices:
                    await self._check_gpus(order)
                await self._ensure_image(order.image, on_progress)
            on_progress("creating the container", 1.0, name)
            config = await self._config(order)
            missing = InvalidInput(
                f"image {order.image} vanished from the engine while preparing {name}",
                fix="keep runtime images on the node while jobs use them",
            )
            try:
                cid, fresh = await self.engine.ensure_container(
                    name, order.ref.member_id, config, missing
                )
                if fresh and tar is not None:
                    what = "the Job Capsule" if order.capsule else "the source"
                    on_progress(f"unpacking {what}", 1.0, f"{len(tar)} bytes")
                    where = "/" if order.capsule else WORKDIR  # the capsule: /tuneplane/capsule
                    await self.engine.put_source(cid, tar, path=where)  # removed if it fails
            except asyncio.CancelledError:  # aborted while preparing: leave nothing behind
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.engine.release(name))
                raise
            return cid

    def _check_owner(self, name: str, info: dict[str, Any], installation: str) -> None:
        labels = info.get("Config", {}).get("Labels") or {}
        node, owner = labels.get(LABEL_NODE), labels.get(LABEL_INSTALLATION)
        if node != self.node or owner != installation:
            raise Conflict(
                f"container {name} exists but belongs to node {node!r} of installation "
                f"{owner!r}, not to node {self.node!r} of installation {installation!r}",
                fix=f"remove it (docker rm -f {name}) if no daemon of {node!r} uses it",
            )

    async def _config(self, order: PrepareOrder) -> dict[str, Any]:
        ref = order.ref
        view = await self.dirs.view(order)
        labels = member_labels(order.job_id, ref.attempt_id, ref.member_id, ref.index)
        labels.update(
            {
                LABEL_NODE: self.node,
                LABEL_EPOCH: str(ref.epoch),
                LABEL_INSTALLATION: order.installation,
            }
        )
        return create_body(
            image=order.image,
            command=order.command,
            env=view.env,
            labels=labels,
            cpus=order.cpus,
            memory_mb=order.memory_mb,
            network_mode=self.engine.network_mode,
            init=self.engine.init,
            host_cpus=await self.engine.host_cpus(),
            device_requests=gpus_by_index(order.gpu_indices) if order.gpu_indices else None,
            binds=[b.spec() for b in view.binds],
        )

    async def _engine_info(self) -> dict[str, Any]:
        if self._info is None:
            try:
                self._info = await self.engine.info()
            except EngineError as exc:
                raise Unavailable(f"the engine at {self.host} says: {exc.message}") from None
        return self._info

    async def _check_gpus(self, order: PrepareOrder) -> None:
        """The engine binds GPUs through NVIDIA's container runtime; without it the container
        would be created, and fail only when it is started."""
        if not self.gpu_check:
            return
        runtimes = (await self._engine_info()).get("Runtimes") or {}
        if "nvidia" in runtimes or shutil.which("nvidia-container-runtime-hook"):
            return
        gpus = ", ".join(str(g) for g in order.gpu_indices)
        raise InvalidInput(
            f"GPUs {gpus} cannot be bound on node {self.node}: the container engine at "
            f"{self.host} has no NVIDIA runtime (it offers {', '.join(runtimes) or 'none'})",
            fix="install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure "
            "--runtime=docker` and restart the engine; or run CPU profiles on this node",
        )

    async def _ensure_image(self, image: str, on_progress: ProgressCallback) -> None:
        if await self.engine.image(image) is not None:
            return
        if _IMAGE_ID.match(image):
            raise InvalidInput(
                f"image {image} is not on node {self.node}, and an image id cannot be pulled",
                fix="load the runtime image on this node (docker save | docker load), or push "
                "it to a registry so runtimes are pinned as name@sha256:…",
            )
        await self._pull(image, on_progress)

    async def _pull(self, image: str, on_progress: ProgressCallback) -> None:
        """Pull ``image``, reporting the share of bytes downloaded (−1 while unknown)."""
        progress = PullProgress()
        on_progress("pulling image", 0.0, image)
        last = (0.0, time.monotonic())
        try:
            with engine_errors(self.host):
                async for event in self.engine.api.client().images.pull(image, stream=True):
                    if event.get("error"):
                        raise EngineError(500, str(event["error"]))
                    share, now = progress.update(event), time.monotonic()
                    if abs(share - last[0]) >= 0.05 or now - last[1] >= 2:
                        on_progress("pulling image", share, f"{image}: {event.get('status', '')}")
                        last = (share, now)
        except EngineError as exc:
            raise InvalidInput(
                f"node {self.node} could not pull image {image}: {exc.message}",
                fix="check the image name and that this node can reach its registry "
                "(and is logged in to it)",
            ) from None
        on_progress("pulling image", 1.0, f"{image}: pulled")

    # -- commit, watch, stop, abort -----------------------------------------------------------

    async def start(self, container_id: str) -> None:
        """Start a prepared container (the commit). Idempotent: a container that started
        before (running or exited) is left alone; a missing one is left for :meth:`observe`
        to report ``missing``. A start the engine refuses (e.g. command not found) shows as
        an exit with that reason."""
        info = await self.engine.inspect(container_id)
        if info is None:
            log.warning("container %s is gone: nothing to start", container_id)
        elif never_started(info):
            try:
                await self.engine.start_container(container_id)
            except Conflict as exc:  # removed between the inspect and the start
                log.warning("%s", exc)

    async def observe(self, container_id: str) -> Observation:
        """starting (created), running, exited (code, reason) or missing."""
        return await self.engine.observe(container_id)

    inspect = observe

    async def stop(self, container_id: str, grace_seconds: float) -> None:
        """SIGTERM, SIGKILL after the grace; a never-started container is removed instead."""
        await self.engine.stop(container_id, grace_seconds)

    async def remove(self, container_id: str) -> None:
        """Remove the container (abort or forget), killing it if it runs. Missing is fine."""
        await self.engine.release(container_id)

    async def held(self, installation: str) -> dict[str, str]:
        """member id → container id for every container of this node and ``installation`` in
        the engine (containers made before installation ids, without the label, are not
        listed: they are only followed through their journal rows)."""
        return await self.engine.held(
            f"{LABEL_NODE}={self.node}", f"{LABEL_INSTALLATION}={installation}"
        )

    async def engine_id(self) -> str:
        """The engine's identity: Docker's /info ID (made when the engine was installed), else
        its host name and data root (engines that have none, e.g. Podman)."""
        self._info = None  # read afresh: each scan names the engine it listed
        info = await self._engine_info()
        return str(info.get("ID") or f"{info.get('Name', '')}:{info.get('DockerRootDir', '')}")

    async def found(self, container_id: str) -> FoundContainer | None:
        """What the container's labels and state say, to rebuild its member's journal row."""
        info = await self.engine.inspect(container_id)
        return None if info is None else found_container(info)

    async def final_log(self, container_id: str, limit: int) -> tuple[bytes, bool]:
        """The last ``limit`` bytes of its output (stdout and stderr), and whether the head
        was cut. NotFound if the container is gone."""
        tail = bytearray()
        total = 0
        async for chunk in self.engine.logs(container_id, follow=False):
            total += len(chunk)
            tail.extend(chunk)
            if len(tail) > 2 * limit:
                del tail[: len(tail) - limit]
        if len(tail) > limit:
            del tail[: len(tail) - limit]
        return bytes(tail), total > limit

    def follow_logs(self, container_id: str) -> AsyncIterator[bytes]:
        """Its output from the start, as it comes, until it exits."""
        return self.engine.logs(container_id, follow=True)

    async def usage_source(self, container_id: str) -> UsageSource | None:
        """Its first process's host pid (the engine's ``State.Pid``: tini) and that process's
        cgroup directories (the container's own group); None unless it runs."""
        info = await self.engine.inspect(container_id)
        state = (info or {}).get("State") or {}
        pid = state.get("Pid")
        if not state.get("Running") or not isinstance(pid, int) or pid <= 0:
            return None
        return await asyncio.to_thread(usage_source_of, pid)

    # -- the host -----------------------------------------------------------------------------

    port_free = staticmethod(port_free)
    check_port_free = port_free


class PullProgress:
    """The share of an image pull's bytes downloaded, from the engine's progress events
    (−1 while no layer has said its size)."""

    def __init__(self) -> None:
        self.layers: dict[str, tuple[int, int]] = {}  # layer id → (current, total)

    def update(self, event: dict[str, Any]) -> float:
        layer, status = str(event.get("id", "")), str(event.get("status", ""))
        detail = event.get("progressDetail") or {}
        if status == "Downloading" and detail.get("total"):
            self.layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
        elif status in _DONE and layer in self.layers:
            self.layers[layer] = (self.layers[layer][1], self.layers[layer][1])
        total = sum(t for _, t in self.layers.values())
        return sum(c for c, _ in self.layers.values()) / total if total else -1.0


def found_container(info: dict[str, Any]) -> FoundContainer:
    """A container's inspect data, as a member's: ``ref`` None unless its labels name it."""
    config, host = info.get("Config") or {}, info.get("HostConfig") or {}
    labels = config.get("Labels") or {}
    ref = None
    try:
        if labels.get(LABEL_ATTEMPT) and labels.get(LABEL_MEMBER):
            index, epoch = int(labels[LABEL_INDEX]), int(labels[LABEL_EPOCH])
            if index >= 0 and epoch >= 1:
                ref = MemberRef(labels[LABEL_ATTEMPT], labels[LABEL_MEMBER], index, epoch)
    except (KeyError, ValueError):
        ref = None
    gpus = tuple(
        int(g)
        for request in host.get("DeviceRequests") or []
        for g in request.get("DeviceIDs") or []
        if str(g).isdigit()
    )
    mounts = {m.get("Destination") for m in info.get("Mounts") or []}
    return FoundContainer(
        container_id=str(info.get("Id", "")),
        ref=ref,
        job_id=str(labels.get(LABEL_JOB, "")),
        image=str(config.get("Image", "")),
        gpu_indices=gpus,
        cpus=(host.get("NanoCpus") or 0) / 1e9,
        memory_mb=(host.get("Memory") or 0) // (1024 * 1024),
        started=not never_started(info),
        metrics=METRICS_MOUNT in mounts,
    )


def _read_source(source: Source) -> bytes:
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    return source_tar(data)
