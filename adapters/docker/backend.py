"""The local execution backend: one container per member, through the Docker Engine API.

Works against Docker or Podman's Docker-compatible service (``DOCKER_HOST``, a unix socket).
A member's handle is its container id; its container is named ``tp-<member id>``, which makes
``launch`` idempotent across retries and restarts. The container operations are the shared
:class:`~adapters.container_engine.containers.ContainerEngine` (the node daemon's executor uses
them too); this adds what makes it an ``ExecutionBackend``. See docs/local-backend.md.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from adapters.container_engine.containers import ContainerEngine
from adapters.container_engine.spec import container_config, container_name, source_tar
from adapters.docker import ends
from domain.backend_ports import LaunchRequest, Observation
from domain.capsule import StorageCapabilities
from domain.errors import InvalidInput


class DockerBackend(ContainerEngine):
    """``ExecutionBackend`` named ``local``; ``gpus``: whether members may ask for GPUs."""

    name = "local"
    # one host: the Job Capsule is put into each container; host directories can be mounted
    storage = StorageCapabilities(capsule=True, shared_mounts=True, shared_outputs=True)

    def __init__(
        self,
        docker_host: str | None = None,
        *,
        network_mode: str = "none",
        init: bool = True,
        gpus: bool = False,
    ) -> None:
        super().__init__(docker_host, network_mode=network_mode, init=init)
        self.gpus = gpus
        # container id → when the engine last said it started (adapters/docker/ends.py)
        self._started: dict[str, datetime] = {}

    async def inspect(self, ref: str) -> dict[str, Any] | None:
        info = await super().inspect(ref)
        at = ends.started_at(info) if info is not None else None
        if info is not None and at is not None:
            key = str(info.get("Id") or ref)  # handles are container ids
            self._started.pop(key, None)  # the last seen last: the oldest go first
            self._started[key] = at
            while len(self._started) > 4096:
                del self._started[next(iter(self._started))]
        return info

    async def observe(self, handle: str) -> Observation:
        """As the engine reports it; a container it no longer knows although it was seen
        started before the engine (re)started was lost with the engine: ``node-lost``."""
        obs = await super().observe(handle)
        if obs.status != "missing":
            return obs
        engine = await asyncio.to_thread(ends.engine_started_at, self.host)
        return ends.gone(handle, engine, self._started.get(handle))

    async def release(self, handle: str) -> None:
        self._started.pop(handle, None)
        await super().release(handle)

    async def launch(self, request: LaunchRequest) -> str:
        name = container_name(request.member_id)
        async with self.member_lock(name):  # one launcher per member in this process
            return await self._launch(name, request)

    async def _launch(self, name: str, request: LaunchRequest) -> str:
        pin = request.spec.runtime
        if request.spec.resources.gpus > 0 and not self.gpus:
            raise InvalidInput(
                f"profile {request.spec.profile} asks for GPUs; this local engine offers none",
                fix="choose a CPU profile, or configure the local backend with gpus enabled",
                field="intent.profile",
            )
        tar = source_tar(request.source) if request.source is not None else None
        cpus = await self.host_cpus()
        config = container_config(
            request, network_mode=self.network_mode, init=self.init, host_cpus=cpus
        )
        missing = InvalidInput(
            f"runtime image {pin.image} ({pin.digest}) is no longer in the engine",
            fix=f"run `tp runtime build {pin.name}`, then preview and submit again",
            field="spec.runtime",
        )
        cid, fresh = await self.ensure_container(name, request.member_id, config, missing)
        if fresh:  # never started: (re)send the capsule or the source, then start it
            if request.capsule is not None:
                await self.put_source(cid, request.capsule, path="/")
            elif tar is not None:
                await self.put_source(cid, tar)
            await self.start_container(cid)
        return cid
