"""Placements split into groups that share no node (domain/placement_groups.py): every
placement once, in order within its group; placements linked through nodes, even through a
chain of others, together; groups balanced; never more than asked; bad input refused."""

from __future__ import annotations

import random

import pytest

from domain.admission import Assignment, Placement
from domain.placement_groups import node_disjoint_groups


def placed(job: str, *nodes: str) -> Placement:
    return Placement(
        job, "q", tuple(Assignment(m, "main", n, (0,), 1, 1) for m, n in enumerate(nodes))
    )


def nodes_of(group: list[Placement]) -> set[str]:
    return {a.node for p in group for a in p.assignments}


def test_one_group_or_none() -> None:
    ps = [placed("j1", "a"), placed("j2", "b")]
    assert node_disjoint_groups(ps, 1) == [ps]
    assert node_disjoint_groups([], 4) == []
    assert node_disjoint_groups(ps[:1], 4) == [ps[:1]]


def test_a_chain_of_shared_nodes_stays_in_one_group() -> None:
    # j1-j2 share b, j2-j3 share c: one set; j4 and j5 alone
    ps = [
        placed("j1", "a", "b"),
        placed("j4", "x"),
        placed("j2", "b", "c"),
        placed("j5", "y"),
        placed("j3", "c"),
    ]
    groups = node_disjoint_groups(ps, 3)
    assert [[p.job_id for p in g] for g in groups] == [["j1", "j2", "j3"], ["j4"], ["j5"]]


@pytest.mark.parametrize("most", [2, 3, 4, 7])
def test_random_passes_give_disjoint_balanced_groups(most: int) -> None:
    rng = random.Random(most)
    for _ in range(50):
        ps = [
            placed(f"j{i}", *rng.sample([f"n{k}" for k in range(40)], rng.choice([1, 1, 2, 4])))
            for i in range(rng.randrange(0, 60))
        ]
        groups = node_disjoint_groups(ps, most)
        assert len(groups) <= most and all(groups)
        flat = [p for g in groups for p in g]
        assert sorted(p.job_id for p in flat) == sorted(p.job_id for p in ps)
        order = {p.job_id: i for i, p in enumerate(ps)}
        for g in groups:
            assert [order[p.job_id] for p in g] == sorted(order[p.job_id] for p in g)
        for i, g in enumerate(groups):
            for h in groups[i + 1 :]:
                assert not nodes_of(g) & nodes_of(h)
        # greedy by size: a group is never larger than the smallest plus the largest linked set
        if groups:
            largest_set = max(len(g) for g in node_disjoint_groups(ps, len(ps) or 1))
            sizes = [len(g) for g in groups]
            assert max(sizes) - min(sizes) <= largest_set or len(groups) < most


def test_zero_groups_is_refused() -> None:
    with pytest.raises(ValueError, match="1 or more"):
        node_disjoint_groups([placed("j1", "a")], 0)
