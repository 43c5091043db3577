"""A pass's placements split into groups that share no node (docs/scheduling.md, "Storing a
pass on several connections"): each group can be stored in its own transaction while the others
are, and none waits on another's node row locks, since no two touch the same node."""

from __future__ import annotations

from collections.abc import Sequence

from domain.admission import Placement


def node_disjoint_groups(placements: Sequence[Placement], most: int) -> list[list[Placement]]:
    """At most ``most`` non-empty groups. Two placements that share a node, directly or through
    other placements, are in one group; each group keeps the placements' order. Sets of linked
    placements go, the largest first, to the group that holds fewest so far."""
    if most < 1:
        raise ValueError(f"most={most}: give 1 or more")
    if most == 1 or len(placements) < 2:
        return [list(placements)] if placements else []
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while (up := parent.setdefault(node, node)) != node:
            parent[node] = parent.setdefault(up, up)  # halve the path
            node = up
        return node

    for p in placements:
        nodes = [a.node for a in p.assignments]
        for node in nodes[1:]:
            parent[root(node)] = root(nodes[0])
    linked: dict[str, list[int]] = {}
    for index, p in enumerate(placements):
        # a placement without assignments (none is decided today) stands alone
        key = root(p.assignments[0].node) if p.assignments else f"\0{index}"
        linked.setdefault(key, []).append(index)
    groups: list[list[int]] = [[] for _ in range(most)]
    for indexes in sorted(linked.values(), key=len, reverse=True):
        min(groups, key=len).extend(indexes)
    return [[placements[i] for i in sorted(g)] for g in groups if g]
