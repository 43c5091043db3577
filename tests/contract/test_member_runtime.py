"""Contract: the MemberRuntime port (domain/node_ports.py), the same assertions on both twins.

``docker``: adapters/node/executor.py, a real node's runtime, on the real engine with busybox.
``process``: adapters/node/processes.py, a real node's runtime without a container engine
(`--executor process`): the same commands run as host processes in a temporary state directory.
``sim``: adapters/sim/node_runtime.py, the simulator's, whose members run no command: where a
real member's command prints and exits, the rig ends the simulated one with the same code and
output (``SimRuntime.finish``), and a restarted daemon gets the same runtime back, as the
simulator hands it to the daemon that replaces a crashed one. What only an engine can show
(labels, limits, sources, images, GPUs, ports) stays in tests/integration/test_node_executor.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import BUSYBOX
from adapters.node.executor import NodeExecutor
from adapters.node.processes import ProcessExecutor
from adapters.sim.node_runtime import SimRuntime
from domain.node_daemon_ports import MemberRuntime
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef
from domain.ports import Observation
from tests.fixtures.docker import remove_labelled
from tests.support.host_processes import process_isolation

pytestmark = pytest.mark.contract

INST = "inst-contract"
COUNT = b"".join(b"%09d\n" % i for i in range(300))
# what each member does: its command on a real engine, and how it ends (code, output); None:
# it runs until stopped
SCRIPTS: dict[str, tuple[tuple[str, ...], tuple[int, bytes] | None]] = {
    "exit3": (("sh", "-c", "echo ran; exit 3"), (3, b"ran\n")),
    "count": (
        ("sh", "-c", "i=0; while [ $i -lt 300 ]; do printf '%09d\\n' $i; i=$((i+1)); done"),
        (0, COUNT),
    ),
    "sleep": (("sleep", "600"), None),
}


@dataclass
class Rig:
    runtime: MemberRuntime
    node: str
    image: str
    job_id: str
    ended: Callable[[MemberRuntime, PrepareOrder, str], Awaitable[Observation]]
    restart: Callable[[], Awaitable[MemberRuntime]]  # the daemon dies; another one starts
    stage: str = "creating the container"  # what its preparation reports

    def order(self, script: str, index: int = 0, installation: str = INST) -> PrepareOrder:
        ref = MemberRef(f"att-{self.job_id[4:]}-1", f"mem-{self.job_id[4:]}-{index}", index, 7)
        return PrepareOrder(
            ref=ref,
            node=self.node,
            job_id=self.job_id,
            image=self.image,
            command=SCRIPTS[script][0],
            env={},
            cpus=1.0,
            memory_mb=256,
            gpu_indices=(),
            source_digest=None,
            members=1,
            process_model="single-process",
            check_port=0,
            installation=installation,
        )


async def until(runtime: MemberRuntime, cid: str, status: str) -> Observation:
    deadline = time.monotonic() + 30
    while (obs := await runtime.observe(cid)).status != status:
        assert time.monotonic() < deadline, f"{cid} is {obs}, not {status}"
        await asyncio.sleep(0.05)
    return obs


def _script_of(order: PrepareOrder) -> str:
    return next(name for name, (cmd, _) in SCRIPTS.items() if cmd == order.command)


# the docker case reaches the engine through getfixturevalue, which the tiers cannot see
@pytest.fixture(params=["sim", "process", pytest.param("docker", marks=pytest.mark.engine)])
def engine(request: pytest.FixtureRequest) -> str | None:
    """The real engine's address for ``docker`` (started if need be); the name otherwise."""
    if request.param == "docker":
        return str(request.getfixturevalue("docker_host"))
    return str(request.param)


@pytest.fixture
async def rig(engine: str, tmp_path: Path) -> AsyncIterator[Rig]:
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    node = f"node-{uuid.uuid4().hex[:8]}"
    if engine == "process":
        isolation = process_isolation(node)
        made = [ProcessExecutor(node, tmp_path / "processes", tmp_path, isolation)]

        async def ends(runtime: MemberRuntime, order: PrepareOrder, cid: str) -> Observation:
            return await until(runtime, cid, "exited")

        async def again() -> MemberRuntime:
            made.append(ProcessExecutor(node, tmp_path / "processes", tmp_path, isolation))
            return made[-1]

        try:
            yield Rig(made[0], node, "sha256:" + "cd" * 32, job_id, ends, again, "preparing")
        finally:
            for cid in (await made[-1].held(INST)).values():
                await made[-1].remove(cid)
            for cid in (await made[-1].held("inst-another")).values():
                await made[-1].remove(cid)
        return
    if engine == "sim":
        sim = SimRuntime(node)

        async def finish(runtime: MemberRuntime, order: PrepareOrder, cid: str) -> Observation:
            fate = SCRIPTS[_script_of(order)][1]
            assert fate is not None
            sim.finish(order.ref.member_id, *fate)
            return await until(runtime, cid, "exited")

        async def same() -> MemberRuntime:
            return sim

        yield Rig(sim, node, "sha256:" + "ab" * 32, job_id, finish, same)
        return
    host = engine
    pinning = DockerBackend(host)
    try:
        image = (await pinning.pin(BUSYBOX)).digest
    finally:
        await pinning.close()
    daemons = [NodeExecutor(node, host)]

    async def exits(runtime: MemberRuntime, order: PrepareOrder, cid: str) -> Observation:
        return await until(runtime, cid, "exited")

    async def restart() -> MemberRuntime:
        await daemons[-1].close()  # its containers live on
        daemons.append(NodeExecutor(node, host))
        return daemons[-1]

    try:
        yield Rig(daemons[0], node, image, job_id, exits, restart)
    finally:
        await remove_labelled(host, job_id)
        await daemons[-1].close()


async def test_prepare_creates_without_starting_and_start_commits_once(rig: Rig) -> None:
    rt, o = rig.runtime, rig.order("exit3")
    stages: list[str] = []
    cid = await rt.prepare(o, None, lambda stage, share, detail: stages.append(stage))
    assert rig.stage in stages
    assert await rt.observe(cid) == Observation("starting")  # created, never started
    created = await rt.found(cid)
    assert created is not None and created.ref == o.ref and not created.started
    assert (created.job_id, created.image) == (o.job_id, o.image)
    await rt.start(cid)
    obs = await rig.ended(rt, o, cid)
    assert obs.exit_code == 3
    await rt.start(cid)  # a repeated commit: no second run
    assert await rt.prepare(o, None, lambda *a: None) == cid  # nor does a repeated Prepare
    assert (await rt.observe(cid)).exit_code == 3
    assert await rt.final_log(cid, 1000) == (b"ran\n", False)
    started = await rt.found(cid)
    assert started is not None and started.started


async def test_prepare_is_idempotent(rig: Rig) -> None:
    o = rig.order("sleep")
    cids = await asyncio.gather(*(rig.runtime.prepare(o, None, lambda *a: None) for _ in range(3)))
    assert len(set(cids)) == 1
    assert await rig.runtime.held(INST) == {o.ref.member_id: cids[0]}


async def test_remove_after_prepare_leaves_nothing(rig: Rig) -> None:
    rt = rig.runtime
    cid = await rt.prepare(rig.order("sleep"), None, lambda *a: None)
    await rt.remove(cid)
    assert await rt.observe(cid) == Observation("missing")
    assert await rt.found(cid) is None
    await rt.remove(cid)  # idempotent
    await rt.start(cid)  # a commit of a vanished member: nothing to start, no error
    assert await rt.held(INST) == {}


async def test_stopping_a_member_that_never_started_removes_it(rig: Rig) -> None:
    rt = rig.runtime
    cid = await rt.prepare(rig.order("sleep"), None, lambda *a: None)
    await rt.stop(cid, 5)
    assert await rt.observe(cid) == Observation("missing")
    assert await rt.held(INST) == {}


async def test_held_lists_only_its_installation(rig: Rig) -> None:
    rt = rig.runtime
    mine = rig.order("sleep", index=0)
    theirs = rig.order("sleep", index=1, installation="inst-another")
    a = await rt.prepare(mine, None, lambda *a: None)
    b = await rt.prepare(theirs, None, lambda *a: None)
    assert await rt.held(INST) == {mine.ref.member_id: a}
    assert await rt.held("inst-another") == {theirs.ref.member_id: b}


async def test_a_restarted_daemon_readopts_its_running_member(rig: Rig) -> None:
    o = rig.order("sleep")
    cid = await rig.runtime.prepare(o, None, lambda *a: None)
    await rig.runtime.start(cid)
    await until(rig.runtime, cid, "running")
    engine = await rig.runtime.engine_id()

    restarted = await rig.restart()
    assert await restarted.engine_id() == engine  # the same machine's containers
    assert await restarted.held(INST) == {o.ref.member_id: cid}
    assert await restarted.prepare(o, None, lambda *a: None) == cid  # a replayed Prepare
    await restarted.start(cid)
    assert await restarted.observe(cid) == Observation("running")
    await restarted.stop(cid, 5)
    assert (await until(restarted, cid, "exited")).exit_code == 143
    await restarted.stop(cid, 5)  # idempotent
    await restarted.remove(cid)
    assert await restarted.observe(cid) == Observation("missing")


async def test_final_log_keeps_the_tail_and_following_gives_it_all(rig: Rig) -> None:
    rt, o = rig.runtime, rig.order("count")
    cid = await rt.prepare(o, None, lambda *a: None)
    await rt.start(cid)
    assert (await rig.ended(rt, o, cid)).exit_code == 0
    assert await rt.final_log(cid, 10_000) == (COUNT, False)
    assert await rt.final_log(cid, 1000) == (COUNT[-1000:], True)
    assert b"".join([c async for c in rt.follow_logs(cid)]) == COUNT


async def test_where_a_member_s_use_is_read_is_known_only_while_it_runs(rig: Rig) -> None:
    """A runtime with processes names the member's first process and the cgroup directories
    that hold it (the container's own); the simulator's members have none to measure. Never
    while it is only created, nor once it is gone."""
    rt = rig.runtime
    cid = await rt.prepare(rig.order("sleep"), None, lambda *a: None)
    assert await rt.usage_source(cid) is None  # created, not started
    await rt.start(cid)
    await until(rt, cid, "running")
    found = await rt.usage_source(cid)
    if isinstance(rt, SimRuntime):
        assert found is None
    else:
        assert found is not None and found.pid is not None and found.pid > 1
        assert found.cgroups, "a container has cgroups of its own"
        for d in found.cgroups:
            procs = (await asyncio.to_thread(Path(d, "cgroup.procs").read_text)).split()
            assert str(found.pid) in procs, (d, procs)
    await rt.remove(cid)
    assert await rt.usage_source(cid) is None  # gone: None, no error
