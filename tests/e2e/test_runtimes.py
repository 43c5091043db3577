"""The runtime registry end to end: the real `tp` CLI against a real API process, PostgreSQL and
container engine. An admin registers a runtime pinned by digest (a member may not), lists it,
re-adds it (unchanged, refused, replaced) and runs a job on it; a runtime whose image is not
its digest any more is refused at preview, naming both digests; a runtime digest swapped in
the database after the preview fails the member before user code runs; a recipe's framework
is required at preview, pinned in recipe.lock.json, and checked inside the container; a TRL
recipe on a runtime with too old a TRL, or on a registered pytorch-trl image whose tag was moved
to a drifted copy, is refused at preview."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiodocker
import asyncpg
import pytest

from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import BUSYBOX, PYTHON_NUMPY, PYTORCH_TRL
from adapters.postgres.connect import plain_url
from domain.catalog import RuntimeSpec
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.docker import build_image
from tests.integration.test_runtime_drift import DRIFT, DRIFT_REPO, commit_copy, remove_images

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
OTHER = "sha256:" + "0" * 63 + "1"


def image_id(docker_host: str, runtime: RuntimeSpec = BUSYBOX) -> str:
    async def pin() -> str:
        async with DockerBackend(docker_host) as backend:
            return (await backend.pin(runtime)).digest

    return asyncio.run(pin())


def member(cli: Cli, name: str) -> Cli:
    cli("admin", "user", "add", name, "--team", "default")
    token = cli("admin", "token", "create", name).stdout.strip()
    other = Cli(cli.cwd.parent / name, cli.cwd)
    server = json.loads((cli.cwd.parent / "config" / "credentials.json").read_text())["server"]
    other("login", "--server", server, "--token", token)
    return other


def test_admins_register_runtimes_pinned_by_digest_and_jobs_run_on_them(
    cli: Cli, docker_host: str
) -> None:
    busybox = image_id(docker_host)
    add = ("runtime", "add", "bb-pinned", "--image", BUSYBOX.image, "--digest", busybox)
    out = cli(*add, "--description", "BusyBox, pinned").stdout
    assert f"runtime bb-pinned created (revision 1): {BUSYBOX.image} pinned to {busybox}" in out
    table = cli("runtime", "ls").stdout
    assert "bb-pinned" in table and "(built in: at preview)" in table
    listed = {r["name"]: r for r in json.loads(cli("runtime", "ls", "--json").stdout)}
    assert listed["bb-pinned"]["digest"] == busybox and not listed["bb-pinned"]["builtin"]
    assert listed["bb-pinned"]["added_by"] == "admin" and listed["busybox"]["builtin"]
    assert listed["python-numpy"]["frameworks"] == {"numpy": "1.24.2"}

    assert "unchanged (revision 1)" in cli(*add, "--description", "BusyBox, pinned").stdout
    refused = cli(*add, "--description", "changed", ok=False)
    assert refused.returncode == 4 and "exists with other content" in refused.stderr
    assert "--replace" in refused.stderr
    assert "replaced (revision 2)" in cli(*add, "--description", "changed", "--replace").stdout

    carol = member(cli, "carol")
    denied = carol(*add, "--replace", ok=False)
    assert denied.returncode == 5 and "may not add runtimes" in denied.stderr
    assert "bb-pinned" in carol("runtime", "ls").stdout
    for bad, message in (
        (("--process-model", "mpi"), "single-process, torch-process-group, ray, cpu"),
        (("--framework", "torch"), "is not NAME=VERSION"),
        (("--framework", "numpy=1.24.2"), "lists frameworks but no Python version"),
    ):
        wrong = cli("runtime", "add", "bad", "--image", BUSYBOX.image, "--digest", busybox, *bad,
                    ok=False)  # fmt: skip
        assert wrong.returncode == 2 and message in wrong.stderr, wrong.stderr
    unpinned = cli("runtime", "add", "bad", "--image", BUSYBOX.image, ok=False)
    assert unpinned.returncode == 2 and "names no digest" in unpinned.stderr

    carol("new", "hello", "--method", "custom/custom", "--runtime", "bb-pinned")
    out = carol("submit", "hello", "--profile", "cpu:1", "--yes").stdout
    job_id = job_id_in(out)
    job = carol.wait_state(job_id, {"succeeded", "failed"})
    assert job["state"] == "succeeded", job
    assert job["spec"]["runtime"]["name"] == "bb-pinned"
    assert job["spec"]["runtime"]["digest"] == busybox

    cli("runtime", "add", "bb-moved", "--image", BUSYBOX.image, "--digest", OTHER)
    moved = carol("submit", "hello", "--runtime", "bb-moved", "--profile", "cpu:1", "--preview",
                  ok=False)  # fmt: skip
    assert moved.returncode == 2, moved.stderr
    assert f"pins {OTHER}, but image {BUSYBOX.image} is {busybox}" in moved.stderr
    assert f"tp runtime add bb-moved --image {BUSYBOX.image} --digest {busybox} --replace" in (
        moved.stderr
    )


def test_a_runtime_digest_swapped_after_preview_fails_before_user_code(
    cli: Cli, docker_host: str, pg_url: str
) -> None:
    async def another_image() -> str:  # BusyBox with one more label: same tools, another id
        async with aiodocker.Docker(url=docker_host) as docker:
            made = await docker.containers.create({"Image": BUSYBOX.image, "Cmd": ["true"]})
            try:
                return str((await made.commit(changes="LABEL tuneplane.test=swapped"))["Id"])
            finally:
                await made.delete(force=True)

    swapped = asyncio.run(another_image())
    cli("new", "swapped", "--method", "custom/custom")
    (cli.cwd / "swapped" / "train.sh").write_text("echo 'user code ran'\n")
    cli("submit", "swapped", "--profile", "cpu:1", "--preview")
    (saved,) = (cli.cwd / ".tuneplane-data" / "submissions").glob("pv-*.json")
    preview = json.loads(saved.read_text())["preview"]
    pinned = preview["spec"]["runtime"]["digest"]
    assert pinned != swapped

    async def swap() -> None:  # what a tampered database row would hold
        conn = await asyncpg.connect(plain_url(pg_url))
        try:
            await conn.execute(
                "UPDATE previews SET spec = jsonb_set(spec, '{runtime,digest}', to_jsonb($1::text))"
                " WHERE id = $2",
                swapped,
                preview["id"],
            )
        finally:
            await conn.close()

    asyncio.run(swap())
    out = cli("submit", "--commit", str(saved))
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"})
    assert job["state"] == "failed" and job["spec"]["runtime"]["digest"] == swapped, job
    status = cli("job", "status", job_id).stdout
    assert "the member runs another image than the runtime the Job Capsule pins" in status, status
    logs = cli("job", "logs", job_id).stdout
    assert f"the member runs image {swapped}; the capsule pins {pinned}" in logs, logs
    assert "user code ran" not in logs


@pytest.mark.timeout(900)
def test_a_recipe_s_framework_is_required_locked_and_checked_in_the_container(
    numpy_runtime: str, cli: Cli
) -> None:
    cli("new", "mlp", "--method", "numpy/mlp-classification")
    exp = cli.cwd / "mlp"
    lock = json.loads((exp / "recipe.lock.json").read_text())
    assert (lock["framework"], lock["framework_version"], lock["runtime"]) == (
        "numpy", "1.24.2", "python-numpy",
    )  # fmt: skip
    cli("validate", "mlp")
    image = PYTHON_NUMPY.image
    for name, version in (("numpy-old", "1.20.0"), ("numpy-next", "1.26.4")):  # both untrue
        cli("runtime", "add", name, "--image", image, "--digest", numpy_runtime, "--python",
            "3.11", "--framework", f"numpy={version}")  # fmt: skip

    old = cli("submit", "mlp", "--runtime", "numpy-old", "--profile", "cpu:1", "--preview",
              ok=False)  # fmt: skip
    assert old.returncode == 2 and (
        "method numpy/mlp-classification needs numpy>=1.24,<3; runtime numpy-old provides numpy"
        " 1.20.0" in old.stderr
    ), old.stderr
    stale = cli("submit", "mlp", "--runtime", "numpy-next", "--profile", "cpu:1", "--preview",
                ok=False)  # fmt: skip
    assert stale.returncode == 4 and (
        "recipe.lock.json is stale: it pins numpy 1.24.2; runtime numpy-next provides numpy 1.26.4"
        in stale.stderr
    ), stale.stderr

    toml = exp / "experiment.toml"
    lines = toml.read_text().splitlines()
    toml.write_text("\n".join('runtime = "numpy-next"' if ln.startswith("# runtime") else ln
                              for ln in lines) + "\n")  # fmt: skip
    checked = cli("validate", "mlp", ok=False)
    assert checked.returncode == 2 and "it pins numpy 1.24.2" in checked.stderr
    assert "tp recipe upgrade mlp" in checked.stderr
    upgraded = cli("recipe", "upgrade", "mlp").stdout
    assert "numpy 1.24.2 → version 1" in upgraded and "numpy 1.26.4" in upgraded, upgraded
    cli("validate", "mlp")

    out = cli("submit", "mlp", "--profile", "cpu:1", "--set", "steps=5", "--yes").stdout
    job_id = job_id_in(out)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, timeout=120)
    assert job["state"] == "failed", job
    status = cli("job", "status", job_id).stdout
    assert "the runtime does not provide the framework versions" in status, status
    logs = cli("job", "logs", job_id).stdout
    assert "the runtime contract pins numpy 1.26.4; this runtime has 1.24.2" in logs, logs
    assert "step " not in logs  # the recipe's train.py never started


def test_a_trl_recipe_is_refused_at_preview_by_an_old_trl_or_a_moved_tag(
    cli: Cli, docker_host: str
) -> None:
    """trl/sft needs trl>=1.16,<2: a runtime that declares 0.9.0 is refused naming both; one
    registered by the digest of a pytorch-trl image whose tag was then moved to a drifted copy
    (the registered image gone) is refused naming both digests."""
    built = build_image(PYTORCH_TRL.name, docker_host)  # cached: built once per engine
    versions = [f"{name}={v}" for name, v in PYTORCH_TRL.frameworks.items() if name != "trl"]
    declared = [arg for v in versions for arg in ("--framework", v)] + ["--python", "3.11"]
    cli("new", "sft", "--method", "trl/sft")
    cli("runtime", "add", "trl-old", "--image", PYTORCH_TRL.image, "--digest", built,
        "--framework", "trl=0.9.0", *declared)  # fmt: skip
    old = cli("submit", "sft", "--runtime", "trl-old", "--profile", "cpu:1", "--preview", ok=False)
    assert old.returncode == 2, old.stderr
    assert "method trl/sft needs trl>=1.16,<2; runtime trl-old provides trl 0.9.0" in old.stderr
    assert "choose a runtime that provides it" in old.stderr and "tp runtime add" in old.stderr

    tag = f"{DRIFT_REPO}:{uuid.uuid4().hex[:12]}"
    try:
        registered = asyncio.run(commit_copy(docker_host, built, "true", tag.split(":")[1]))
        cli("runtime", "add", "trl-pinned", "--image", tag, "--digest", registered,
            "--framework", f"trl={PYTORCH_TRL.frameworks['trl']}", *declared)  # fmt: skip
        drifted = asyncio.run(commit_copy(docker_host, built, DRIFT, tag.split(":")[1]))
        asyncio.run(remove_images(docker_host, registered))  # the tag moved; the original gone
        moved = cli("submit", "sft", "--runtime", "trl-pinned", "--profile", "cpu:1",
                    "--preview", ok=False)  # fmt: skip
        assert moved.returncode == 2, moved.stderr
        assert f"pins {registered}, but image {tag} is {drifted}" in moved.stderr, moved.stderr
        assert f"--digest {drifted} --replace" in moved.stderr
    finally:
        asyncio.run(remove_images(docker_host, tag))
