"""admission.decide: placement, quotas, backfill without starvation, and the texts users see."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.admission import (
    Decisions,
    NodeView,
    PendingJob,
    QueueView,
    Snapshot,
    WaitKind,
    decide,
    mcpu,
)
from domain.fleet import Pool, Queue
from domain.requests import resolve_roles
from tests.unit.builders import T0

pytestmark = pytest.mark.unit

A = Pool("a", "main", "node", 8, 96, 1_048_576, "h200")
CPU = Pool("c", "main", "node", 0, 4, 8192)
POOLS = {"a": A, "c": CPU}


def nodes(pool: Pool, n: int, **states: str) -> list[NodeView]:
    """``n`` empty nodes ``<pool>-0..``; ``states`` maps a node name to its why_not."""
    return [
        NodeView(
            f"{pool.name}-{i}",
            pool.name,
            tuple(range(pool.gpus_per_node)),
            mcpu(pool.cpus_per_node),
            pool.memory_mb_per_node,
            states.get(f"{pool.name}-{i}", ""),
        )
        for i in range(n)
    ]


def busy(view: NodeView, gpus: int) -> NodeView:
    """The same node with its first ``gpus`` GPUs (and their CPU/memory share) in use."""
    share = gpus / A.gpus_per_node
    return NodeView(
        view.name,
        view.pool,
        view.free_gpus[gpus:],
        view.free_mcpu - round(mcpu(A.cpus_per_node) * share),
        view.free_memory_mb - int(A.memory_mb_per_node * share),
        view.why_not,
    )


def job(n: int, *profiles: str, queue: str = "research") -> PendingJob:
    roles = resolve_roles(list(profiles), POOLS.values(), [])
    return PendingJob(f"job-{n}", queue, T0 + timedelta(seconds=n), roles)


def queues(*qs: Queue, used: dict[str, tuple[int, int]] | None = None) -> dict[str, QueueView]:
    used = used or {}
    return {q.name: QueueView(q, *used.get(q.name, (0, 0))) for q in qs}


RESEARCH = Queue("research", "vision")


def run(
    views: list[NodeView], pending: list[PendingJob], qs: dict[str, QueueView] | None = None
) -> Decisions:
    return decide(Snapshot(POOLS, views, qs or queues(RESEARCH), pending))


# -- placement -------------------------------------------------------------------------------


def test_a_gang_gets_whole_nodes_and_distinct_gpu_indices() -> None:
    d = run(nodes(A, 3), [job(1, "h200:16")])
    (p,) = d.placements
    assert [(a.member, a.node, a.gpus) for a in p.assignments] == [
        (0, "a-0", tuple(range(8))),
        (1, "a-1", tuple(range(8))),
    ]
    assert p.assignments[0].mcpu == 96_000


def test_small_jobs_share_a_node_best_fit() -> None:
    views = [busy(nodes(A, 2)[0], 6), nodes(A, 2)[1]]  # a-0 has 2 free, a-1 has 8
    d = run(views, [job(1, "h200:2"), job(2, "h200:8")])
    placed = {p.job_id: p.assignments[0] for p in d.placements}
    assert placed["job-1"].node == "a-0" and placed["job-1"].gpus == (6, 7)
    assert placed["job-2"].node == "a-1"


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    d = run(nodes(A, 1), [job(1, "h200:16")])
    assert d.placements == []
    assert "job-1" in d.waits


def test_roles_in_two_pools_are_one_envelope() -> None:
    d = run(nodes(A, 1) + nodes(CPU, 1), [job(1, "train=h200:8", "eval=cpu:2")])
    (p,) = d.placements
    assert [(a.role, a.node) for a in p.assignments] == [("train", "a-0"), ("eval", "c-0")]


def test_higher_priority_queue_first_then_fifo() -> None:
    urgent = Queue("urgent", "vision", priority=10)
    pending = [job(1, "h200:8"), job(2, "h200:8"), job(3, "h200:8", queue="urgent")]
    d = run(nodes(A, 2), pending, queues(RESEARCH, urgent))
    assert [p.job_id for p in d.placements] == ["job-3", "job-1"]
    assert d.waits["job-2"].position == 3


# -- backfill without starvation -------------------------------------------------------------


def test_small_jobs_backfill_only_where_the_blocked_head_does_not_need_room() -> None:
    # a-0 half busy, a-1 and a-2 busy: the head (2 whole nodes) waits and holds a-0 and a-1
    # (most free first); a small job may use a-3, never a-0.
    views = nodes(A, 4)
    views = [busy(views[0], 4), busy(views[1], 8), busy(views[2], 8), views[3]]
    pending = [job(1, "h200:32"), job(2, "h200:2"), job(3, "h200:8"), job(4, "h200:1")]
    d = run(views, pending)
    # head needs 4 whole nodes; every node is held for it, so nothing backfills.
    assert d.placements == []
    assert d.waits["job-1"].kind is WaitKind.CAPACITY
    assert d.waits["job-2"].kind is WaitKind.HELD

    pending = [job(1, "h200:16"), job(2, "h200:2"), job(3, "h200:8")]
    d = run(views, pending)
    # head holds a-3 (8 free) and a-0 (4 free); a-1/a-2 are full: nothing fits elsewhere
    assert d.placements == []
    assert "held for earlier jobs" in d.waits["job-2"].text


def test_backfill_uses_nodes_the_head_does_not_hold() -> None:
    views = nodes(A, 2)
    views = [busy(views[0], 2), busy(views[1], 4)]  # 6 and 4 free: no whole node for the head
    d = run(views, [job(1, "h200:8"), job(2, "h200:2"), job(3, "h200:4")])
    # the head holds a-0 (most free, empties soonest); job-2 may not take a-0's free GPUs,
    # but job-2 fits on a-1, and then job-3 no longer does (it waits, holding room on a-1).
    assert [(p.job_id, p.assignments[0].node) for p in d.placements] == [("job-2", "a-1")]
    assert d.waits["job-1"].kind is WaitKind.CAPACITY
    assert d.waits["job-3"].text.endswith("0 of 2 nodes in pool a have room for a member now, "
                                          "1 more held for earlier jobs")  # fmt: skip


def test_a_big_job_is_not_starved_by_a_stream_of_small_ones() -> None:
    """Passes over time: every node starts half busy with small jobs; one small job arrives
    and the oldest running one ends per pass. Without holds the arrivals would refill every
    freed GPU and the 4-node job would wait forever; with them the nodes drain and it starts."""
    free = {f"a-{i}": 4 for i in range(4)}
    running = {f"r-{i}": (f"a-{i % 4}", 2) for i in range(8)}  # job id → (node, gpus)
    big = job(0, "h200:32")
    pending = [big]
    for n in range(1, 40):
        pending.append(job(n, "h200:2"))
        node, g = running.pop(min(running))
        free[node] += g
        views = [
            NodeView(k, "a", tuple(range(8 - v, 8)), 12_000 * v, 131_072 * v)
            for k, v in free.items()
        ]
        for p in run(views, pending).placements:
            pending = [j for j in pending if j.id != p.job_id]
            for a in p.assignments:
                free[a.node] -= len(a.gpus)
                running[f"{p.job_id}/{a.member}"] = (a.node, len(a.gpus))
        if big not in pending:
            break
    assert big not in pending, "the big job still waits after 39 passes"
    assert n == 8  # it started as soon as the 8 small jobs running at the start had ended


# -- the texts a user sees (`tp job why`) ----------------------------------------------------


def test_why_capacity() -> None:
    views = nodes(A, 4, **{"a-3": "cordoned"})
    views = [busy(views[0], 8), busy(views[1], 8), views[2], views[3]]
    d = run(views, [job(1, "h200:16")])
    w = d.waits["job-1"]
    assert w.kind is WaitKind.CAPACITY
    assert w.text == (
        "needs 2×8 h200 GPUs in pool a; 1 of 4 nodes in pool a has room for a member now "
        "(1 cordoned)"
    )


def test_why_gpu_quota() -> None:
    q = Queue("research", "vision", gpu_quota=16)
    d = run(nodes(A, 4), [job(1, "h200:8")], queues(q, used={"research": (16, 2)}))
    w = d.waits["job-1"]
    assert w.kind is WaitKind.QUOTA
    assert w.text == (
        "needs 8 h200 GPUs in pool a; 4 of 4 nodes in pool a have room for a member now; "
        "queue research (team vision) quota 16/16 GPUs in use, it needs 8 more"
    )


def test_why_job_quota() -> None:
    q = Queue("research", "vision", job_quota=2)
    d = run(nodes(A, 4), [job(1, "h200:1")], queues(q, used={"research": (2, 2)}))
    assert d.waits["job-1"].kind is WaitKind.QUOTA
    assert d.waits["job-1"].text.endswith("queue research (team vision) quota 2/2 jobs running")


def test_why_held_for_an_earlier_job() -> None:
    views = nodes(A, 2)
    views = [busy(views[0], 8), views[1]]
    d = run(views, [job(1, "h200:16"), job(2, "h200:8")])
    w = d.waits["job-2"]
    assert w.kind is WaitKind.HELD
    assert w.text == (
        "needs 8 h200 GPUs in pool a; 0 of 2 nodes in pool a have room for a member now, "
        "1 more held for earlier jobs"
    )
    assert w.position == 2


def test_why_too_few_nodes_take_work() -> None:
    views = nodes(A, 3, **{"a-1": "cordoned", "a-2": "disconnected"})
    d = run(views, [job(1, "h200:16")])
    w = d.waits["job-1"]
    assert w.kind is WaitKind.NO_NODES
    assert w.text == (
        "needs 2×8 h200 GPUs in pool a; 1 of 3 nodes in pool a has room for a member now "
        "(1 cordoned, 1 disconnected)"
    )


def test_why_never_over_quota() -> None:
    q = Queue("research", "vision", gpu_quota=8)
    d = run(nodes(A, 4), [job(1, "h200:16")], queues(q))
    w = d.waits["job-1"]
    assert w.kind is WaitKind.NEVER
    assert w.text == (
        "needs 2×8 h200 GPUs in pool a; queue research allows at most 8 GPUs, so it can never "
        "start there: submit it to a queue with a larger quota"
    )


def test_why_never_closed_queue() -> None:
    q = Queue("research", "vision", job_quota=0)
    d = run(nodes(A, 1), [job(1, "h200:1")], queues(q))
    assert d.waits["job-1"].text == (
        "needs 1 h200 GPU in pool a; queue research is closed (its job quota is 0)"
    )


def test_why_never_pool_too_small() -> None:
    d = run(nodes(A, 1), [job(1, "h200:16")])
    assert d.waits["job-1"].kind is WaitKind.NEVER
    assert d.waits["job-1"].text == (
        "needs 2×8 h200 GPUs in pool a; role main needs 2×8 h200 GPUs in pool a; pool a has "
        "only 1 node, so it can never start: cancel it and ask for less"
    )


def test_why_config_gone() -> None:
    j = job(1, "h200:8")
    d = decide(Snapshot({"c": CPU}, nodes(CPU, 1), queues(RESEARCH), [j]))
    assert d.waits["job-1"].kind is WaitKind.CONFIG
    assert d.waits["job-1"].text == "pool a no longer exists; cancel it and submit again"
