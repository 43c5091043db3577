"""`verl/grpo` end to end on the local backend with the `verl` runtime built by the project
(CPU torch, verl 0.9.1, Ray 2.60): `tp new` and `tp submit` of the recipe go through preview
(the runtime's verl satisfies the recipe's requirement), commit, the Job Capsule and the
runner's checks inside the image, and the artifact then refuses to train on a CPU with verl's
reasons and what a GPU run needs (docs/recipes.md): the job fails with exit 2 and says why,
instead of crashing inside Ray a minute later."""

from __future__ import annotations

import pytest

from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.docker import build_image

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="session")
def verl_runtime(docker_host: str) -> str:
    """The runtime image, built as docs/recipes.md says; its image id."""
    return build_image("verl", docker_host)


@pytest.mark.timeout(900)
def test_verl_grpo_on_a_cpu_is_refused_by_its_artifact_saying_why(
    verl_runtime: str, cli: Cli
) -> None:
    cli("new", "vg", "--method", "verl/grpo")
    cli("validate", "vg")
    out = cli("submit", "vg", "--profile", "cpu:1", "--set", "synthetic_samples=8", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, timeout=300)
    logs = cli("job", "logs", job_id).stdout
    assert (job["state"], job["exit_code"]) == ("failed", 2), logs
    assert job["spec"]["runtime"]["name"] == "verl"
    assert job["spec"]["runtime"]["frameworks"]["verl"] == "0.9.1"
    assert "tuneplane-recipe: this member has no GPU and the runtime has no vllm" in logs, logs
    assert "Total available GPUs 0 is less than total desired GPUs N" in logs
    assert "fix: submit with a GPU profile and a runtime with vllm" in logs
