"""A pytorch-trl image whose contents drifted, refused by the runner before the framework starts
(docs/runtimes.md, "Contents drift"): a copy of the built image with one dist-info's version
edited, one removed, one added and one installed a second time, committed under a tag of this
test's own, runs the runner with the pytorch-trl contract through the local backend and exits 97
naming each difference and the fix; the built image itself passes the same check."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator

import aiodocker
import pytest

from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import PYTORCH_TRL
from domain import capsule
from tests.fixtures.docker import build_image, make_request
from tests.integration.test_capsule_runner import run, with_capsule

pytestmark = pytest.mark.integration
DRIFT_REPO = "localhost/tuneplane/test-drift"
SITE = "/usr/local/lib/python3.11/dist-packages"
COMMAND = ("/bin/sh", "-c", "echo user-code-ran")
TQDM, MDURL, IDNA = (PYTORCH_TRL.packages[n] for n in ("tqdm", "mdurl", "idna"))
# what was done to the image, as someone with a shell in a container would, then `docker commit`
DRIFT = f"""set -e
sed -i 's/^Version: {TQDM}$/Version: {TQDM}.post1/' {SITE}/tqdm-{TQDM}.dist-info/METADATA
rm -rf {SITE}/mdurl-{MDURL}.dist-info
add() {{ mkdir -p "$1/$2-$3.dist-info"
    printf 'Name: %s\\nVersion: %s\\n' "$2" "$3" >"$1/$2-$3.dist-info/METADATA"; }}
add {SITE} requests 2.32.0
add /usr/lib/python3/dist-packages idna 3.0
"""
DIFFERENCES = (
    f"idna is installed 2 times ({IDNA}, 3.0)",
    f"mdurl {MDURL} is missing",
    "requests 2.32.0 is not in the contract",
    f"tqdm is {TQDM}.post1, the contract pins {TQDM}",
)


async def commit_copy(docker_host: str, base: str, script: str, tag: str) -> str:
    """``base`` after ``script`` ran in it, committed as ``DRIFT_REPO:tag``; its image id."""
    async with aiodocker.Docker(url=docker_host) as docker:
        made = await docker.containers.run({"Image": base, "Cmd": ["/bin/sh", "-c", script]})
        try:
            assert (await made.wait())["StatusCode"] == 0, await made.log(stdout=True, stderr=True)
            return str((await made.commit(repository=DRIFT_REPO, tag=tag))["Id"])
        finally:
            await made.delete(force=True)


async def remove_images(docker_host: str, *refs: str) -> None:
    async with aiodocker.Docker(url=docker_host) as docker:
        for ref in refs:
            try:
                await docker.images.delete(ref, force=True)
            except aiodocker.DockerError as exc:
                if exc.status != 404:
                    raise


@pytest.fixture(scope="module")
def trl_runtime(docker_host: str) -> str:
    """The ``pytorch-trl`` runtime image (built by `deploy/images/build.sh`, cached); its id."""
    return build_image(PYTORCH_TRL.name, docker_host)


@pytest.fixture(scope="module")
def drifted(docker_host: str, trl_runtime: str) -> Iterator[str]:
    """``DRIFT_REPO:<random>``: the pytorch-trl image with the changes of ``DRIFT``."""
    tag = uuid.uuid4().hex[:12]
    asyncio.run(commit_copy(docker_host, trl_runtime, DRIFT, tag))
    try:
        yield f"{DRIFT_REPO}:{tag}"
    finally:
        asyncio.run(remove_images(docker_host, f"{DRIFT_REPO}:{tag}"))


async def test_the_built_image_holds_exactly_its_lock(
    docker_backend: DockerBackend, trl_runtime: str, docker_job_id: str
) -> None:
    pin = await docker_backend.pin(PYTORCH_TRL)
    assert pin.digest == trl_runtime and pin.packages == PYTORCH_TRL.packages
    request, _ = with_capsule(make_request(docker_job_id, pin, COMMAND), source=None)
    code, reason, logs = await run(docker_backend, request)
    assert (code, logs) == (0, b"user-code-ran\n"), (reason, logs)


async def test_a_drifted_image_stops_the_member_before_its_command(
    docker_backend: DockerBackend, drifted: str, docker_job_id: str
) -> None:
    """The pytorch-trl contract (frameworks unchanged, so the framework check passes) on the
    altered image: exit 97 before user code, naming each difference and the fix."""
    pin = await docker_backend.pin(dataclasses.replace(PYTORCH_TRL, image=drifted))
    request, _ = with_capsule(make_request(docker_job_id, pin, COMMAND), source=None)
    code, reason, logs = await run(docker_backend, request)
    assert code == 97 and reason == capsule.runner_failure(97), reason
    text = logs.decode()
    assert "tuneplane-runner: the image's Python packages are not the ones its runtime contract" \
        " lists (runtime.packages): " in text, text  # fmt: skip
    for difference in DIFFERENCES:
        assert difference in text, text
    assert "`tp runtime build pytorch-trl --force`" in text
    assert "`bash deploy/images/build.sh pytorch-trl --force`" in text
    assert "user-code-ran" not in text
