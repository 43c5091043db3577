"""Contract: output scan requests (tp artifacts verify of files kept on nodes) and fetch
requests (a download of one) are pending for their node until answered, answered once and only
by that node, lapse, and are pruned."""

from __future__ import annotations

from dataclasses import replace

import pytest

from domain.artifacts import ArtifactFile, Manifest, ScanRequest, ScanResult
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at

pytestmark = pytest.mark.contract


def request(rid: str, node: str, minute: int) -> ScanRequest:
    return ScanRequest(rid, node, "job-1", "att-1", f"mem-{rid}", 0, at(minute))


async def test_requests_are_pending_until_their_node_answers_once(
    uow_factory: UnitOfWorkFactory,
) -> None:
    async with uow_factory() as uow:
        for r in (request("b", "n1", 3), request("a", "n1", 2), request("c", "n2", 2)):
            await uow.output_scans.request(r)
        await uow.commit()
    async with uow_factory() as uow:
        assert [r.id for r in await uow.output_scans.pending(["n1"], at(0))] == ["a", "b"]
        assert [r.id for r in await uow.output_scans.pending(["n1", "n2"], at(3))] == ["b"]
        assert await uow.output_scans.pending(["n3"], at(0)) == []
        # None: every node's (the gateway filters by its own streams)
        assert [r.id for r in await uow.output_scans.pending(None, at(0))] == ["a", "c", "b"]
        assert [r.id for r in await uow.output_scans.pending(None, at(3))] == ["b"]
        assert await uow.output_scans.result("a") is None
    files = Manifest.of([ArtifactFile("ckpt.bin", 7, "ef" * 32)])
    answer = ScanResult("a", files, "", at(5))
    async with uow_factory() as uow:
        assert not await uow.output_scans.answer("n2", answer)  # not the node it was meant for
        assert not await uow.output_scans.answer("n1", ScanResult("zz", None, "", at(5)))
        assert await uow.output_scans.answer("n1", answer)
        assert not await uow.output_scans.answer("n1", ScanResult("a", None, "late", at(6)))
        assert await uow.output_scans.answer("n2", ScanResult("c", None, "unreadable", at(6)))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.output_scans.result("a") == answer
        assert await uow.output_scans.result("c") == ScanResult("c", None, "unreadable", at(6))
        assert [r.id for r in await uow.output_scans.pending(["n1", "n2"], at(0))] == ["b"]
        assert [r.id for r in await uow.output_scans.pending(None, at(0))] == ["b"]
        assert await uow.output_scans.prune(at(3)) == 2  # a and c (made at minute 2)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.output_scans.result("a") is None
        assert [r.id for r in await uow.output_scans.pending(["n1", "n2"], at(0))] == ["b"]


async def test_a_fetch_request_keeps_the_file_it_names(uow_factory: UnitOfWorkFactory) -> None:
    big = ArtifactFile("model/wéights.bin", 300 * 1024**3, "ab" * 32)  # past 32 bits
    fetch = replace(request("f", "n1", 2), fetch=big)
    async with uow_factory() as uow:
        await uow.output_scans.request(fetch)
        await uow.output_scans.request(request("s", "n1", 3))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.output_scans.pending(["n1"], at(0)) == [fetch, request("s", "n1", 3)]
        assert await uow.output_scans.answer("n1", ScanResult("f", None, "", at(4)))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.output_scans.result("f") == ScanResult("f", None, "", at(4))
        assert [r.id for r in await uow.output_scans.pending(["n1"], at(0))] == ["s"]
