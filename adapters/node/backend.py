"""The node backend as the control plane sees it.

Members of node-backend jobs are launched by the two-phase coordinator
(``application/gang.py``) through the launch ledger in PostgreSQL; the node control gateway
carries the commands to the node daemons. So this backend only pins runtimes: it keeps the
``CoordinatedBackend`` port (``domain/backend_ports.py``), and is registered under it
(``Context.coordinated``), which is how the supervisor knows to hand its jobs to the coordinator.

Pinning: a runtime image with a registry digest (``RepoDigests``) is pinned as
``name@sha256:…``, which every node can pull; an image built only in this engine is pinned by
its image id, which nodes can run only if they hold the very same image (one machine, or the
image loaded on each node). A runtime registered by digest (docs/runtimes.md) is pinned to
exactly that image, or refused. Where nodes run members as host processes
(``TUNEPLANE_NODE_EXECUTOR=process``), no image runs: a runtime is pinned as on Slurm, to its
registered digest or a digest of its image's name, without the image's package list (the
node's environment of that runtime is what runs). See docs/node-backend.md.
"""

from __future__ import annotations

import dataclasses
import hashlib

from adapters.container_engine.containers import ContainerEngine
from domain.capsule import StorageCapabilities
from domain.catalog import RuntimePin, RuntimeSpec
from domain.errors import InvalidInput
from domain.runtimes import pin_of, repository


class NodeBackend:
    name = "node"
    # the node daemon puts the Job Capsule into each container (docs/capsule.md); outputs stay
    # on the nodes (not yet recorded as artifacts)
    storage = StorageCapabilities(capsule=True, shared_mounts=False, shared_outputs=False)

    def __init__(self, images: ContainerEngine | None, *, host_processes: bool = False) -> None:
        self.images = images  # the engine whose images runtimes are pinned from
        self.host_processes = host_processes  # members run as host processes: no image runs

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        """A repository digest (``repo@sha256:…``) that nodes can pull, else the image id.
        Without an image engine, only a runtime registered with its manifest digest can be
        pinned: to ``repo@digest``, as written (the nodes pull it). Host-process nodes run no
        image: the registered digest, else a digest of the image's name, without its package
        list (the node's environment of that runtime runs)."""
        if self.host_processes:
            named = "sha256:" + hashlib.sha256(runtime.image.encode()).hexdigest()
            return dataclasses.replace(pin_of(runtime, runtime.digest or named), packages={})
        if self.images is None:
            if runtime.digest is None:
                raise InvalidInput(
                    f"runtime {runtime.name!r} cannot be pinned: no image engine is configured",
                    fix="set DOCKER_HOST for the control plane, or register the runtime by its"
                    " registry digest (`tp runtime add NAME --image REPO@sha256:…`)",
                    field="intent.runtime",
                )
            return pin_of(runtime, f"{repository(runtime.image)}@{runtime.digest}")
        pin = await self.images.pin(runtime)
        info = await self.images.image(pin.digest) or {}
        digests = [d for d in info.get("RepoDigests") or [] if "@sha256:" in d]
        pinned = [d for d in digests if runtime.digest and d.endswith("@" + runtime.digest)]
        chosen = (pinned or digests or [pin.digest])[0]
        return dataclasses.replace(pin, digest=chosen)
