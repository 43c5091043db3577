"""The Slurm backend against real Slurm clusters (tests/fixtures/slurm.py): what the backend
contract does not cover. A launch never submits an attempt twice (slurmrestd down, an answer
lost, another process); a job Slurm forgot after MinJobAge is ``unknown``, never "succeeded",
unless accounting (slurmdbd) has its record;
roles on different partitions run as one heterogeneous job; a real Ray gang gets its head and
a worker."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pwd
import shlex
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from adapters.docker.runtimes import BUSYBOX, PYTORCH_TRL
from adapters.slurm.attempt_dirs import Handle as SlurmHandle
from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from domain.catalog import Resources
from domain.errors import InvalidInput
from domain.ports import ExecutionBackend, LaunchRequest, Observation
from domain.requests import RoleSpec
from tests.fixtures.docker import make_request
from tests.fixtures.ray import RAY_ENV
from tests.fixtures.slurm import SlurmCluster, slurm_cluster_started

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.slurm]  # module clusters too


@pytest.fixture(scope="module")
def short_cluster() -> Iterator[SlurmCluster]:
    """Two partitions (debug: n1, n2; extra: n3, n4) and MinJobAge=2: finished jobs leave at
    slurmctld's next purge (at most a minute later)."""
    with slurm_cluster_started(TUNEPLANE_SLURM_MIN_JOB_AGE="2", TUNEPLANE_SLURM_SPLIT="1") as c:
        yield c


@pytest.fixture(scope="module")
def accounted_cluster() -> Iterator[SlurmCluster]:
    """With MariaDB and slurmdbd (accounting) and MinJobAge=2."""
    with slurm_cluster_started(
        TUNEPLANE_SLURM_MIN_JOB_AGE="2", TUNEPLANE_SLURM_ACCOUNTING="1"
    ) as c:
        yield c


def backend_for(cluster: SlurmCluster, shared: Path, accounting: bool = False) -> SlurmBackend:
    client = SlurmClient(SlurmEndpoint(f"unix:{cluster.socket}"))
    return SlurmBackend(client, shared, partitions={"local": "debug"}, accounting=accounting)


@pytest.fixture
async def backend(slurm_cluster: SlurmCluster, tmp_path: Path) -> AsyncIterator[SlurmBackend]:
    b = backend_for(slurm_cluster, tmp_path / "shared")
    yield b
    for handle in (await b.held()).values():
        await b.stop(handle, 0)
    await b.close()


async def request(backend: ExecutionBackend, command: str, index: int = 0) -> LaunchRequest:
    pin = await backend.pin(BUSYBOX)
    return make_request(
        f"job-{uuid.uuid4().hex[:12]}", pin, ("/bin/sh", "-c", command), member_index=index
    )


async def until(
    backend: ExecutionBackend, handle: str, status: str, within: float = 60
) -> Observation:
    deadline = time.monotonic() + within
    while (obs := await backend.observe(handle)).status != status:
        assert time.monotonic() < deadline, f"{handle} stayed {obs}"
        await asyncio.sleep(0.2)
    return obs


async def jobs_named(backend: SlurmBackend, name: str) -> list[int]:
    return [j.job_id for j in await backend.client.jobs() if j.name == name]


async def test_slurmrestd_down_then_back_submits_once(
    backend: SlurmBackend, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    req = await request(backend, "sleep 600")
    running = await request(backend, "sleep 600")
    handle = await backend.launch(running)
    await until(backend, handle, "running")
    await asyncio.to_thread(slurm_cluster.stop_daemon, "slurmrestd")
    try:
        with pytest.raises(Exception, match="cannot be reached") as caught:
            await backend.launch(req)
        assert type(caught.value).__name__ == "Unavailable"
        obs = await backend.observe(handle)  # a running member is unknown, with why
        assert obs.status == "unknown" and "slurmrestd" in obs.reason, obs
    finally:
        await asyncio.to_thread(slurm_cluster.start_slurmrestd)
    assert (await backend.observe(handle)).status == "running"
    first = await backend.launch(req)
    assert await backend.launch(req) == first
    # a control plane that restarted (no memory) and lost the answer (no job id written)
    # finds the job by its name and comment instead of submitting it again
    (backend.shared_dir / req.attempt_id / "slurm-job-id").unlink()
    other = backend_for(slurm_cluster, backend.shared_dir)
    try:
        assert await other.launch(req) == first
        assert await other.launch(dataclasses.replace(req, member_index=1, member_id="m1")) == (
            first.replace(":0:", ":1:")
        )
    finally:
        await other.close()
    assert len(await jobs_named(backend, f"tp-{req.attempt_id}")) == 1


async def test_a_job_forgotten_after_min_job_age_is_unknown(
    short_cluster: SlurmCluster, tmp_path: Path
) -> None:
    backend = backend_for(short_cluster, tmp_path / "shared")
    try:
        req = await request(backend, "echo done")
        handle = await backend.launch(req)
        assert (await until(backend, handle, "exited")).exit_code == 0
        await forgotten(backend, handle)
        obs = await backend.observe(handle)
        assert obs.status == "unknown", obs  # not "exited 0": nothing confirms the outcome
        assert "MinJobAge" in obs.reason and "no accounting" in obs.reason
    finally:
        await backend.close()


async def forgotten(backend: SlurmBackend, handle: str) -> None:
    """Wait until Slurm no longer reports the member's job (slurmctld purges every minute)."""
    job_id = int(handle.split(":")[0])
    deadline = time.monotonic() + 120
    while await backend.client.job(job_id) is not None:
        assert time.monotonic() < deadline, "Slurm never forgot the job"
        await asyncio.sleep(1)


async def test_a_forgotten_job_is_reconciled_from_accounting(
    accounted_cluster: SlurmCluster, tmp_path: Path
) -> None:
    backend = backend_for(accounted_cluster, tmp_path / "shared", accounting=True)
    try:
        ok = await backend.launch(await request(backend, "echo fine"))
        bad = await backend.launch(await request(backend, "echo failing; exit 3"))
        assert (await until(backend, bad, "exited")).exit_code == 3
        await forgotten(backend, ok)
        await forgotten(backend, bad)
        obs = await backend.observe(ok)
        assert (obs.status, obs.exit_code) == ("exited", 0), obs
        obs = await backend.observe(bad)
        assert (obs.status, obs.exit_code) == ("exited", 3), obs
        # known from accounting (without it: unknown, above), in every backend's words: the
        # task's own exit status is still in the attempt's directory
        assert obs.reason == "exited with code 3", obs
    finally:
        await backend.close()


async def test_a_job_cancelled_outside_names_who_from_accounting(
    accounted_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """slurmctld does not say who ran scancel; accounting does (kill_request_user), and the
    member's reason names them. Without accounting it says it cannot tell who."""
    counted = backend_for(accounted_cluster, tmp_path / "shared", accounting=True)
    plain = backend_for(accounted_cluster, tmp_path / "shared")
    try:
        handle = await counted.launch(await request(counted, "sleep 600"))
        await until(counted, handle, "running")
        slurm_id = str(SlurmHandle.parse(handle).job_id)  # type: ignore[union-attr]
        env = accounted_cluster.env()
        await asyncio.to_thread(subprocess.run, ["scancel", slurm_id], env=env, check=True)
        obs = await until(counted, handle, "exited")
        user = pwd.getpwuid(os.getuid()).pw_name
        assert obs.reason.startswith(f"cancelled outside TunePlane: scancel by {user}; "), obs
        said = await plain.observe(handle)
        assert said.reason.startswith(
            "cancelled outside TunePlane: scancel or a Slurm operator; "
        ), said
    finally:
        await counted.close()
        await plain.close()


async def test_roles_on_two_partitions_run_as_one_heterogeneous_job(
    short_cluster: SlurmCluster, tmp_path: Path
) -> None:
    backend = backend_for(short_cluster, tmp_path / "shared")
    try:
        base = await request(backend, "echo rank=$RANK world=$WORLD_SIZE node=$SLURMD_NODENAME")
        roles = (
            RoleSpec("head", "debug/cpu:1", "debug", 1, Resources(cpus=1, memory_mb=256)),
            RoleSpec("workers", "extra/cpu:2", "extra", 2, Resources(cpus=2, memory_mb=256)),
        )
        spec = dataclasses.replace(base.spec, roles=roles)
        reqs = [
            dataclasses.replace(base, spec=spec, member_index=i, member_id=f"{base.member_id}-{i}")
            for i in range(3)
        ]
        handles = [await backend.launch(r) for r in reqs]
        assert len({h.split(":")[0] for h in handles}) == 1  # one Slurm job
        for h in handles:
            assert (await until(backend, h, "exited")).exit_code == 0
        logs = [
            b"".join([c async for c in backend.logs(h, follow=False)]).decode() for h in handles
        ]
        nodes = []
        for rank, log in enumerate(logs):
            assert f"rank={rank} world=3" in log, logs
            nodes.append(log.rsplit("node=", 1)[1].split()[0])
        assert nodes[0] in ("n1", "n2") and {nodes[1], nodes[2]} == {"n3", "n4"}, nodes
    finally:
        await backend.close()


DRIVER = """
import ray, time
ray.init()  # the head this member started
for _ in range(120):
    if len([n for n in ray.nodes() if n["Alive"]]) == 2:
        break
    time.sleep(0.5)
print("nodes", len([n for n in ray.nodes() if n["Alive"]]))

@ray.remote
def where(i):
    import socket, os
    return i * i, os.environ.get("TUNEPLANE_MEMBER_INDEX")

print("squares", sum(s for s, _ in ray.get([where.remote(i) for i in range(20)])))
"""


async def test_a_real_ray_gang_gets_a_head_and_a_worker(
    backend: SlurmBackend, ray_bin: Path
) -> None:
    """Member 0 starts the Ray head and then the driver; member 1 joins it as a worker and
    blocks until stopped (the supervisor stops a Ray gang's workers once its driver ended)."""
    command = f"{ray_bin}/python -c {shlex.quote(DRIVER)}"
    req = await request(backend, command)
    runtime = dataclasses.replace(req.spec.runtime, process_model="ray")
    role = dataclasses.replace(req.spec.roles[0], members=2)
    env = {**req.spec.env, **RAY_ENV, "PATH": f"{ray_bin}:/usr/sbin:/usr/bin:/sbin:/bin"}
    spec = dataclasses.replace(req.spec, runtime=runtime, roles=(role,), env=env)
    reqs = [
        dataclasses.replace(req, spec=spec, member_index=i, member_id=f"{req.member_id}-{i}")
        for i in range(2)
    ]
    driver, worker = [await backend.launch(r) for r in reqs]
    done = await until(backend, driver, "exited", within=120)  # while its worker runs on
    log = b"".join([c async for c in backend.logs(driver, follow=False)]).decode()
    assert done.exit_code == 0, log
    assert "nodes 2" in log and f"squares {sum(i * i for i in range(20))}" in log, log
    assert (await backend.observe(worker)).status == "running"  # serving until stopped
    await backend.stop(worker, 5)
    stopped = await until(backend, worker, "exited", within=60)
    worker_log = b"".join([c async for c in backend.logs(worker, follow=False)]).decode()
    assert "ray start --address" in worker_log or "Ray runtime started" in worker_log, worker_log
    assert stopped.exit_code != 0  # stopped, as the supervisor records for a Ray worker
    # nothing of Ray is left on the nodes: the head and the worker ran in their tasks
    pgrep = ["pgrep", "-f", str(ray_bin)]
    leftover = await asyncio.to_thread(subprocess.run, pgrep, capture_output=True, text=True)
    assert leftover.stdout == "", leftover.stdout


async def test_a_refused_submission_fails_the_launch_with_slurms_words(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    client = SlurmClient(SlurmEndpoint(f"unix:{slurm_cluster.socket}"))
    backend = SlurmBackend(client, tmp_path / "shared", partitions={"local": "no-such-partition"})
    try:
        req = await request(backend, "true")
        with pytest.raises(InvalidInput, match=r"Slurm refused the job .*Invalid partition"):
            await backend.launch(req)
        assert not (backend.shared_dir / req.attempt_id).exists()  # nothing left behind
        assert await jobs_named(backend, f"tp-{req.attempt_id}") == []
    finally:
        await backend.close()


async def test_logs_follow_a_running_member_until_it_exits(backend: SlurmBackend) -> None:
    req = await request(backend, "echo first; sleep 2; echo second >&2; exit 4")
    handle = await backend.launch(req)
    await until(backend, handle, "running")
    chunks = [c async for c in backend.logs(handle, follow=True)]  # returns once it exited
    text = b"".join(chunks).decode()
    assert "first" in text and "second" in text, text
    assert (await backend.observe(handle)).exit_code == 4
    await backend.release(handle)
    assert (await backend.observe(handle)).status == "missing"
    assert not (backend.shared_dir / req.attempt_id).exists()  # the last member released


async def test_a_pin_leaves_the_image_s_package_list_out(backend: SlurmBackend) -> None:
    """Members run on the host, not in the image: its package list (docs/runtimes.md, "Contents
    drift") would compare the host's Python with the image's lock; the frameworks stay."""
    pin = await backend.pin(PYTORCH_TRL)
    assert PYTORCH_TRL.packages and pin.packages == {} and "packages" not in pin.to_dict()
    assert pin.frameworks == PYTORCH_TRL.frameworks and pin.python == "3.11"
