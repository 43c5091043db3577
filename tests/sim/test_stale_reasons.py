"""A reason belongs to the state it explains (issue 18, defect 14): every transition replaces
or clears it, so a member back in ``running`` no longer says its node is disconnected, and a
job running after a relaunch no longer says its first attempt's launch was aborted."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.lifecycle import JobState, MemberState
from tests.sim.test_node_launch import NODES, World

pytestmark = pytest.mark.sim


async def test_a_member_back_in_running_loses_the_disconnected_reason(tmp_path: Path) -> None:
    w = World(tmp_path)
    await w.fleet.connect_all()
    job_id = await w.submit()
    await w.all_running(job_id)
    await w.fleet.disconnect(NODES[1])
    await w.step()
    d = await w.job(job_id)
    [away] = [m for m in d.attempts[-1].members if m.node == NODES[1]]
    assert away.state is MemberState.UNKNOWN
    assert away.reason == f"node {NODES[1]} is disconnected"
    await w.fleet.connect(NODES[1])
    d = await w.all_running(job_id)
    [back] = [m for m in d.attempts[-1].members if m.id == away.id]
    assert back.reason == ""


async def test_a_running_job_no_longer_says_its_first_launch_was_aborted(tmp_path: Path) -> None:
    w = World(tmp_path)
    await w.fleet.connect_all()
    job_id = await w.submit()
    await w.supervisor.tick()  # the launch begins under this coordinator ...
    w.restart_coordinator()  # ... which dies before deciding: presumed abort, queued again
    await w.step()
    d = await w.job(job_id)
    assert d.job.state is JobState.PENDING and "queued again" in d.job.reason
    d = await w.all_running(job_id)
    assert len(d.attempts) == 2
    assert d.job.state is JobState.RUNNING and d.job.reason == ""
