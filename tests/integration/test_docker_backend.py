"""DockerBackend against a real engine (see tests/fixtures/docker.py)."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapters.container_engine.engine import EngineError
from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import BUSYBOX
from domain.catalog import RuntimePin, RuntimeSpec
from domain.errors import InvalidInput, NotFound, Unavailable
from domain.ports import Observation
from entrypoints.settings import Settings
from tests.fixtures.docker import (
    DOCKERD_SCRIPT,
    containers_of,
    engine_answers,
    engine_call,
    make_request,
    wait_for_status,
)

pytestmark = pytest.mark.integration


def targz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def read_logs(backend: DockerBackend, handle: str, follow: bool = False) -> bytes:
    return b"".join([chunk async for chunk in backend.logs(handle, follow=follow)])


async def test_source_archive_stdout_stderr_and_exit_code(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    source = targz({"data/hello.txt": b"from-the-archive\n", "run.sh": b"echo script-ran\n"})
    script = "cat data/hello.txt; sh run.sh; pwd; echo to-stderr >&2; exit 3"
    request = make_request(docker_job_id, busybox_pin, ("sh", "-c", script), source=source)
    handle = await docker_backend.launch(request)

    obs = await wait_for_status(docker_backend, handle, "exited")
    assert obs.exit_code == 3
    logs = await read_logs(docker_backend, handle)
    for expected in (b"from-the-archive\n", b"script-ran\n", b"/workspace\n", b"to-stderr\n"):
        assert expected in logs

    (info,) = await containers_of(docker_backend.host, docker_job_id)
    assert info["Image"] == busybox_pin.digest  # runs exactly the pinned image
    assert info["Name"] == f"/tp-{request.member_id}"
    labels = info["Config"]["Labels"]
    assert labels["tuneplane.job"] == docker_job_id
    assert labels["tuneplane.attempt"] == request.attempt_id
    assert labels["tuneplane.member"] == request.member_id
    host_config = info["HostConfig"]
    assert host_config["NanoCpus"] == 1_000_000_000
    assert host_config["Memory"] == 256 * 1024 * 1024
    assert host_config["NetworkMode"] == "none"


async def test_environment_arrives(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    cmd = 'echo "$FOO|$TUNEPLANE_JOB_ID|$TUNEPLANE_ATTEMPT_ID|$TUNEPLANE_MEMBER_INDEX"'
    request = make_request(
        docker_job_id, busybox_pin, ("sh", "-c", cmd), env={"FOO": "bar baz"}, member_index=2
    )
    handle = await docker_backend.launch(request)
    await wait_for_status(docker_backend, handle, "exited")
    expected = f"bar baz|{docker_job_id}|{request.attempt_id}|2\n".encode()
    assert await read_logs(docker_backend, handle) == expected


async def test_launch_is_idempotent_and_never_starts_twice(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    request = make_request(docker_job_id, busybox_pin, ("sh", "-c", "echo ran"))
    handles = await asyncio.gather(*(docker_backend.launch(request) for _ in range(3)))
    assert len(set(handles)) == 1
    await wait_for_status(docker_backend, handles[0], "exited")
    again = await docker_backend.launch(request)  # after it exited: no restart
    assert again == handles[0]
    other = DockerBackend(docker_backend.host)  # a second launcher (e.g. after a restart)
    try:
        assert await other.launch(request) == handles[0]
    finally:
        await other.close()
    await asyncio.sleep(0.5)
    assert len(await containers_of(docker_backend.host, docker_job_id)) == 1
    assert await read_logs(docker_backend, handles[0]) == b"ran\n"


async def test_stop_ends_a_sleeping_member_within_the_grace(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    handle = await docker_backend.launch(make_request(docker_job_id, busybox_pin, ("sleep", "600")))
    await wait_for_status(docker_backend, handle, "running")
    started = time.monotonic()
    await docker_backend.stop(handle, grace_seconds=5)
    assert time.monotonic() - started < 5  # SIGTERM suffices: it did not wait for the kill
    obs = await docker_backend.observe(handle)
    assert obs == Observation("exited", 143, "killed by SIGTERM")
    await docker_backend.stop(handle, grace_seconds=5)  # idempotent on an exited member


async def test_stop_kills_a_member_that_ignores_sigterm(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    cmd = ("sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done")
    handle = await docker_backend.launch(make_request(docker_job_id, busybox_pin, cmd))
    await wait_for_status(docker_backend, handle, "running")
    started = time.monotonic()
    await docker_backend.stop(handle, grace_seconds=1.5)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 10
    assert await docker_backend.observe(handle) == Observation("exited", 137, "killed by SIGKILL")


@pytest.mark.parametrize(
    ("command", "code", "by"),
    [
        ("kill", 137, "docker kill (SIGKILL)"),  # POST /kill: SIGKILL
        ("stop?t=5", 143, "docker stop (SIGTERM)"),
    ],
)
async def test_an_end_tuneplane_did_not_ask_for_says_so(
    docker_backend: DockerBackend,
    busybox_pin: RuntimePin,
    docker_job_id: str,
    docker_engine: str,
    command: str,
    code: int,
    by: str,
) -> None:
    """Issue 19, item 6: `docker kill` or `docker stop` behind TunePlane's back is named in
    the reason, as every backend names an outside end; TunePlane's own stop is not."""
    handle = await docker_backend.launch(make_request(docker_job_id, busybox_pin, ("sleep", "600")))
    await wait_for_status(docker_backend, handle, "running")
    path = f"/containers/{handle}/{command}"
    sent = await asyncio.to_thread(engine_call, docker_backend.host, "POST", path)
    assert sent.status_code in (204, 304), sent.text
    obs = await wait_for_status(docker_backend, handle, "exited")
    assert obs.exit_code == code
    if docker_engine == "docker":  # Podman's events may not carry the signal
        assert obs.reason == f"cancelled outside TunePlane: {by}"
    else:
        assert (
            obs.reason.startswith("cancelled outside TunePlane: docker")
            or "killed by" in obs.reason
        )


async def test_release_removes_the_container(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    handle = await docker_backend.launch(make_request(docker_job_id, busybox_pin, ("true",)))
    await wait_for_status(docker_backend, handle, "exited")
    await docker_backend.release(handle)
    assert await docker_backend.observe(handle) == Observation("missing")
    assert await containers_of(docker_backend.host, docker_job_id) == []
    await docker_backend.release(handle)  # idempotent
    await docker_backend.stop(handle, 1)  # missing is fine
    with pytest.raises(NotFound):
        await read_logs(docker_backend, handle)


async def test_observe_of_an_unknown_handle_is_missing(docker_backend: DockerBackend) -> None:
    assert await docker_backend.observe("0" * 64) == Observation("missing")
    assert await docker_backend.observe("tp-no-such-member") == Observation("missing")


async def test_out_of_memory_is_reported(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str, docker_engine: str
) -> None:
    cmd = ("sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}")
    handle = await docker_backend.launch(
        make_request(docker_job_id, busybox_pin, cmd, memory_mb=32)
    )
    obs = await wait_for_status(docker_backend, handle, "exited", within=60)
    assert obs.exit_code == 137
    if docker_engine == "docker":  # Podman 4.3 on cgroup v1 does not set State.OOMKilled
        assert obs.reason == "OOMKilled"


async def test_a_missing_command_is_an_exit_with_the_reason(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str, docker_engine: str
) -> None:
    request = make_request(docker_job_id, busybox_pin, ("/no/such/program",))
    handle = await docker_backend.launch(request)
    obs = await wait_for_status(docker_backend, handle, "exited")
    logs = await read_logs(docker_backend, handle)
    assert b"No such file or directory" in logs  # from the init process (tini / catatonit)
    if docker_engine == "docker":
        assert (obs.exit_code, obs.reason) == (127, "exit code 127: command not found")
    else:  # Podman's catatonit exits 1
        assert obs.exit_code == 1
    assert await docker_backend.launch(request) == handle  # no second start attempt


async def test_a_broken_source_archive_is_refused_and_leaves_nothing(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    request = make_request(docker_job_id, busybox_pin, ("true",), source=b"\x1f\x8bnot gzip")
    with pytest.raises(InvalidInput) as err:
        await docker_backend.launch(request)
    assert err.value.field == "intent.source"
    assert await containers_of(docker_backend.host, docker_job_id) == []


@pytest.mark.parametrize(("cpus", "memory_mb"), [(1e-7, 256), (0.001, 256), (1.0, 0), (1.0, 5)])
async def test_a_member_below_the_smallest_limits_is_refused_and_leaves_nothing(
    docker_backend: DockerBackend,
    busybox_pin: RuntimePin,
    docker_job_id: str,
    cpus: float,
    memory_mb: int,
) -> None:
    """Issue 18, defect 8: cpu:0.0000001 became NanoCpus=0, Memory=0 (no limit at all)."""
    request = make_request(docker_job_id, busybox_pin, ("true",), cpus=cpus, memory_mb=memory_mb)
    with pytest.raises(InvalidInput, match="limit") as err:
        await docker_backend.launch(request)
    assert "preview it again" in err.value.fix
    assert await containers_of(docker_backend.host, docker_job_id) == []


async def test_the_smallest_member_runs_with_both_limits(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    request = make_request(docker_job_id, busybox_pin, ("true",), cpus=0.01, memory_mb=6)
    handle = await docker_backend.launch(request)
    assert (await wait_for_status(docker_backend, handle, "exited")).exit_code == 0
    (info,) = await containers_of(docker_backend.host, docker_job_id)
    host = info["HostConfig"]
    assert (host["NanoCpus"], host["Memory"]) == (10_000_000, 6 * 1024 * 1024)


async def test_logs_follow_streams_lines_as_they_are_written(
    docker_backend: DockerBackend, busybox_pin: RuntimePin, docker_job_id: str
) -> None:
    cmd = ("sh", "-c", "echo first; sleep 3; echo second >&2; sleep 1; echo third")
    handle = await docker_backend.launch(make_request(docker_job_id, busybox_pin, cmd))
    received: list[tuple[bytes, str]] = []
    async with asyncio.timeout(30):
        async for chunk in docker_backend.logs(handle, follow=True):
            received.append((chunk, (await docker_backend.observe(handle)).status))
    assert b"".join(c for c, _ in received) == b"first\nsecond\nthird\n"
    assert received[0] == (b"first\n", "running")  # arrived while the member still ran
    assert (await docker_backend.observe(handle)).status == "exited"


async def test_pin_resolves_the_image_id(docker_backend: DockerBackend) -> None:
    pin = await docker_backend.pin(BUSYBOX)
    assert pin == RuntimePin("busybox", BUSYBOX.image, pin.digest, None, "single-process")
    assert pin.digest.startswith("sha256:") and len(pin.digest) == 71


async def test_pin_of_a_missing_image_says_how_to_build_it(docker_backend: DockerBackend) -> None:
    runtime = RuntimeSpec("ghost", "localhost/tuneplane/no-such-image:0", None, "single-process")
    with pytest.raises(InvalidInput) as err:
        await docker_backend.pin(runtime)
    assert "tp runtime build ghost" in err.value.fix


async def test_an_engine_refusal_keeps_its_status_and_words(docker_backend: DockerBackend) -> None:
    with pytest.raises(EngineError) as err:
        await docker_backend.api.json("containers/tp-no-such-member/json")
    assert err.value.status == 404
    assert "tp-no-such-member" in err.value.message
    assert await docker_backend.image("localhost/tuneplane/no-such-image:1") is None


@pytest.fixture(params=["no-socket", "refused"])
def dead_host(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = tmp_path / "docker.sock"
    if request.param == "refused":  # a socket file nobody listens on (a crashed engine)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.close()
    return f"unix://{path}"


@pytest.mark.parametrize(
    "call",
    ["ping", "pin", "launch", "observe", "stop", "logs", "release"],
)
async def test_unreachable_engine_is_unavailable(
    dead_host: str, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", dead_host)
    backend = DockerBackend(Settings.from_env().docker_host)  # from $DOCKER_HOST
    assert backend.host == dead_host
    pin = RuntimePin("busybox", BUSYBOX.image, "sha256:" + "0" * 64, None, "single-process")
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "ping": lambda: backend.ping(),
        "pin": lambda: backend.pin(BUSYBOX),
        "launch": lambda: backend.launch(make_request("job-x", pin, ("true",))),
        "observe": lambda: backend.observe("abc"),
        "stop": lambda: backend.stop("abc", 1),
        "logs": lambda: anext(aiter(backend.logs("abc", follow=False))),
        "release": lambda: backend.release("abc"),
    }
    try:
        with pytest.raises(Unavailable) as err:
            await calls[call]()
    finally:
        await backend.close()
    assert "DOCKER_HOST" in err.value.fix
    assert "bash deploy/dev/dockerd.sh" in err.value.fix
    assert dead_host in err.value.message


def test_dockerd_script_starts_once_and_reuses_the_engine(tmp_path: Path, docker_host: str) -> None:
    run = Path("/tmp") / f"tp-dockerd-{os.getpid()}"  # short: unix socket paths are limited
    host = f"unix://{run}/docker.sock"
    env = {**os.environ, "DOCKER_HOST": host, "TUNEPLANE_DOCKER_STATE": str(tmp_path / "state")}
    first = subprocess.run(["bash", str(DOCKERD_SCRIPT)], env=env, capture_output=True, text=True)
    pidfile = run / "dockerd.pid"
    try:
        assert first.returncode == 0, first.stderr
        assert first.stdout == f"export DOCKER_HOST={host}\n"
        assert engine_answers(host)
        pid = int(pidfile.read_text())
        again = subprocess.run(
            ["bash", str(DOCKERD_SCRIPT)], env=env, capture_output=True, text=True
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout == first.stdout
        assert "nothing to do" in again.stderr
        assert int(pidfile.read_text()) == pid  # the same daemon
    finally:
        if pidfile.exists():
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
            for _ in range(150):
                if not _alive(pid):
                    break
                time.sleep(0.1)
        shutil.rmtree(run, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
