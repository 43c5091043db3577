"""The host-process executor's own behaviour (adapters/node/processes.py) beyond the
MemberRuntime contract (tests/contract/test_member_runtime.py): GPUs bound by UUID, a job's
runtime directory on PATH, the Job Capsule's check, a prepare that fails leaving nothing, the
supervisor killed -9 (an end is proved, its code lost), a member that forks away from its
process group, and the limits."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from adapters.node.processes import ProcessExecutor
from domain.errors import InvalidInput
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef
from domain.ports import Observation
from tests.support.host_processes import process_isolation

NODE = "n-proc"
INST = "inst-proc"


def order(command: tuple[str, ...], **kw: object) -> PrepareOrder:
    member = f"mem-{uuid.uuid4().hex[:10]}"
    fields: dict[str, object] = {
        "ref": MemberRef(f"att-{member[4:]}", member, 0, 1),
        "node": NODE,
        "job_id": f"job-{member[4:]}",
        "image": "sha256:" + "ef" * 32,
        "command": command,
        "env": {},
        "cpus": 0.5,
        "memory_mb": 128,
        "gpu_indices": (),
        "source_digest": None,
        "members": 1,
        "process_model": "single-process",
        "check_port": 0,
        "installation": INST,
    }
    fields.update(kw)
    return PrepareOrder(**fields)  # type: ignore[arg-type]


def exists(path: str) -> bool:
    return os.path.exists(path)


def runs(pid: int) -> bool:
    """The process exists and is no zombie (a zombie's entry goes once its parent reaps it)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.fixture
def executor(tmp_path: Path) -> ProcessExecutor:
    tmp_path.chmod(0o755)
    return ProcessExecutor(
        NODE,
        tmp_path / "state" / "processes",
        tmp_path / "state",
        process_isolation(NODE),
        gpu_uuids={0: "GPU-aaaaaaaa-0000-0000-0000-000000000000", 3: "GPU-dddd"},
    )


async def run(executor: ProcessExecutor, o: PrepareOrder, source: bytes | None = None) -> str:
    cid = await executor.prepare(o, source)
    await executor.start(cid)
    deadline = time.monotonic() + 30
    while (obs := await executor.observe(cid)).status != "exited":
        assert time.monotonic() < deadline, obs
        await asyncio.sleep(0.05)
    return cid


async def output(executor: ProcessExecutor, cid: str) -> str:
    return (await executor.final_log(cid, 100_000))[0].decode()


async def test_gpus_are_bound_by_uuid_and_a_runtime_directory_comes_first(
    executor: ProcessExecutor, tmp_path: Path
) -> None:
    env_bin = Path(tempfile.mkdtemp(prefix="tp-runtime-", dir="/var/tmp"))  # members: own /tmp
    os.chmod(env_bin, 0o755)
    (env_bin / "trainer").write_text("#!/bin/sh\necho trainer from the runtime\n")
    (env_bin / "trainer").chmod(0o755)
    executor.runtime_dirs["mine"] = str(env_bin)
    o = order(
        ("sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"; trainer'),
        gpu_indices=(3, 0),
        env={"TUNEPLANE_RUNTIME": "mine"},
    )
    cid = await run(executor, o)
    said = await output(executor, cid)
    assert "[GPU-dddd,GPU-aaaaaaaa-0000-0000-0000-000000000000]" in said
    assert "trainer from the runtime" in said
    shutil.rmtree(env_bin)


async def test_a_gpu_the_node_does_not_have_is_a_no_vote_leaving_nothing(
    executor: ProcessExecutor,
) -> None:
    with pytest.raises(InvalidInput, match="GPUs 5 are not GPUs of node n-proc"):
        await executor.prepare(order(("true",), gpu_indices=(0, 5)), None)
    assert await executor.held(INST) == {}


async def test_an_unsafe_or_unreadable_source_leaves_nothing(executor: ProcessExecutor) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    for bad in (buf.getvalue(), b"not a tar at all" * 100, b"\x1f\x8bnot gzip"):
        with pytest.raises(InvalidInput):
            await executor.prepare(order(("true",)), bad)
    assert await executor.held(INST) == {}
    assert [p.name for p in executor.root.iterdir()] == []


async def test_a_capsule_changed_after_the_commit_is_refused_by_the_runner(
    executor: ProcessExecutor,
) -> None:
    from domain.capsule import RUNNER

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, body in (
            ("tuneplane/capsule/entry.sh", b"echo ran\n"),
            ("tuneplane/capsule/SHA256SUMS", b"0" * 64 + b"  entry.sh\n"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    o = order(("/bin/sh", RUNNER), capsule=True, env={"TUNEPLANE_CAPSULE_DIGEST": "sha256:x"})
    cid = await executor.prepare(o, buf.getvalue())
    await executor.start(cid)
    # no runner.sh in this capsule: the member cannot start its check, and never runs entry.sh
    deadline = time.monotonic() + 30
    while (obs := await executor.observe(cid)).status != "exited":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert obs.exit_code != 0 and "ran" not in await output(executor, cid)


async def sleeping(executor: ProcessExecutor) -> tuple[str, Path, dict[str, Any]]:
    """A started member that sleeps: its id, its directory and its start record."""
    cid = await executor.prepare(order(("sleep", "600")), None)
    await executor.start(cid)
    path = executor.root / cid.removeprefix("proc-")
    return cid, path, json.loads((path / "started.json").read_text())


async def test_a_killed_supervisor_is_an_end_proved_with_its_code_lost(
    executor: ProcessExecutor,
) -> None:
    cid, _, started = await sleeping(executor)
    assert await executor.observe(cid) == Observation("running")
    os.kill(started["shim_pid"], signal.SIGKILL)
    await asyncio.sleep(0.2)
    assert await executor.observe(cid) == Observation("running")  # the member itself runs on
    os.kill(started["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (obs := await executor.observe(cid)).status == "running":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert obs.status == "exited" and obs.exit_code is None
    assert "its exit code is lost" in obs.reason
    await executor.remove(cid)


async def test_a_pid_reused_by_another_process_is_not_the_member(
    executor: ProcessExecutor,
) -> None:
    cid, path, started = await sleeping(executor)
    os.kill(started["shim_pid"], signal.SIGKILL)
    os.kill(started["pid"], signal.SIGKILL)
    await asyncio.sleep(0.3)
    started["pid"] = os.getpid()  # a live process, started at another time
    (path / "started.json").write_text(json.dumps(started))
    obs = await executor.observe(cid)
    assert obs.status == "exited" and "lost" in obs.reason
    await executor.remove(cid)


async def test_stop_ends_processes_that_left_the_process_group(
    executor: ProcessExecutor, tmp_path: Path
) -> None:
    if executor.isolation.cgroups.mode == "none":
        pytest.skip("no cgroups on this host: a member that leaves its group is not followed")
    o = order(("sh", "-c", "setsid sleep 600 & echo child=$!; sleep 600"))
    cid = await executor.prepare(o, None)
    await executor.start(cid)
    deadline = time.monotonic() + 10
    while "child=" not in (said := await output(executor, cid)):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    child = int(said.split("child=")[1].split()[0])
    await executor.stop(cid, 1)
    assert (await executor.observe(cid)).status == "exited"
    deadline = time.monotonic() + 5
    while runs(child):
        assert time.monotonic() < deadline, f"{child} survived the stop"
        await asyncio.sleep(0.05)
    await executor.remove(cid)


async def test_limits_are_set_in_the_members_cgroups(executor: ProcessExecutor) -> None:
    if executor.isolation.cgroups.mode == "none":
        pytest.skip(f"no cgroups here: {executor.isolation.cgroups.why}")
    cid = await executor.prepare(order(("true",), cpus=0.25, memory_mb=96), None)
    record = json.loads((executor.root / cid.removeprefix("proc-") / "member.json").read_text())
    values = {}
    for d in record["cgroups"]:
        for name in ("cpu.max", "memory.max", "cpu.cfs_quota_us", "memory.limit_in_bytes"):
            if (Path(d) / name).exists():
                values[name] = (Path(d) / name).read_text().split()[0]
    if executor.isolation.cgroups.mode == "v2":
        assert values == {"cpu.max": "25000", "memory.max": str(96 << 20)}
    else:
        assert values == {"cpu.cfs_quota_us": "25000", "memory.limit_in_bytes": str(96 << 20)}
    await executor.remove(cid)
    assert not any(map(exists, record["cgroups"]))


@pytest.mark.parametrize("damaged", ["member.json", "started.json", "both"])
async def test_damaged_records_of_a_running_member_never_read_as_its_end(
    executor: ProcessExecutor, damaged: str
) -> None:
    cid, path, started = await sleeping(executor)
    for name in ("member.json", "started.json") if damaged == "both" else (damaged,):
        (path / name).write_bytes(b"\x00{not json")
    assert (await executor.observe(cid)).status == "running"  # its shim still supervises it
    assert cid in (await executor.held(INST)).values()  # listed, not proved gone by omission
    os.kill(started["shim_pid"], signal.SIGKILL)  # now only the process itself is left
    await asyncio.sleep(0.2)
    obs = await executor.observe(cid)
    assert obs.status in ("running", "unknown"), obs  # never an end while it may run
    os.kill(started["pid"], signal.SIGKILL)
    await executor.remove(cid)
