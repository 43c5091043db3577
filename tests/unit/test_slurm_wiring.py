"""The Slurm backend's settings (entrypoints/slurm_wiring.py): absent unless configured; bad
settings stop `tp serve` with what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from entrypoints.slurm_wiring import backend_from_env, partitions_of

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
