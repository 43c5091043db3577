"""The Slurm backend's settings (entrypoints/slurm_wiring.py): absent unless configured; bad
settings stop `tp serve` with what to fix."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from domain.catalog import Resources
from domain.errors import InvalidInput
from domain.ports import LaunchRequest
from domain.requests import RoleSpec
from entrypoints.slurm_wiring import backend_from_env, collector_of, partitions_of
from tests.unit.builders import a_spec

pytestmark = pytest.mark.unit


def test_no_url_no_backend() -> None:
    assert backend_from_env({}) is None


async def test_configured_backend(tmp_path: Path) -> None:
    token = tmp_path / "jwt"
    token.write_text("eyJ.token\n")
    backend = backend_from_env(
        {
            "TUNEPLANE_SLURM_URL": "http://slurm-head:6820",
            "TUNEPLANE_SLURM_SHARED_DIR": str(tmp_path / "shared"),
            "TUNEPLANE_SLURM_API_VERSION": "v0.0.41",
            "TUNEPLANE_SLURM_USER": "alice",
            "TUNEPLANE_SLURM_TOKEN_FILE": str(token),
            "TUNEPLANE_SLURM_PARTITIONS": "gpu-a=gpu, cpu=batch",
            "TUNEPLANE_SLURM_ACCOUNTING": "1",
        }
    )
    assert backend is not None
    try:
        assert backend.partition_of("gpu-a") == "gpu" and backend.partition_of("other") == "other"
        assert backend.accounting and (tmp_path / "shared").is_dir()
        assert backend.client.endpoint.token == "eyJ.token"
        assert (await backend.client.dialect()).version == "v0.0.41"  # configured: no discovery
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TUNEPLANE_SLURM_URL": "unix:/s.sock"}, "needs TUNEPLANE_SLURM_SHARED_DIR"),
        (
            {"TUNEPLANE_SLURM_URL": "unix:/s.sock", "TUNEPLANE_SLURM_SHARED_DIR": "relative"},
            "an absolute directory",
        ),
        (
            {"TUNEPLANE_SLURM_URL": "slurm-head:6820", "TUNEPLANE_SLURM_SHARED_DIR": "/tmp/x"},
            "neither unix:PATH nor http",
        ),
        (
            {
                "TUNEPLANE_SLURM_URL": "unix:/s.sock",
                "TUNEPLANE_SLURM_SHARED_DIR": "/tmp/x",
                "TUNEPLANE_SLURM_API_VERSION": "v0.0.39",
            },
            "v0.0.39' is not supported",
        ),
        (
            {
                "TUNEPLANE_SLURM_URL": "unix:/s.sock",
                "TUNEPLANE_SLURM_SHARED_DIR": "/tmp/x",
                "TUNEPLANE_SLURM_TOKEN_FILE": "/nonexistent/jwt",
            },
            "cannot be read",
        ),
    ],
)
def test_bad_settings_say_what_to_fix(env: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match="fix:") as caught:
        backend_from_env(env)
    assert message in str(caught.value)


def test_partition_map() -> None:
    assert partitions_of("") == {}
    assert partitions_of("a=b,c=d") == {"a": "b", "c": "d"}
    with pytest.raises(SystemExit, match="not POOL=PARTITION"):
        partitions_of("a=b,oops")


@pytest.mark.parametrize(("cpus", "memory_mb"), [(1e-7, 256), (1.0, 0)])
async def test_a_member_below_the_smallest_limits_is_refused_before_slurm_is_asked(
    tmp_path: Path, cpus: float, memory_mb: int
) -> None:
    """Issue 18, defect 8, on Slurm: memory 0 would be ``--mem=0``, the whole node."""
    backend = backend_from_env(
        {"TUNEPLANE_SLURM_URL": "http://127.0.0.1:9", "TUNEPLANE_SLURM_SHARED_DIR": str(tmp_path)}
    )
    assert backend is not None
    role = RoleSpec("main", "cpu:1", "cpu", 1, Resources(cpus=cpus, memory_mb=memory_mb))
    spec = dataclasses.replace(a_spec(), roles=(role,), backend="slurm")
    try:
        with pytest.raises(InvalidInput, match="no workload runs without CPU and memory limits"):
            await backend.launch(LaunchRequest("job-1", "att-1", "mem-1", 0, spec, None))
        assert not os.listdir(tmp_path)  # no attempt directory: Slurm was never asked
    finally:
        await backend.close()


BASE = {"TUNEPLANE_SLURM_URL": "unix:/s.sock", "TUNEPLANE_SLURM_SHARED_DIR": "/tmp/x"}


def test_metrics_settings_make_a_collector_per_member() -> None:
    c = collector_of(
        {
            "TUNEPLANE_SLURM_TELEMETRY_GATEWAY": "telemetry.example:8472",
            "TUNEPLANE_SLURM_TELEMETRY_CA": "/etc/tuneplane/ca.pem",
            "TUNEPLANE_SLURM_TELEMETRY_SERVER_NAME": "telemetry",
            "TUNEPLANE_SLURM_COLLECTOR_SPOOL": "/var/tmp",
            "TUNEPLANE_SLURM_COLLECTOR_DRAIN_SECONDS": "5",
        }
    )
    assert c is not None
    assert (c.gateway, c.ca, c.server_name, c.spool_root, c.drain_seconds) == (
        "telemetry.example:8472",
        "/etc/tuneplane/ca.pem",
        "telemetry",
        "/var/tmp",
        5,
    )
    assert c.command == str(Path(sys.executable).parent / "tp")  # the same install here
    assert collector_of({}) is None  # no gateway: no collector (a warning at start)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TUNEPLANE_SLURM_TELEMETRY_GATEWAY": "telemetry"}, "is not HOST:PORT"),
        ({"TUNEPLANE_SLURM_TELEMETRY_GATEWAY": "t:8472"}, "needs TUNEPLANE_SLURM_TELEMETRY_CA"),
        (
            {"TUNEPLANE_SLURM_TELEMETRY_GATEWAY": "t:1", "TUNEPLANE_SLURM_TELEMETRY_CA": "ca.pem"},
            "needs TUNEPLANE_SLURM_TELEMETRY_CA, an absolute file",
        ),
        (
            {
                "TUNEPLANE_SLURM_TELEMETRY_GATEWAY": "t:1",
                "TUNEPLANE_SLURM_TELEMETRY_CA": "/ca.pem",
                "TUNEPLANE_SLURM_COLLECTOR_SPOOL": "tmp",
            },
            "is not an absolute directory",
        ),
        (
            {
                "TUNEPLANE_SLURM_TELEMETRY_GATEWAY": "t:1",
                "TUNEPLANE_SLURM_TELEMETRY_CA": "/ca.pem",
                "TUNEPLANE_SLURM_COLLECTOR_DRAIN_SECONDS": "-1",
            },
            "from 0 to 3600",
        ),
        (
            {
                "TUNEPLANE_SLURM_TELEMETRY_GATEWAY": "t:1",
                "TUNEPLANE_SLURM_TELEMETRY_CA": "/ca.pem",
                "TUNEPLANE_SLURM_COLLECTOR_COMMAND": "tp\nrm -rf /",
            },
            "holds a line break",
        ),
    ],
)
def test_bad_metrics_settings_say_what_to_fix(env: dict[str, str], message: str) -> None:
    with pytest.raises(SystemExit, match="fix:") as caught:
        backend_from_env({**BASE, **env}, tokens=object())  # type: ignore[arg-type]
    assert message in str(caught.value)
