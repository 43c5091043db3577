"""Capacity read from Slurm: partitions become pools of the ``slurm`` backend, Slurm nodes become
nodes of those pools with their state (docs/slurm.md, "Capacity"). Pure.

A TunePlane node belongs to one pool: a Slurm node in several partitions goes to the first one
(in Slurm's order) that has a pool. A pool's shape is the smallest node of its partition (pools
are homogeneous). GPUs come from ``Gres=gpu[:model]:N``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from adapters.slurm.versions import SlurmNode, SlurmPartition
from domain.fleet import Connectivity, Node, Pool, SchedState

_GRES = re.compile(r"(?:^|,)(?P<name>[a-z0-9_]+)(?::(?P<model>[A-Za-z0-9_.-]+))?:(?P<n>\d+)")
_DISCONNECTED = {"down", "not_responding", "fail", "error", "unknown", "powered_down"}
_CORDONED = {"maintenance", "reserved", "future", "powering_down", "reboot_requested"}
# base states in which Slurm itself may start work on a node; any other one (a state this code
# does not know, e.g. ``planned``, ``inval``) is cordoned: never reserved on a guess
_WORKING = {"idle", "mixed", "allocated", "completing"}


def gpus_of(gres: str, name: str = "gpu") -> tuple[int, str | None]:
    """(count, model) of ``gres`` such as ``gpu:h100:8(S:0-1)``; (0, None) without GPUs."""
    for m in _GRES.finditer(gres):
        if m.group("name") == name:
            count = int(m.group("n"))
            return count, (m.group("model") or name).lower() if count else None
    return 0, None


def node_states(node: SlurmNode) -> tuple[SchedState, Connectivity]:
    """The scheduling state and connectivity of a Slurm node."""
    words = {node.state, *node.flags}
    connectivity = Connectivity.DISCONNECTED if words & _DISCONNECTED else Connectivity.CONNECTED
    if words & {"drain", "draining", "drained"}:
        return SchedState.DRAINING, connectivity
    unknown = node.state not in _WORKING and connectivity is Connectivity.CONNECTED
    if words & _CORDONED or unknown:
        return SchedState.CORDONED, connectivity
    return SchedState.SCHEDULABLE, connectivity


def unreported(pool: str, partition: str, partitions: Sequence[SlurmPartition]) -> str:
    """Why ``capacity`` made no pool ``pool`` (of partition ``partition``), with the fix."""
    if any(p.name == partition for p in partitions):
        return (
            f"Slurm partition {partition} has no nodes; "
            f"fix: add nodes to partition {partition} in slurm.conf"
        )
    known = ", ".join(sorted(p.name for p in partitions)) or "none"
    return (
        f"Slurm has no partition {partition} (partitions: {known}); fix: create partition "
        f"{partition} in slurm.conf, or map pool {pool} to an existing one with "
        f"TUNEPLANE_SLURM_PARTITIONS={pool}=PARTITION"
    )


def capacity(
    partitions: Sequence[SlurmPartition],
    nodes: Sequence[SlurmNode],
    pool_of: Mapping[str, str],
    fleet: str = "default",
    gres_name: str = "gpu",
) -> tuple[list[Pool], list[Node]]:
    """The pools and nodes that Slurm's partitions and nodes make.
    ``pool_of`` maps a partition to its pool's name (default: the partition's name)."""
    names = {p.name: pool_of.get(p.name, p.name) for p in partitions}
    members: dict[str, list[SlurmNode]] = {}
    placed: list[Node] = []
    for node in nodes:
        partition = next((p for p in node.partitions if p in names), None)
        if partition is None:
            continue
        members.setdefault(partition, []).append(node)
        sched, connectivity = node_states(node)
        placed.append(Node(node.name, names[partition], sched, connectivity))
    pools = []
    for p in partitions:
        found = members.get(p.name)
        if not found:
            continue
        gpus = [gpus_of(n.gres, gres_name) for n in found]
        count = min(g[0] for g in gpus)
        model = next((g[1] for g in gpus if g[1]), None) if count else None
        pools.append(
            Pool(
                name=names[p.name],
                fleet=fleet,
                backend="slurm",
                gpus_per_node=count,
                cpus_per_node=float(max(1, min(n.cpus for n in found))),
                memory_mb_per_node=max(1, min(n.memory_mb for n in found)),
                gpu_model=model,
                description=f"Slurm partition {p.name} ({p.nodes})",
            )
        )
    return pools, placed
