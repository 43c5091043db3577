"""NodeExecutor (adapters/node/executor.py) against a real engine (see tests/fixtures/docker.py):
prepare creates without starting, start is the commit, remove the abort; held() sees only its
node's containers of its installation; a restarted daemon re-adopts instead of creating again."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import socket
import tarfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiodocker
import pytest
import pytest_asyncio
from aiohttp import web

from adapters.node.executor import NodeExecutor, PullProgress
from domain.catalog import RuntimePin
from domain.errors import Conflict, InvalidInput
from domain.node_daemon_ports import MemberRuntime
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef
from domain.ports import Observation
from tests.fixtures.docker import containers_of, remove_labelled
from tests.support.archives import member_bytes

pytestmark = pytest.mark.integration

INST = "inst-test"  # the installation these members belong to


def targz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def order(
    job_id: str,
    image: str,
    command: tuple[str, ...],
    *,
    index: int = 0,
    env: dict[str, str] | None = None,
    gpus: tuple[int, ...] = (),
    node: str = "n1",
    installation: str = INST,
) -> PrepareOrder:
    ref = MemberRef(f"att-{job_id[4:]}-1", f"mem-{job_id[4:]}-{index}", index, 7)
    return PrepareOrder(
        ref=ref,
        node=node,
        job_id=job_id,
        image=image,
        command=command,
        env=dict(env or {}),
        cpus=1.0,
        memory_mb=256,
        gpu_indices=gpus,
        source_digest=None,
        members=1,
        process_model="single-process",
        check_port=0,
        installation=installation,
    )


@pytest_asyncio.fixture
async def executor(docker_host: str, docker_job_id: str) -> AsyncIterator[NodeExecutor]:
    ex = NodeExecutor(f"node-{uuid.uuid4().hex[:8]}", docker_host)
    try:
        yield ex
    finally:
        await remove_labelled(docker_host, docker_job_id)
        await ex.close()


async def wait_for(ex: NodeExecutor, cid: str, status: str, within: float = 30) -> Observation:
    deadline = time.monotonic() + within
    while (obs := await ex.observe(cid)).status != status:
        assert time.monotonic() < deadline, f"{cid} is {obs}, not {status}"
        await asyncio.sleep(0.1)
    return obs


def test_it_is_a_member_runtime() -> None:
    runtime: MemberRuntime = NodeExecutor("n1", "unix:///nonexistent.sock")
    assert callable(runtime.port_free)  # typed as the port (mypy checks the assignment)


async def test_prepare_creates_without_starting_and_start_commits(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    stages: list[str] = []
    o = order(docker_job_id, busybox_pin.digest, ("sh", "-c", "echo ran; exit 3"))
    cid = await executor.prepare(o, None, lambda stage, share, detail: stages.append(stage))
    assert "creating the container" in stages
    await asyncio.sleep(0.5)
    assert await executor.observe(cid) == Observation("starting")  # created, never started
    (info,) = await containers_of(executor.host, docker_job_id)
    assert info["State"]["Status"] == "created"
    labels = info["Config"]["Labels"]
    assert labels["tuneplane.node"] == executor.node and labels["tuneplane.epoch"] == "7"
    assert labels["tuneplane.member"] == o.ref.member_id
    assert labels["tuneplane.attempt"] == o.ref.attempt_id
    assert labels["tuneplane.member-index"] == "0"
    assert info["Name"] == f"/tp-{o.ref.member_id}"
    host = info["HostConfig"]
    assert host["NetworkMode"] == "host" and host["Init"] is True
    assert host["NanoCpus"] == 1_000_000_000
    assert host["Memory"] == 256 * 1024 * 1024
    assert not host.get("DeviceRequests")
    assert info["Config"]["WorkingDir"] == "/workspace"

    await executor.start(cid)
    obs = await wait_for(executor, cid, "exited")
    assert obs.exit_code == 3
    started = (await containers_of(executor.host, docker_job_id))[0]["State"]["StartedAt"]
    await executor.start(cid)  # a repeated commit: no second run
    await executor.prepare(o, None, lambda *a: None)  # nor does a repeated Prepare touch it
    await asyncio.sleep(0.5)
    (info,) = await containers_of(executor.host, docker_job_id)
    assert info["State"]["StartedAt"] == started
    assert await executor.final_log(cid, 1000) == (b"ran\n", False)


async def test_prepare_is_idempotent(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    o = order(docker_job_id, busybox_pin.digest, ("true",))
    cids = await asyncio.gather(*(executor.prepare(o, None) for _ in range(3)))
    assert len(set(cids)) == 1
    again = NodeExecutor(executor.node, executor.host)  # another daemon of this node
    try:
        assert await again.prepare(o, None) == cids[0]
    finally:
        await again.close()
    assert len(await containers_of(executor.host, docker_job_id)) == 1


async def test_remove_after_prepare_leaves_nothing(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    cid = await executor.prepare(order(docker_job_id, busybox_pin.digest, ("true",)), None)
    await executor.remove(cid)
    assert await executor.observe(cid) == Observation("missing")
    assert await containers_of(executor.host, docker_job_id) == []
    await executor.remove(cid)  # idempotent
    await executor.start(cid)  # a commit of a vanished member: nothing to start, no error
    assert await executor.held(INST) == {}


async def test_held_sees_only_this_nodes_containers(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    other = NodeExecutor(f"{executor.node}-other", executor.host)
    try:
        mine = order(docker_job_id, busybox_pin.digest, ("true",), index=0)
        theirs = order(docker_job_id, busybox_pin.digest, ("true",), index=1)
        a = await executor.prepare(mine, None)
        b = await other.prepare(theirs, None)
        assert await executor.held(INST) == {mine.ref.member_id: a}
        assert await other.held(INST) == {theirs.ref.member_id: b}
        with pytest.raises(Conflict, match="belongs to node"):  # the name is the other's
            await executor.prepare(theirs, None)
    finally:
        await other.close()


async def test_source_and_environment_arrive(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str, tmp_path: Path
) -> None:
    archive = targz({"data/hello.txt": b"from-the-archive\n", "run.sh": b"echo script-ran\n"})
    script = 'cat data/hello.txt; sh run.sh; pwd; echo "$FOO|$TUNEPLANE_MEMBER_INDEX"'
    env = {"FOO": "bar baz", "TUNEPLANE_MEMBER_INDEX": "1"}
    first = order(docker_job_id, busybox_pin.digest, ("sh", "-c", script), index=1, env=env)
    (tmp_path / "src.tar.gz").write_bytes(archive)
    by_path = order(docker_job_id, busybox_pin.digest, ("cat", "data/hello.txt"), index=2)
    cids = [
        await executor.prepare(first, archive),
        await executor.prepare(by_path, tmp_path / "src.tar.gz"),
    ]
    for cid in cids:
        await executor.start(cid)
        await wait_for(executor, cid, "exited")
    logs = [(await executor.final_log(cid, 10_000))[0] for cid in cids]
    assert logs[0] == b"from-the-archive\nscript-ran\n/workspace\nbar baz|1\n"
    assert logs[1] == b"from-the-archive\n"


async def test_a_broken_source_archive_is_refused_and_leaves_nothing(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    with pytest.raises(InvalidInput, match="source archive"):
        await executor.prepare(order(docker_job_id, busybox_pin.digest, ("true",)), b"junk")
    assert await containers_of(executor.host, docker_job_id) == []


@pytest.mark.parametrize(("cpus", "memory_mb"), [(0.0, 256), (0.001, 256), (1.0, 0)])
async def test_a_member_below_the_smallest_limits_is_a_clear_no(
    executor: NodeExecutor,
    busybox_pin: RuntimePin,
    docker_job_id: str,
    cpus: float,
    memory_mb: int,
) -> None:
    o = order(docker_job_id, busybox_pin.digest, ("true",))
    with pytest.raises(InvalidInput, match="no workload runs without CPU and memory limits"):
        await executor.prepare(dataclasses.replace(o, cpus=cpus, memory_mb=memory_mb), None)
    assert await containers_of(executor.host, docker_job_id) == []


async def test_members_use_the_hosts_network(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert executor.port_free(port)
    cmd = ("sh", "-c", f"echo hello-from-the-member | nc -l -p {port}")
    cid = await executor.prepare(order(docker_job_id, busybox_pin.digest, cmd), None)
    await executor.start(cid)
    deadline = time.monotonic() + 20
    while executor.port_free(port):  # the member's listener is on the host's network
        assert time.monotonic() < deadline, "the member never listened on the host's port"
        await asyncio.sleep(0.1)
    got = b""
    while not got:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            got = await asyncio.wait_for(reader.read(100), 5)
            writer.close()
        except OSError:
            assert time.monotonic() < deadline, "the member's port never answered"
            await asyncio.sleep(0.2)
    assert got == b"hello-from-the-member\n"
    await wait_for(executor, cid, "exited")
    assert executor.check_port_free(port)


def test_port_free_sees_a_listener() -> None:
    ex = NodeExecutor("n1", "unix:///nonexistent.sock")
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert not ex.port_free(s.getsockname()[1])
    with socket.socket(socket.AF_INET6) as s:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(("::", 0))
        s.listen()
        assert not ex.port_free(s.getsockname()[1])


async def test_a_restarted_daemon_readopts_its_running_member(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    o = order(docker_job_id, busybox_pin.digest, ("sleep", "600"))
    cid = await executor.prepare(o, None)
    await executor.start(cid)
    await wait_for(executor, cid, "running")
    await executor.close()  # the daemon dies; its containers live on

    restarted = NodeExecutor(executor.node, executor.host)
    try:
        assert await restarted.held(INST) == {o.ref.member_id: cid}
        assert await restarted.prepare(o, None) == cid  # a replayed Prepare adopts it
        await restarted.start(cid)
        assert await restarted.observe(cid) == Observation("running")
        assert len(await containers_of(executor.host, docker_job_id)) == 1
        await restarted.stop(cid, 5)
        assert (await restarted.observe(cid)).exit_code == 143
    finally:
        await restarted.close()


async def test_final_log_keeps_the_tail(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    cmd = ("sh", "-c", "i=0; while [ $i -lt 300 ]; do printf '%09d\\n' $i; i=$((i+1)); done")
    cid = await executor.prepare(order(docker_job_id, busybox_pin.digest, cmd), None)
    await executor.start(cid)
    await wait_for(executor, cid, "exited")
    everything = b"".join(b"%09d\n" % i for i in range(300))
    assert await executor.final_log(cid, 10_000) == (everything, False)
    assert await executor.final_log(cid, 1000) == (everything[-1000:], True)
    followed = b"".join([c async for c in executor.follow_logs(cid)])
    assert followed == everything


async def test_gpus_without_an_nvidia_runtime_are_a_clear_no(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    o = order(docker_job_id, busybox_pin.digest, ("true",), gpus=(0, 3))
    with pytest.raises(InvalidInput) as err:
        await executor.prepare(o, None)
    assert "no NVIDIA runtime" in err.value.message and "nvidia-ctk" in err.value.fix
    assert await containers_of(executor.host, docker_job_id) == []
    unchecked = NodeExecutor(executor.node, executor.host, gpu_check=False)
    try:  # the request names exactly the GPUs by index
        cid = await unchecked.prepare(o, None)
        (info,) = await containers_of(executor.host, docker_job_id)
        (request,) = info["HostConfig"]["DeviceRequests"]
        assert (request["Driver"], request["DeviceIDs"]) == ("nvidia", ["0", "3"])
        assert request["Capabilities"] == [["gpu"]] and not request["Count"]
        await unchecked.start(cid)  # the engine cannot bind them: an exit with its reason
        obs = await wait_for(unchecked, cid, "exited")
        assert obs.reason
    finally:
        await unchecked.close()


async def test_an_image_that_cannot_be_had_is_a_clear_no(
    executor: NodeExecutor, docker_job_id: str
) -> None:
    stages: list[tuple[str, float]] = []
    missing_id = order(docker_job_id, "sha256:" + "0" * 64, ("true",))
    with pytest.raises(InvalidInput, match="cannot be pulled"):
        await executor.prepare(missing_id, None)
    unpullable = order(docker_job_id, "127.0.0.1:9/tuneplane/nothing:1", ("true",), index=1)
    with pytest.raises(InvalidInput, match="could not pull image") as err:
        await executor.prepare(unpullable, None, lambda s, f, d: stages.append((s, f)))
    assert "registry" in err.value.fix
    assert stages == [("pulling image", 0.0)]
    assert await containers_of(executor.host, docker_job_id) == []


async def _registry(image_tar: bytes) -> tuple[web.AppRunner, int, str]:
    """A minimal registry (HTTP API v2, read-only) serving the one image of a `docker save`
    archive as ``tuneplane/pulled:1``; the engine trusts plain HTTP on 127.0.0.1."""
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    with tarfile.open(fileobj=io.BytesIO(image_tar)) as tar:
        (saved,) = json.loads(member_bytes(tar, "manifest.json"))
        config = member_bytes(tar, saved["Config"])
        layers = [gzip.compress(member_bytes(tar, p), 1) for p in saved["Layers"]]
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": add(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": add(layer),
                }
                for layer in layers
            ],
        }
    ).encode()
    mtype = "application/vnd.docker.distribution.manifest.v2+json"
    mdigest = "sha256:" + hashlib.sha256(manifest).hexdigest()

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/v2/":
            return web.json_response({})
        if path.startswith("/v2/tuneplane/pulled/manifests/"):
            headers = {"Docker-Content-Digest": mdigest, "Content-Type": mtype}
            return web.Response(body=manifest, headers=headers)
        if path.startswith("/v2/tuneplane/pulled/blobs/"):
            data = blobs.get(path.rsplit("/", 1)[1])
            if data is not None:
                return web.Response(body=data, content_type="application/octet-stream")
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, mdigest


async def test_a_missing_image_is_pulled_with_progress(
    executor: NodeExecutor, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    async with (
        aiodocker.Docker(url=executor.host) as docker,
        docker.images.export_image(busybox_pin.digest) as saved,
    ):
        image_tar = await saved.read()  # its layers are here: the pull reuses them
    runner, port, digest = await _registry(image_tar)
    image = f"127.0.0.1:{port}/tuneplane/pulled@{digest}"
    stages: list[tuple[str, float]] = []
    try:
        o = order(docker_job_id, image, ("echo", "pulled-and-ran"))
        cid = await executor.prepare(o, None, lambda s, f, d: stages.append((s, f)))
        pulls = [f for s, f in stages if s == "pulling image"]
        assert pulls[0] == 0.0 and pulls[-1] == 1.0 and len(pulls) >= 2
        assert stages[-1][0] == "creating the container"
        await executor.start(cid)
        assert (await wait_for(executor, cid, "exited")).exit_code == 0
        assert await executor.final_log(cid, 100) == (b"pulled-and-ran\n", False)
    finally:
        await remove_labelled(executor.host, docker_job_id)
        async with aiodocker.Docker(url=executor.host) as docker:
            with contextlib.suppress(aiodocker.DockerError):
                await docker.images.delete(image, force=True)
        await runner.cleanup()


def test_pull_progress_is_the_share_of_bytes_downloaded() -> None:
    p = PullProgress()
    assert p.update({"status": "Pulling fs layer", "id": "a"}) == -1.0  # sizes not known yet
    assert (
        p.update(
            {"status": "Downloading", "id": "a", "progressDetail": {"current": 10, "total": 100}}
        )
        == 0.1
    )
    assert (
        p.update(
            {"status": "Downloading", "id": "b", "progressDetail": {"current": 50, "total": 300}}
        )
        == 0.15
    )
    assert p.update({"status": "Download complete", "id": "a"}) == 0.375
    assert p.update({"status": "Pull complete", "id": "b"}) == 1.0
    assert p.update({"status": "Digest: sha256:…"}) == 1.0
