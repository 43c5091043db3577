"""The control-plane image (deploy/images/control-plane.sh, docs/operations.md#the-control-plane-
image): built as the docs say into the test's engine, its default command serves the API against
the test's PostgreSQL and answers /healthz and /readyz; the gateways are commands of the same
image; a bad database URL stops it with the product's own error, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import free_port
from tests.support import http
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.engine]

ROOT = Path(__file__).resolve().parents[2]


def docker(host: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DOCKER_HOST=host)
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


@pytest.fixture(scope="module")
def image(docker_host: str, numpy_runtime: str) -> str:
    built = subprocess.run(
        ["bash", str(ROOT / "deploy/images/control-plane.sh"), "--docker-host", docker_host],
        capture_output=True, text=True, timeout=1200, env=dict(os.environ, PYTHON=sys.executable),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


def test_the_image_serves_the_api_against_postgresql(
    image: str, docker_host: str, pg_url: str
) -> None:
    port, name = free_port(), f"tp-cp-{uuid.uuid4().hex[:8]}"
    run = docker(docker_host, "run", "-d", "--name", name, "--network", "host",
                 "-e", f"TUNEPLANE_DATABASE_URL={pg_url}", image,
                 "serve", "--host", "127.0.0.1", "--port", str(port))  # fmt: skip
    assert run.returncode == 0, run.stderr
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            state = docker(docker_host, "inspect", "-f", "{{.State.Running}}", name).stdout
            if state.strip() != "true":
                logs = docker(docker_host, "logs", name)
                raise AssertionError(f"the API's container stopped:\n{logs.stdout}{logs.stderr}")
            try:
                return http.get(url + "/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, what="the image's API to answer /readyz", within=120)
        assert http.get(url + "/healthz", timeout=5).status_code == 200
        logs = docker(docker_host, "logs", name)
        assert "created user admin" in logs.stdout + logs.stderr  # the first start's bootstrap
    finally:
        docker(docker_host, "rm", "-f", name)


def test_the_gateways_are_commands_of_the_same_image(image: str, docker_host: str) -> None:
    for which, port in (("node", "8471"), ("telemetry", "8472")):
        shown = docker(docker_host, "run", "--rm", "--network", "none", image,
                       "gateway", which, "--help")  # fmt: skip
        assert shown.returncode == 0 and f"default {port}" in shown.stdout, shown
    refused = docker(docker_host, "run", "--rm", "--network", "none", "-e",
                     "TUNEPLANE_DATABASE_URL=", image, "gateway", "telemetry")  # fmt: skip
    out = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "no database configured" in out, out
    assert "Traceback" not in out
