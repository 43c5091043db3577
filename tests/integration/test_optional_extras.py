"""The optional extras (adapters/extras.py, deploy/gpu/README.md): an API server whose
Python lacks the AWS SDK and the Kubernetes client (both blocked in ``sys.modules``, as if
``pip install tuneplane`` had been run without ``[s3]`` and ``[kubernetes]``) serves as usual
when neither is configured, and refuses to start, naming the extra to install, when one is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.fixtures.server import _wait_ready, free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
# `tp serve`, in a Python where the extras' modules cannot be imported
BLOCKED = (
    "import sys\n"
    "for name in ('aiobotocore', 'botocore', 'kubernetes_asyncio'):\n"
    "    sys.modules[name] = None  # import raises ImportError\n"
    "from entrypoints.cli.main import main\n"
    "sys.argv = ['tp', *sys.argv[1:]]\n"
    "main()\n"
)


def _serve(pg_url: str, tmp_path: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    environ = dict(os.environ)
    environ.update(
        TUNEPLANE_DATABASE_URL=pg_url,
        TUNEPLANE_STATE_DIR=str(tmp_path / "state"),
        DOCKER_HOST="unix:///nonexistent/no-engine.sock",
        TUNEPLANE_LOG_LEVEL="warning",
        **env,
    )
    return subprocess.Popen(
        [sys.executable, "-c", BLOCKED, "serve", "--port", str(port), "--no-supervisor"],
        env=environ,
        cwd=ROOT,
        stdout=(tmp_path / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def _refused(proc: subprocess.Popen[bytes], log: Path) -> str:
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"tp serve kept running:\n{log.read_text()[-2000:]}") from None
    assert proc.returncode != 0
    return log.read_text()


async def test_a_server_without_the_extras_serves_when_they_are_not_configured(
    pg_url: str, tmp_path: Path
) -> None:
    port = free_port()
    proc = _serve(pg_url, tmp_path, port)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, proc, tmp_path / "serve.log")
        async with httpx.AsyncClient() as client:
            answer = await client.get(url + "/v1/whoami")
        assert answer.status_code == 401  # serving, and asking for a token
    finally:
        proc.terminate()
        proc.wait(15)


async def test_s3_blobs_without_the_s3_extra_name_the_extra(pg_url: str, tmp_path: Path) -> None:
    proc = _serve(pg_url, tmp_path, free_port(), TUNEPLANE_BLOB_STORE="s3://bucket/tp/")
    out = _refused(proc, tmp_path / "serve.log")
    assert "aiobotocore is not installed" in out, out[-2000:]
    assert "pip install 'tuneplane[s3]'" in out


async def test_a_kubernetes_backend_without_the_extra_names_the_extra(
    pg_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "kubernetes.toml"
    config.write_text((ROOT / "deploy/kubernetes/kubernetes.toml").read_text())
    proc = _serve(pg_url, tmp_path, free_port(), TUNEPLANE_KUBERNETES_CONFIG=str(config))
    out = _refused(proc, tmp_path / "serve.log")
    assert "kubernetes-asyncio is not installed" in out, out[-2000:]
    assert "pip install 'tuneplane[kubernetes]'" in out
