"""Contract: the node backend's ports (domain/node_ports.py), part 3 — what the gateways read
of the launch ledger: everything a node's members need (``on_nodes``, ``on_gateway``), the
rendezvous ports in use, and the installation id. (The ledger itself: test_node_launches.py.)"""

from __future__ import annotations

import pytest

from domain.admission import Assignment
from domain.lifecycle import AttemptState
from domain.node_protocol import Decision
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at
from tests.contract.test_node_launches import new_gang, ref
from tests.contract.test_node_ports import CAP, open_link, setup_fleet

pytestmark = pytest.mark.contract


async def test_on_nodes_tells_a_gateway_everything_about_its_members(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", address="10.0.0.7")  # the master's address
    g = await new_gang(uow_factory, ("n-0", "n-1"), 29501, final=(1,))
    other = await new_gang(uow_factory, ("n-2",), 29502, reserve=False)
    m0, m1 = (m.id for m in g.members)
    async with uow_factory() as uow:
        await uow.launches.request_stop([m0], at(2))
        await uow.launches.decide(g.attempt.id, Decision.COMMIT, "all voted", at(3))
        works = await uow.launches.on_nodes(["n-1", "n-0"])
        assert await uow.launches.on_nodes([]) == []
        assert [w.placed.node for w in await uow.launches.on_nodes(["n-2", "n-9"])] == ["n-2"]
        launches = await uow.launches.members(g.attempt.id)
        await uow.commit()
    by_member = {w.placed.ref.member_id: w for w in works}
    assert set(by_member) == {m0, m1}
    for i, (mid, node, final, stop) in enumerate(
        [(m0, "n-0", False, True), (m1, "n-1", True, False)]
    ):
        w = by_member[mid]
        assert w.placed.ref == ref(g, i)
        assert (w.placed.job_id, w.placed.node, w.placed.decision) == (
            g.job.id,
            node,
            Decision.COMMIT,
        )
        assert (w.placed.final, w.placed.stop_requested, w.placed.released, w.placed.fenced) == (
            final, stop, False, False
        )  # fmt: skip
        assert w.launch == launches[i]
        assert w.spec == g.job.spec
        assert w.assignment == Assignment(i, "main", node, (2 * i, 2 * i + 1), 12_000, 131_072)
        assert (w.members, w.master_addr, w.master_port) == (2, "10.0.0.7", 29501)
        assert len(w.peers) == 2 and w.peers[0] == "10.0.0.7"  # by member index
    async with uow_factory() as uow:
        assert await uow.reservations.release(g.attempt.id)
        (after,) = await uow.launches.on_nodes(["n-0"])
        (alone,) = await uow.launches.on_nodes(["n-2"])
    # after the release only a Forget can be due: no GPUs, no CPUs, no memory
    assert after.assignment == Assignment(0, "main", "n-0", (), 0, 0)
    assert (alone.members, alone.master_addr, alone.placed.decision) == (1, "", None)
    assert alone.peers == ("",)
    assert alone.placed.ref.attempt_id == other.attempt.id


async def test_ports_in_use_are_those_of_live_launches_led_from_the_node(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)

    async def gang(port: int, decision: Decision | None, **kw: object) -> None:
        g = await new_gang(uow_factory, port=port, reserve=False, **kw)  # type: ignore[arg-type]
        if decision is not None:
            async with uow_factory() as uow:
                await uow.launches.decide(g.attempt.id, decision, "", at(2))
                await uow.commit()

    await gang(29500, None)
    await gang(29501, Decision.COMMIT)
    await gang(29502, Decision.ABORT)
    await gang(29503, Decision.COMMIT, attempt_state=AttemptState.FAILED)
    await gang(29504, None, nodes=("n-1", "n-0"))
    async with uow_factory() as uow:
        assert await uow.launches.ports_in_use("n-0") == {29500, 29501}
        assert await uow.launches.ports_in_use("n-1") == {29504}
        assert await uow.launches.ports_in_use("n-2") == set()


async def test_the_installation_id_is_made_once_and_kept(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        first = await uow.enrollment.installation()
    async with uow_factory() as uow:
        assert await uow.enrollment.installation() == first
    assert first.startswith("inst-") and len(first) > 20


async def test_on_gateway_reads_the_work_of_the_nodes_linked_open_at_that_gateway(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    here = await open_link(uow_factory, "n-0")  # at gw-1
    await open_link(uow_factory, "n-1")
    async with uow_factory() as uow:
        await uow.links.open("n-2", "gw-2", CAP, "10.0.0.2", "1.0", at(0))  # another gateway
        await uow.commit()
    g = await new_gang(uow_factory, ("n-0", "n-1"), 29501)
    other = await new_gang(uow_factory, ("n-2",), 29502, reserve=False)
    async with uow_factory() as uow:
        mine = await uow.launches.on_gateway("gw-1")
        theirs = await uow.launches.on_gateway("gw-2")
        assert await uow.launches.on_gateway("gw-9") == []
        # the same rows as on_nodes for those nodes, in the same order
        assert mine == await uow.launches.on_nodes(["n-0", "n-1"])
    assert [w.placed.ref.attempt_id for w in mine] == [g.attempt.id] * 2
    assert [w.placed.node for w in theirs] == ["n-2"]
    assert theirs[0].placed.ref.attempt_id == other.attempt.id
    async with uow_factory() as uow:  # a stream that ended: its node is no one's to read
        assert await uow.links.close("n-0", here.session, at(1))
        await uow.commit()
    async with uow_factory() as uow:
        assert [w.placed.node for w in await uow.launches.on_gateway("gw-1")] == ["n-1"]
