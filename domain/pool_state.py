"""The mutable working state of one admission pass: per node, what is free and what earlier
blocked jobs hold; per pool, GPU nodes bucketed by what they can take now (best fit in
O(GPUs per node)) and the request shapes that already failed in this pass.

Only ``domain.admission.decide`` uses it; nothing here outlives a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from domain.fleet import Pool
from domain.requests import RoleSpec

if TYPE_CHECKING:  # admission imports this module
    from domain.admission import NodeView


def mcpu(cpus: float) -> int:
    """CPUs in thousandths, the unit the scheduler counts in (no float drift)."""
    return round(cpus * 1000)


class NodeState:
    __slots__ = ("free", "held_for", "held_gpus", "held_mcpu", "held_mem", "mcpu", "mem", "view")

    def __init__(self, view: NodeView) -> None:
        self.view = view
        self.free = sorted(view.free_gpus)
        self.mcpu = view.free_mcpu
        self.mem = view.free_memory_mb
        self.held_gpus = 0
        self.held_mcpu = 0
        self.held_mem = 0
        self.held_for: list[str] = []

    def avail(self) -> tuple[int, int, int]:
        """What a job may take now: free minus what earlier blocked jobs hold."""
        return (
            len(self.free) - self.held_gpus,
            self.mcpu - self.held_mcpu,
            self.mem - self.held_mem,
        )


@dataclass(frozen=True, slots=True)
class Need:
    gpus: int
    mcpu: int
    mem: int

    @staticmethod
    def of(role: RoleSpec) -> Need:
        r = role.resources
        return Need(r.gpus, mcpu(r.cpus), r.memory_mb)

    def fits(self, gpus: int, mcpu_: int, mem: int) -> bool:
        return gpus >= self.gpus and mcpu_ >= self.mcpu and mem >= self.mem

    def within(self, other: Need) -> bool:
        return self.gpus <= other.gpus and self.mcpu <= other.mcpu and self.mem <= other.mem


class PoolState:
    def __init__(self, pool: Pool, views: list[NodeView]) -> None:
        self.pool = pool
        self.nodes = [NodeState(v) for v in sorted(views, key=lambda v: v.name)]
        # a pool its backend does not report (Pool.unavailable) takes no new work at all
        self.eligible = [] if pool.unavailable else [n for n in self.nodes if not n.view.why_not]
        self.capacity = (pool.gpus_per_node, mcpu(pool.cpus_per_node), pool.memory_mb_per_node)
        # GPU pools: eligible nodes bucketed by GPUs available now (best fit in O(G)).
        self.buckets: list[dict[str, NodeState]] = [{} for _ in range(pool.gpus_per_node + 1)]
        if pool.is_gpu:
            for n in self.eligible:
                self.buckets[self._bucket(n)][n.view.name] = n
        # nodes in the order holds are taken: most free now first (they empty soonest)
        self.hold_order = sorted(
            self.eligible, key=lambda n: (-len(n.free), -n.mcpu, -n.mem, n.view.name)
        )
        self.hold_from = 0
        self.no_fit: list[tuple[int, Need]] = []  # (members, need) that did not fit
        self.no_hold: list[tuple[int, Need]] = []  # (members, need) that could not get holds
        self.version = 0  # bumped on every change, keys the explanation cache

    def _bucket(self, n: NodeState) -> int:
        return max(0, min(self.pool.gpus_per_node, n.avail()[0]))

    def _rebucket(self, n: NodeState, before: int) -> None:
        if self.pool.is_gpu:
            del self.buckets[before][n.view.name]
            self.buckets[self._bucket(n)][n.view.name] = n

    def best_fit(self, need: Need) -> NodeState | None:
        if self.pool.is_gpu:
            for k in range(need.gpus, self.pool.gpus_per_node + 1):
                for n in self.buckets[k].values():
                    if need.fits(*n.avail()):
                        return n
            return None
        best: NodeState | None = None
        for n in self.eligible:
            g, c, m = n.avail()
            if need.fits(g, c, m) and (best is None or c < best.avail()[1]):
                best = n
        return best

    def take(self, n: NodeState, need: Need) -> tuple[int, ...]:
        before = self._bucket(n)
        gpus = tuple(n.free[: need.gpus])
        del n.free[: need.gpus]
        n.mcpu -= need.mcpu
        n.mem -= need.mem
        self._rebucket(n, before)
        self.version += 1
        return gpus

    def give_back(self, n: NodeState, need: Need, gpus: tuple[int, ...]) -> None:
        before = self._bucket(n)
        n.free = sorted([*n.free, *gpus])
        n.mcpu += need.mcpu
        n.mem += need.mem
        self._rebucket(n, before)
        self.version += 1

    def hold(self, job_id: str, members: int, need: Need) -> list[NodeState] | None:
        """Hold capacity for ``members`` members on the nodes that empty soonest; all or none."""
        cap_g, cap_c, cap_m = self.capacity
        taken: list[NodeState] = []
        while self.hold_from < len(self.hold_order) and self._no_headroom(
            self.hold_order[self.hold_from]
        ):
            self.hold_from += 1
        for n in self.hold_order[self.hold_from :]:
            while len(taken) < members and need.fits(
                cap_g - n.held_gpus, cap_c - n.held_mcpu, cap_m - n.held_mem
            ):
                self._adjust_hold(n, need, +1)
                n.held_for.append(job_id)
                taken.append(n)
            if len(taken) == members:
                return taken
        for n in taken:
            self._adjust_hold(n, need, -1)
            n.held_for.remove(job_id)
        return None

    @staticmethod
    def refuse(seen: list[tuple[int, Need]], members: int, need: Need) -> None:
        """Remember a request that failed (``no_fit`` or ``no_hold``), unless one it dominates
        is already there: the list stays as short as the distinct failures."""
        if not dominated(seen, members, need):
            seen.append((members, need))

    def _no_headroom(self, n: NodeState) -> bool:
        """Earlier holds claim the whole node: no later hold can use it (skipped for good)."""
        if self.pool.is_gpu:
            return n.held_gpus >= self.capacity[0]
        return n.held_mcpu >= self.capacity[1]

    def _adjust_hold(self, n: NodeState, need: Need, sign: int) -> None:
        before = self._bucket(n)
        n.held_gpus += sign * need.gpus
        n.held_mcpu += sign * need.mcpu
        n.held_mem += sign * need.mem
        self._rebucket(n, before)
        self.version += 1


def dominated(seen: list[tuple[int, Need]], members: int, need: Need) -> bool:
    """A request at least as large as one that already failed in this pass fails too."""
    return any(members >= m and n.within(need) for m, n in seen)
