"""Runtime images built locally (no registry) and run through the local backend."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import aiodocker
import pytest

from adapters.docker import images
from adapters.docker.backend import DockerBackend
from adapters.docker.images import BuildFailed, BuildProgress, build_runtime, rootfs_name
from adapters.docker.rootfs import apt_mirror, is_static_elf
from adapters.docker.runtimes import BUSYBOX, LOCAL_RUNTIMES, PYTHON, RECIPES
from domain.catalog import RuntimeSpec
from domain.errors import InvalidInput
from domain.ports import Observation
from entrypoints.settings_loader import load
from entrypoints.settings_sections import BuildSettings
from tests.fixtures.docker import make_request, wait_for_status

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


async def run_to_exit(
    backend: DockerBackend, runtime: RuntimeSpec, job_id: str, *cmd: str, index: int = 0
) -> tuple[Observation, bytes]:
    pin = await backend.pin(runtime)
    handle = await backend.launch(make_request(job_id, pin, cmd, member_index=index))
    obs = await wait_for_status(backend, handle, "exited", within=60)
    logs = b"".join([c async for c in backend.logs(handle, follow=False)])
    return obs, logs


def test_local_runtimes_are_catalog_entries() -> None:
    names = [r.name for r in LOCAL_RUNTIMES]
    assert names == ["busybox", "python", "python-numpy", "python-torch", "pytorch-trl", "verl"]
    assert BUSYBOX.image == "localhost/tuneplane/runtime-busybox:1" and BUSYBOX.python is None
    assert PYTHON.image == "localhost/tuneplane/runtime-python:3.11" and PYTHON.python == "3.11"
    assert {(r.name, r.process_model) for r in LOCAL_RUNTIMES
            if r.process_model != "single-process"} == {
        ("pytorch-trl", "torch-process-group"), ("verl", "ray")
    }  # fmt: skip


async def test_busybox_image_runs_a_shell(
    docker_backend: DockerBackend, docker_job_id: str
) -> None:
    obs, logs = await run_to_exit(docker_backend, BUSYBOX, docker_job_id, "sh", "-c", "echo hi")
    assert (obs.status, obs.exit_code) == ("exited", 0)
    assert logs == b"hi\n"


async def test_busybox_image_has_the_usual_applets(
    docker_backend: DockerBackend, docker_job_id: str
) -> None:
    applets = "sh echo cat sleep ls env true false id tar gzip wc seq date printf grep sed awk"
    applets += " head tail mkdir rm cp mv test [ sort uniq cut tr xargs find"
    script = f"for a in {applets}; do command -v $a >/dev/null || echo missing $a; done; id -un"
    script += "; test -d /tmp -a -d /workspace && echo dirs-ok; /usr/bin/env true && echo env-ok"
    obs, logs = await run_to_exit(docker_backend, BUSYBOX, docker_job_id, "sh", "-c", script)
    assert logs == b"root\ndirs-ok\nenv-ok\n"
    assert obs.exit_code == 0


async def test_building_twice_keeps_the_image(
    docker_host: str, docker_backend: DockerBackend
) -> None:
    before = (await docker_backend.pin(BUSYBOX)).digest
    seen: list[BuildProgress] = []
    assert await build_runtime(docker_host, "busybox", seen.append) == before
    assert [p.stage for p in seen] == ["check", "exists"]


async def test_forced_build_reports_progress_and_moves_the_tag(
    docker_host: str, docker_backend: DockerBackend, tmp_path: Path
) -> None:
    previous = await _image_id_or_none(docker_backend, BUSYBOX)
    seen: list[BuildProgress] = []
    image_id = await build_runtime(
        docker_host, "busybox", seen.append, force=True, cache_dir=tmp_path
    )
    # The superseded image is left in the engine: the engine is shared with the other worker,
    # whose jobs may have been previewed on it (removing it failed test_walkthrough's job with
    # "runtime image ... is no longer in the engine" in CI). It is only untagged.
    assert previous is None or previous == image_id or await _image_exists(docker_host, previous)
    stages = [p.stage for p in seen]
    assert stages[0] == "check" and stages[-1] == "done"
    assert "rootfs" in stages
    imports = [p for p in seen if p.stage == "import"]
    assert (
        imports[-1].done
        == imports[-1].total
        == (tmp_path / rootfs_name("busybox", RECIPES["busybox"])).stat().st_size
    )
    assert (await docker_backend.pin(BUSYBOX)).digest == image_id


async def test_an_image_from_an_older_recipe_is_made_again(
    docker_host: str, docker_backend: DockerBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `python` runtime moved from python3-minimal to python3 (recipe version 2): an image
    built from the older recipe is found by its `tuneplane.inputs` label and made again, not
    kept as "already built"; the current one is kept."""
    newer = dataclasses.replace(RECIPES["busybox"], version="test-newer")
    monkeypatch.setitem(RECIPES, "busybox", newer)
    seen: list[BuildProgress] = []
    made = await build_runtime(docker_host, "busybox", seen.append, cache_dir=tmp_path)
    assert [p.stage for p in seen][:2] == ["check", "check"] and "older recipe" in seen[1].message
    assert "exists" not in [p.stage for p in seen] and seen[-1].stage == "done"
    seen.clear()
    assert await build_runtime(docker_host, "busybox", seen.append, cache_dir=tmp_path) == made
    assert [p.stage for p in seen] == ["check", "exists"]
    monkeypatch.undo()  # the real recipe: made again from it, so the engine's image is current
    assert await build_runtime(docker_host, "busybox", cache_dir=tmp_path) != made
    assert (await docker_backend.pin(BUSYBOX)).digest != made
    # the superseded image is left, untagged: while the tag named it, the other worker may have
    # previewed a job on it (see test_forced_build_reports_progress_and_moves_the_tag)
    assert await _image_exists(docker_host, made)


async def test_unknown_runtime_is_invalid_input(docker_host: str) -> None:
    with pytest.raises(InvalidInput) as err:
        await build_runtime(docker_host, "cobol")
    assert "busybox" in err.value.fix


def test_cli_entry_point_builds_and_prints_the_id(docker_host: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoints.images_cli", "build", "busybox",
         "--docker-host", docker_host],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("sha256:")
    assert "[busybox] check:" in proc.stderr


def test_host_busybox_is_static() -> None:
    assert is_static_elf(Path("/bin/busybox"))
    assert not is_static_elf(Path(sys.executable).resolve())


def test_mirror_comes_from_apt_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNEPLANE_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# http://snapshot.example/x\nURIs: http://mirror.test/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://security.test/debian-security\nSuites: bookworm-security\n"
    )
    assert apt_mirror("bookworm", tmp_path) == "http://mirror.test/debian"
    (tmp_path / "sources.list").write_text(
        "# deb http://old.test/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://one.test/debian bookworm main\n"
    )
    assert apt_mirror("bookworm", tmp_path) == "http://one.test/debian"
    monkeypatch.setenv("TUNEPLANE_DEBIAN_MIRROR", "http://override.test/debian")
    mirror = load(BuildSettings).debian_mirror
    assert apt_mirror("bookworm", tmp_path, mirror) == "http://override.test/debian"


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_python_image_builds_with_debootstrap_and_runs_python(
    docker_host: str, docker_backend: DockerBackend, docker_job_id: str, tmp_path: Path
) -> None:
    """A full build every time (fresh rootfs cache, --force): debootstrap, tidy, import."""
    previous = await _image_id_or_none(docker_backend, PYTHON)
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "bash", str(ROOT / "deploy/images/build.sh"), "python", "--force",
        "--docker-host", docker_host, "--cache-dir", str(tmp_path),
        env={**os.environ, "PYTHON": sys.executable},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    print(f"python runtime built in {time.monotonic() - started:.1f}s")
    assert b"debootstrap --variant=minbase --include=python3 bookworm" in err
    image_id = out.decode().strip()
    assert (await docker_backend.pin(PYTHON)).digest == image_id
    # The superseded image is left in the engine: the engine is shared with the other worker,
    # whose jobs may have been previewed on it (removing it failed test_walkthrough's job with
    # "runtime image ... is no longer in the engine" in CI). It is only untagged.
    assert previous is None or previous == image_id or await _image_exists(docker_host, previous)

    obs, logs = await run_to_exit(
        docker_backend, PYTHON, docker_job_id, "python", "-c", "print(1+1)"
    )
    assert (obs.exit_code, logs) == (0, b"2\n")
    obs, logs = await run_to_exit(
        docker_backend, PYTHON, docker_job_id, "python3", "--version", index=1
    )
    assert logs.startswith(b"Python 3.11.")
    # the SDK's report.log, as a job copies it next to its code (docs/telemetry.md): it failed
    # here with "No module named 'json'" when the image had python3-minimal only
    sdk = (ROOT / "adapters/sdk/report.py").read_text()
    use = sdk + (
        "\nos.environ['TUNEPLANE_METRICS_DIR'] = '/tmp/m'\n"
        "log({'train/loss': 0.5, 'bad': float('nan')}, step=3)\n"
        "print(open('/tmp/m/report-rank0.jsonl').read(), errors())\n"
    )
    obs, logs = await run_to_exit(
        docker_backend, PYTHON, docker_job_id, "python", "-c", use, index=2
    )
    assert obs.exit_code == 0, logs.decode()
    assert b'"train/loss": 0.5' in logs and b'"bad": NaN' in logs and logs.endswith(b" 0\n")


async def _image_id_or_none(backend: DockerBackend, runtime: RuntimeSpec) -> str | None:
    try:
        return (await backend.pin(runtime)).digest
    except InvalidInput:
        return None


async def _image_exists(docker_host: str, image_id: str) -> bool:
    async with aiodocker.Docker(url=docker_host) as docker:
        try:
            await docker.images.inspect(image_id)
        except aiodocker.DockerError:
            return False
        return True


async def _remove_image(docker_host: str, image_id: str) -> None:
    async with aiodocker.Docker(url=docker_host) as docker:
        await docker.images.delete(image_id)


async def test_a_runtime_pinned_by_digest_gets_that_image_or_is_refused(
    docker_backend: DockerBackend, numpy_runtime: str
) -> None:
    busybox_id = (await docker_backend.pin(BUSYBOX)).digest
    registered = dataclasses.replace(BUSYBOX, name="bb", digest=busybox_id, added_by="admin")
    assert (await docker_backend.pin(registered)).digest == busybox_id
    other = "sha256:" + "0" * 63 + "1"
    with pytest.raises(InvalidInput) as caught:
        await docker_backend.pin(dataclasses.replace(registered, digest=other))
    assert f"pins {other}, but image {BUSYBOX.image} is {busybox_id}" in caught.value.message
    assert f"--digest {busybox_id} --replace" in caught.value.fix
    # the tag names another image now, but the pinned one is still here: it is what runs
    moved = dataclasses.replace(registered, digest=numpy_runtime)
    assert (await docker_backend.pin(moved)).digest == numpy_runtime
    gone = dataclasses.replace(registered, image="localhost/tuneplane/nothing:1", digest=other)
    with pytest.raises(InvalidInput, match="is not in the local engine") as missing:
        await docker_backend.pin(gone)
    assert "docker pull localhost/tuneplane/nothing:1" in missing.value.fix


async def test_the_same_inputs_give_the_same_image_id(
    docker_host: str, docker_backend: DockerBackend, tmp_path: Path
) -> None:
    """Two forced builds from two empty caches: two root file systems made apart, one image id
    (the config is ours and fixed, the layer is the reproducible tar)."""
    ids = [
        await build_runtime(docker_host, "busybox", force=True, cache_dir=tmp_path / d)
        for d in ("one", "two")
    ]
    assert ids[0] == ids[1] == (await docker_backend.pin(BUSYBOX)).digest
    name = rootfs_name("busybox", RECIPES["busybox"])
    tars = [(tmp_path / d / name).read_bytes() for d in ("one", "two")]
    assert tars[0] == tars[1]
    async with aiodocker.Docker(url=docker_host) as docker:
        info = await docker.images.inspect(BUSYBOX.image)
    digest = "sha256:" + hashlib.sha256(tars[0]).hexdigest()
    assert info["RootFS"]["Layers"] == [digest]  # the engine's diff id is the tar's sha256
    assert info["Created"].startswith("2023-11-14T22:13:20")
    assert info["Config"]["Labels"]["tuneplane.runtime"] == "busybox"


async def test_a_damaged_cached_root_file_system_is_refused_with_the_fix(
    docker_host: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tar cut short (a full disk, a kill mid-copy) is loaded from the cache as it is: the
    engine refuses it, the build says so and how to make it again; --force does. (Under a tag
    of the test's own, so that the shared busybox image is never missing.)"""
    spec = dataclasses.replace(BUSYBOX, image=f"localhost/tuneplane/test-damaged:{os.getpid()}")
    monkeypatch.setattr(images, "_runtime", lambda name: (spec, RECIPES["busybox"]))
    good = await build_runtime(docker_host, "busybox", force=True, cache_dir=tmp_path)
    await _remove_image(docker_host, spec.image)
    tar = tmp_path / rootfs_name("busybox", RECIPES["busybox"])
    tar.write_bytes(tar.read_bytes()[:700_000])
    try:
        with pytest.raises(BuildFailed) as failed:
            await build_runtime(docker_host, "busybox", cache_dir=tmp_path)
        assert "the engine" in failed.value.message and str(tar) in failed.value.message
        assert "tp runtime build busybox --force" in failed.value.fix
        assert await build_runtime(docker_host, "busybox", force=True, cache_dir=tmp_path) == good
    finally:
        with contextlib.suppress(aiodocker.DockerError):
            await _remove_image(docker_host, spec.image)


async def test_two_builds_at_once_make_one_root_file_system(
    docker_host: str, tmp_path: Path
) -> None:
    ids = await asyncio.gather(
        *(build_runtime(docker_host, "busybox", force=True, cache_dir=tmp_path) for _ in (1, 2))
    )
    assert ids[0] == ids[1]
    made = [p.name for p in tmp_path.glob("*.tar")]  # noqa: ASYNC240 - after both builds
    assert made == [rootfs_name("busybox", RECIPES["busybox"])]
