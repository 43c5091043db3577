"""What a member sees on a node, whichever executor runs it: its environment and the host
directories mounted into its view (the site's shared directory, its metrics, outputs and
checkpoint directories). A container gets them as binds; a host process as binds in a mount
namespace of its own (``adapters/node/processes.py``). One place, so both keep one contract."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from adapters.container_engine.spec import checkpoint_mounts
from adapters.node.collector_feed import METRICS_MOUNT
from domain.artifact_ports import CheckpointStorage, OutputStorage
from domain.artifacts import OUTPUT_DIR, OUTPUT_ENV
from domain.node_messages import PrepareOrder

SHARED_MOUNT = "/shared"  # where a node's --shared-dir appears in every member


@dataclass(frozen=True, slots=True)
class Bind:
    source: str  # on the host
    target: str  # in the member's view
    read_only: bool = False
    member_writes: bool = False  # the member's own directory (its user must own it)

    def spec(self) -> str:
        """The Docker Engine's form, ``source:target[:ro]``."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True, slots=True)
class MemberView:
    env: dict[str, str]
    binds: list[Bind] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NodeDirs:
    """The node's directories for members (None: that feature is off on this node)."""

    shared_dir: Path | None = None
    metrics_dir: Callable[[str], Path] | None = None
    outputs: OutputStorage | None = None
    checkpoints: CheckpointStorage | None = None

    async def view(self, order: PrepareOrder) -> MemberView:
        ref = order.ref
        env = dict(order.env)
        env.setdefault("TUNEPLANE_JOB_ID", order.job_id)
        env.setdefault("TUNEPLANE_ATTEMPT_ID", ref.attempt_id)
        env.setdefault("TUNEPLANE_MEMBER_INDEX", str(ref.index))
        binds = []
        if self.shared_dir:
            binds.append(Bind(str(self.shared_dir), SHARED_MOUNT))
            env["TUNEPLANE_SHARED_DIR"] = SHARED_MOUNT
        if self.metrics_dir is not None and order.collector_token:
            binds.append(Bind(str(self.metrics_dir(ref.member_id)), METRICS_MOUNT))
            env["TUNEPLANE_METRICS_DIR"] = METRICS_MOUNT
        if self.outputs is not None:
            host = await self.outputs.prepare(order.job_id, ref.attempt_id, ref.index)
            binds.append(Bind(host, OUTPUT_DIR, member_writes=True))
            env[OUTPUT_ENV] = OUTPUT_DIR
        if self.checkpoints is not None and order.attempt >= 1:
            work, resume_root = await self.checkpoints.prepare(order.job_id, order.attempt)
            resume = order.resume.name if order.resume else None
            for spec in checkpoint_mounts(env, work, resume_root, resume):
                source, target, *ro = spec.split(":")
                binds.append(Bind(source, target, bool(ro), member_writes=not ro))
        return MemberView(env, binds)
