"""Pool checks in the domain: a node's validation apart from its other states, placement that
skips nodes whose last check failed (and says so), and the judge of the check gang's output."""

from __future__ import annotations

from collections.abc import Sequence

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
from domain.fleet import Connectivity, Node, Pool, Queue, SchedState, Validation
from domain.fleet_check import PoolCheck, check_script, judge, pool_note
from domain.requests import resolve_roles
from tests.unit.builders import T0

pytestmark = pytest.mark.unit

POOL = Pool("p", "main", "node", 0, 4, 8192)
NAMES = ("n0", "n1", "n2", "n3")


# -- the node's validation -------------------------------------------------------------------


def test_a_failed_check_keeps_a_node_from_new_work_and_says_why() -> None:
    assert Node("n", "p").validation is Validation.UNCHECKED
    assert Node("n", "p").eligible
    assert Node("n", "p", validation=Validation.PASSED).eligible
    failed = Node("n", "p", validation=Validation.FAILED, validation_reason="storage: …")
    assert not failed.eligible and failed.why_not == "failed its pool check"
    # the other states come first: they say more about what to do
    lost = Node("n", "p", connectivity=Connectivity.LOST, validation=Validation.FAILED)
    assert lost.why_not == "lost"
    cordoned = Node("n", "p", SchedState.CORDONED, validation=Validation.FAILED)
    assert cordoned.why_not == "cordoned"


def _views(*nodes: Node) -> list[NodeView]:
    return [
        NodeView(n.name, n.pool, (), mcpu(POOL.cpus_per_node), POOL.memory_mb_per_node, n.why_not)
        for n in nodes
    ]


def _decide(views: list[NodeView], profile: str) -> Decisions:
    roles = resolve_roles([profile], [POOL], [])
    job = PendingJob("job-1", "q", T0, roles)
    return decide(Snapshot({"p": POOL}, views, {"q": QueueView(Queue("q", "t"))}, [job]))


def test_placement_skips_a_node_that_failed_its_check_and_explains_the_wait() -> None:
    fleet = [
        Node("p-0", "p", validation=Validation.PASSED),
        Node("p-1", "p", validation=Validation.FAILED, validation_reason="unreachable"),
        Node("p-2", "p"),
    ]
    (placed,) = _decide(_views(*fleet), "p/cpu:8").placements  # a gang of two
    assert sorted(a.node for a in placed.assignments) == ["p-0", "p-2"]

    d = _decide(_views(*fleet), "p/cpu:12")  # a gang of three: needs every node
    wait = d.waits["job-1"]
    assert wait.kind is WaitKind.NO_NODES
    assert wait.text.endswith(
        "2 of 3 nodes in pool p have room for a member now (1 failed its pool check)"
    )

    fleet[1] = Node("p-1", "p", validation=Validation.PASSED)  # a later check passed
    (placed,) = _decide(_views(*fleet), "p/cpu:12").placements
    assert sorted(a.node for a in placed.assignments) == ["p-0", "p-1", "p-2"]


# -- the judge -------------------------------------------------------------------------------


def member_output(
    rank: int,
    world: int,
    cannot_reach: Sequence[int] = (),
    storage: str = "TPCHECK ok storage",
    done: bool = True,
) -> str:
    lines = ["some output of the shell", "TPCHECK not a known line"]
    for k in range(world):
        if k == rank:
            continue
        if k in cannot_reach:
            lines.append(
                f"TPCHECK fail network: member {rank} cannot reach member {k} at "
                f"10.0.0.{k}:{29500 + k}"
            )
        else:
            lines.append(f"TPCHECK ok tcp to member {k}")
    if rank and storage:
        lines.append(storage)
    if done:
        lines.append("TPCHECK done")
    return "\n".join(lines) + "\n"


def test_every_node_passes_when_every_member_reached_every_other_and_read_the_file() -> None:
    outputs = [member_output(r, 3) for r in range(3)]
    results = judge(NAMES[:3], outputs, [True] * 3)
    assert [(r.node, r.ok) for r in results] == [("n0", True), ("n1", True), ("n2", True)]
    assert results[0].detail == "2 of 2 peers reached"  # member 0 wrote the file
    assert results[1].detail == "2 of 2 peers reached, shared storage verified"
    assert pool_note(results) == ""


def test_the_node_most_peers_cannot_reach_is_blamed_not_its_peers() -> None:
    outputs = [member_output(r, 4, cannot_reach=(3,) if r != 3 else ()) for r in range(4)]
    outputs[3] = member_output(3, 4, storage="TPCHECK fail storage: no word from member 0")
    results = {r.node: r for r in judge(NAMES, outputs, [True] * 4)}
    assert not results["n3"].ok
    assert "unreachable from n0 on 10.0.0.3:29503" in results["n3"].detail
    assert "unreachable from n2 on 10.0.0.3:29503" in results["n3"].detail
    assert "storage: no word from member 0" in results["n3"].detail
    for name in ("n0", "n1", "n2"):
        assert results[name].ok, results[name]
        assert results[name].detail.startswith("2 of 3 peers reached")


def test_a_node_that_cannot_reach_most_peers_is_blamed() -> None:
    outputs = [member_output(r, 4) for r in range(4)]
    outputs[1] = member_output(1, 4, cannot_reach=(0, 2, 3))  # its outbound side is broken
    results = {r.node: r for r in judge(NAMES, outputs, [True] * 4)}
    assert not results["n1"].ok
    assert "cannot reach n0 (10.0.0.0:29500)" in results["n1"].detail
    assert [n for n, r in results.items() if not r.ok] == ["n1"]


def test_with_two_nodes_a_failed_connection_fails_both() -> None:
    outputs = [member_output(0, 2, cannot_reach=(1,)), member_output(1, 2)]
    results = judge(NAMES[:2], outputs, [True, True])
    assert [r.ok for r in results] == [False, False]
    assert results[0].detail == "cannot reach n1 (10.0.0.1:29501)"
    assert results[1].detail == "unreachable from n0 on 10.0.0.1:29501"


def test_storage_failures_belong_to_the_node_that_saw_them() -> None:
    bad = "TPCHECK fail storage: member 0's file never appeared in the shared directory"
    outputs = [
        member_output(r, 3, storage=bad if r == 2 else "TPCHECK ok storage") for r in (0, 1, 2)
    ]
    results = judge(NAMES[:3], outputs, [True] * 3)
    assert [r.ok for r in results] == [True, True, False]
    assert results[2].detail == "storage: member 0's file never appeared in the shared directory"


def test_a_member_that_did_not_run_to_its_end_fails_its_node() -> None:
    outputs = [member_output(r, 3) for r in range(3)]
    outputs[1] = member_output(1, 3, done=False)
    results = judge(NAMES[:3], outputs, [True, True, False])
    assert [r.ok for r in results] == [True, False, False]
    assert all(r.detail == "the check did not run to its end on this node" for r in results[1:])


def test_a_pool_without_shared_storage_passes_with_a_note() -> None:
    outputs = [member_output(r, 2, storage="TPCHECK storage none") for r in range(2)]
    outputs[0] = outputs[0].replace("TPCHECK done", "TPCHECK storage none\nTPCHECK done")
    results = judge(NAMES[:2], outputs, [True, True])
    assert all(r.ok for r in results)
    assert results[1].detail == "1 of 1 peers reached, no shared storage"
    assert "no shared storage configured" in pool_note(results)


def test_a_check_is_ok_only_when_it_ended_with_every_node_passed() -> None:
    running = PoolCheck("chk-1", "p", "job-1", ("n0", "n1"), T0)
    assert running.ok is None
    results = tuple(judge(NAMES[:2], [member_output(r, 2) for r in range(2)], [True, True]))
    assert PoolCheck("chk-1", "p", "job-1", ("n0", "n1"), T0, T0, results).ok is True
    assert PoolCheck("chk-1", "p", "job-1", ("n0", "n1"), T0, T0, ()).ok is False  # stopped


def test_the_script_waits_as_long_as_asked_and_always_ends_with_done() -> None:
    script = check_script(7)
    assert "T=7\n" in script and "__TIMEOUT__" not in script
    assert script.rstrip().endswith("exit 0")
    assert "TPCHECK done" in script
    for tool in ("nc", "sha256sum", "dd", "timeout"):  # busybox applets of the runtime image
        assert f"{tool} " in script
