"""Containers on the Docker Engine API: the operations the local backend
(``adapters/docker/backend.py``) and the node daemon's executor (``adapters/node/executor.py``)
share. A member's container is named ``tp-<member id>`` (``spec.container_name``), which makes
creating it idempotent across retries and restarts. Works against Docker or Podman's
Docker-compatible service (``DOCKER_HOST``, a unix socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Self

import aiohttp

from adapters.container_engine.api import EngineApi
from adapters.container_engine.engine import EngineError, demux_logs, resolve_host
from adapters.container_engine.spec import (
    LABEL_MEMBER,
    WORKDIR,
    event_window,
    killed,
    killed_by,
    never_started,
    observation,
    oom_unsettled,
    workspace_tar,
)
from domain.backend_ports import Observation
from domain.catalog import RuntimePin, RuntimeSpec
from domain.errors import Conflict, InvalidInput, NotFound, TunePlaneError, Unavailable
from domain.progress import ended_outside
from domain.runtimes import digest_mismatch, pin_of

_TAR = {"Content-Type": "application/x-tar"}
_FOREVER = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=30)


class ContainerEngine:
    """One engine, and the containers of members in it.

    ``network_mode`` defaults to ``none``: the private engine runs with ``--bridge=none``, and a
    member needs no network to write its metrics (the collector tails files). ``host`` gives a
    member the host's network. ``init`` runs tini as PID 1 so SIGTERM reaches the command.
    """

    def __init__(
        self, docker_host: str | None = None, *, network_mode: str = "none", init: bool = True
    ) -> None:
        self.host = resolve_host(docker_host)
        self.network_mode = network_mode
        self.init = init
        self.api = EngineApi(self.host)
        self._host_cpus: int | None = None
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._stopped: dict[str, None] = {}  # handles this process stopped, oldest first

    # -- plumbing -------------------------------------------------------------------------------

    async def inspect(self, ref: str) -> dict[str, Any] | None:
        """The engine's inspect data of a container (by id or name), None if it has none."""
        try:
            info: dict[str, Any] = await self.api.json(f"containers/{ref}/json")
        except EngineError as exc:
            if exc.status == 404:
                return None
            raise Unavailable(f"cannot inspect container {ref}: {exc.message}") from None
        return info

    async def held(self, *labels: str) -> dict[str, str]:
        """member id → container id for every TunePlane container in the engine (that also
        carries every one of ``labels``, each ``key=value``)."""
        filters = json.dumps({"label": [LABEL_MEMBER, *labels]})
        query = {"all": "true", "filters": filters}
        try:
            listed: list[dict[str, Any]] = await self.api.json("containers/json", params=query)
        except EngineError as exc:
            raise Unavailable(f"cannot list containers: {exc.message}") from None
        return {c["Labels"][LABEL_MEMBER]: c["Id"] for c in listed if c.get("Labels")}

    async def ping(self) -> None:
        """Raise Unavailable unless the engine answers ``/_ping``."""
        try:
            await self.api.send("_ping", "GET", versioned=False)
        except EngineError as exc:
            raise Unavailable(f"the engine at {self.host} is unhealthy: {exc.message}") from None

    async def close(self) -> None:
        await self.api.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- images ---------------------------------------------------------------------------------

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        """The image's id in this engine. A runtime pinned by digest (docs/runtimes.md) gets
        exactly that image: found by its id, or by its reference when one of its repository
        digests is the pinned one; any other image is refused, naming both digests."""
        info = await self.image(runtime.digest) if runtime.digest else None
        info = info or await self.image(runtime.image)
        if info is None:
            fix = (
                f"build it with `tp runtime build {runtime.name}`"
                if runtime.builtin
                else f"pull or load it into the engine (docker pull {runtime.image})"
            )
            raise InvalidInput(
                f"runtime {runtime.name!r}: image {runtime.image} is not in the local engine",
                fix=fix,
                field="intent.runtime",
            )
        image_id = str(info["Id"])
        if runtime.digest is not None:
            repo = [d.split("@", 1)[1] for d in info.get("RepoDigests") or [] if "@" in d]
            if runtime.digest != image_id and runtime.digest not in repo:
                raise digest_mismatch(runtime, image_id, repo)
        return pin_of(runtime, image_id)

    async def image(self, ref: str) -> dict[str, Any] | None:
        """The engine's inspect data of an image (by id, digest or reference), None if it has
        none."""
        try:
            info: dict[str, Any] = await self.api.json(f"images/{ref}/json")
        except EngineError as exc:
            if exc.status not in (400, 404):  # 400: not a reference the engine can parse
                raise Unavailable(f"cannot inspect image {ref}: {exc.message}") from None
            return None
        return info

    # -- containers ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def member_lock(self, name: str) -> AsyncIterator[None]:
        """Serialise the callers working on one container name in this process."""
        lock, users = self._locks.get(name, (asyncio.Lock(), 0))
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)

    async def ensure_container(
        self, name: str, member_id: str, config: dict[str, Any], missing_image: TunePlaneError
    ) -> tuple[str, bool]:
        """The container ``name`` of ``member_id``, created from ``config`` (not started) unless
        it exists: ``(container id, never started)``. Raises ``missing_image`` when the engine
        lacks the image, Conflict when the name belongs to another member."""
        for attempt in range(2):
            info = await self.inspect(name)
            if info is not None:
                if info.get("Config", {}).get("Labels", {}).get(LABEL_MEMBER) != member_id:
                    raise Conflict(
                        f"a container named {name} exists but does not belong to this member",
                        fix=f"remove it (docker rm -f {name}) and retry",
                    )
                return str(info["Id"]), never_started(info)
            try:
                created = await self.api.json(
                    "containers/create", "POST", params={"name": name}, data=config
                )
                return str(created["Id"]), True
            except EngineError as exc:
                if exc.status == 409 and attempt == 0:  # created meanwhile by another launcher
                    continue
                if exc.status == 404:
                    raise missing_image from None
                if exc.status >= 500 or exc.status == 409:
                    raise Unavailable(
                        f"the engine could not create {name}: {exc.message}"
                    ) from None
                raise InvalidInput(
                    f"the engine refused to create {name}: {exc.message}",
                    fix="check the profile's resources and the runtime",
                ) from None
        raise Unavailable(f"the engine could not create {name}: it was created and removed")

    async def start_container(self, cid: str) -> None:
        """Start a created container. A start the engine refuses (e.g. "executable file not
        found") leaves ``State.Error`` set, which :func:`observation` reports as an exit."""
        try:
            await self.api.send(f"containers/{cid}/start")
        except EngineError as exc:
            if exc.status == 404:
                raise Conflict(f"container {cid} vanished while starting (stopped?)") from None

    async def put_source(self, cid: str, tar: bytes, path: str = WORKDIR) -> None:
        """Unpack an uncompressed tar at ``path`` (the working directory by default, made if the
        image lacks it) in a created container. On failure the container is removed."""
        for attempt in range(2):
            try:
                await self.api.send(
                    f"containers/{cid}/archive", "PUT",
                    params={"path": path}, data=tar, headers=_TAR,
                )  # fmt: skip
                return
            except EngineError as exc:
                if exc.status == 404 and attempt == 0:  # no /workspace in the image: create it
                    with contextlib.suppress(EngineError):
                        await self.api.send(
                            f"containers/{cid}/archive", "PUT",
                            params={"path": "/"}, data=workspace_tar(), headers=_TAR,
                        )  # fmt: skip
                    continue
                await self.release(cid)  # leave nothing half-made behind
                if exc.status == 404:
                    raise Conflict(f"container {cid} vanished while receiving its source") from None
                raise InvalidInput(
                    f"the engine could not unpack the source archive: {exc.message}",
                    fix="check the archive (tar tzf) and submit again",
                    field="intent.source",
                ) from None

    async def info(self) -> dict[str, Any]:
        """The engine's ``info`` (CPUs, runtimes, ...). Raises EngineError if it refuses."""
        info: dict[str, Any] = await self.api.json("info")
        return info

    async def host_cpus(self) -> int | None:
        """The engine's CPU count (cached), or None if it cannot say."""
        if self._host_cpus is None:
            with contextlib.suppress(EngineError):
                self._host_cpus = int((await self.info()).get("NCPU") or 0) or None
        return self._host_cpus

    async def observe(self, handle: str) -> Observation:
        """As the engine reports it; an end by a signal the engine sent (``docker kill``,
        ``docker stop``: its events say so) carries the reason of an end TunePlane did not ask
        for. Not when this process stopped it; after a restart a stop of ours may read as
        outside, and the supervisor then records the stop it asked for instead."""
        info = await self.inspect(handle)
        if info is None:
            return Observation("missing")
        obs = observation(info)
        ours = handle in self._stopped
        if obs.status == "exited" and not ours and oom_unsettled(info, datetime.now(UTC)):
            return Observation("running")  # looked at again: the engine may say OOMKilled
        if obs.status == "exited" and killed(info) and not ours:
            by = await self._killed_by(handle, info)
            if by:
                return Observation("exited", obs.exit_code, ended_outside(by))
        return obs

    async def _killed_by(self, handle: str, info: dict[str, Any]) -> str:
        """``docker stop`` or ``docker kill (SIGKILL)`` from the engine's events between the
        container's start and its end; "" when they do not say (the engine keeps few)."""
        window = event_window(info)
        if window is None:
            return ""
        filters = json.dumps({"type": ["container"], "container": [handle]})
        params = {"since": str(window[0]), "until": str(window[1]), "filters": filters}
        try:
            async with self.api.request("events", params=params) as resp:
                body = await resp.read()
        except (EngineError, Unavailable):
            return ""
        return killed_by(body)

    async def stop(self, handle: str, grace_seconds: float) -> None:
        info = await self.inspect(handle)
        if info is None:
            return
        if never_started(info):  # make sure it never starts: nothing ran, nothing to keep
            await self.release(handle)
            return
        self._stopped[handle] = None  # ours: not an end from outside (the last 4096 kept)
        while len(self._stopped) > 4096:
            del self._stopped[next(iter(self._stopped))]
        try:
            await self.api.send(
                f"containers/{handle}/stop",
                params={"t": max(0, math.ceil(grace_seconds))},
                client_timeout=_FOREVER,
            )
        except EngineError as exc:
            if exc.status not in (304, 404, 409):
                raise Unavailable(f"cannot stop {handle}: {exc.message}") from None

    async def logs(self, handle: str, follow: bool) -> AsyncIterator[bytes]:
        info = await self.inspect(handle)
        if info is None:
            raise NotFound(f"no container {handle} in the engine", fix="it was released")
        tty = bool(info.get("Config", {}).get("Tty"))
        params = {"stdout": True, "stderr": True, "follow": follow}
        try:
            async with self.api.request(
                f"containers/{handle}/logs", params=params, client_timeout=_FOREVER
            ) as resp:
                async for chunk in demux_logs(resp.content, tty):
                    yield chunk
        except EngineError as exc:
            if exc.status == 404:
                raise NotFound(f"container {handle} is gone", fix="it was released") from None
            raise Unavailable(f"cannot read the logs of {handle}: {exc.message}") from None

    async def release(self, handle: str) -> None:
        try:
            await self.api.send(f"containers/{handle}", "DELETE", params={"force": True, "v": True})
        except EngineError as exc:
            if exc.status not in (404, 409):  # 409: removal already in progress
                raise Unavailable(f"cannot remove {handle}: {exc.message}") from None
