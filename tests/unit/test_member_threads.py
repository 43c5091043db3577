"""Each member's numerical libraries get one thread per CPU of its share (domain/threads.py),
on every backend, unless the job's own environment says otherwise: a 2-CPU member on a big host
no longer starts one OpenMP/BLAS thread per host CPU."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from adapters.container_engine.spec import container_config
from adapters.docker.runtimes import BUSYBOX
from adapters.kubernetes.render import _member_env
from domain.runtimes import pin_of
from domain.threads import THREAD_VARS, thread_env
from tests.fixtures.docker import make_request
from tests.unit.test_slurm_metrics import run_member

pytestmark = pytest.mark.unit

PIN = pin_of(BUSYBOX, "sha256:" + "ab" * 32)


@pytest.mark.parametrize(
    ("cpus", "processes", "threads"),
    [(2.0, 1, "2"), (2.5, 1, "2"), (0.25, 1, "1"), (64.0, 8, "8"), (4.0, 8, "1"), (3.0, 0, "3")],
)
def test_one_thread_per_cpu_of_each_process(cpus: float, processes: int, threads: str) -> None:
    assert thread_env(cpus, processes, {}) == dict.fromkeys(THREAD_VARS, threads)


@pytest.mark.parametrize("cpus", [0.0, -1.0, math.inf, math.nan])
def test_no_known_limit_leaves_the_libraries_defaults(cpus: float) -> None:
    assert thread_env(cpus, 1, {}) == {}


def test_the_jobs_own_setting_wins() -> None:
    assert "OMP_NUM_THREADS" not in thread_env(8.0, 1, {"OMP_NUM_THREADS": "16"})


def env_of(body: dict[str, object]) -> dict[str, str]:
    pairs = body["Env"]
    assert isinstance(pairs, list)
    return dict(str(p).split("=", 1) for p in pairs)


def test_a_container_member_gets_its_share_capped_by_the_host() -> None:
    req = make_request("job-0123456789ab", PIN, ("true",), cpus=3.0)
    env = env_of(container_config(req, network_mode="bridge", init=True, host_cpus=None))
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "3"
    capped = env_of(container_config(req, network_mode="bridge", init=True, host_cpus=2))
    assert capped["MKL_NUM_THREADS"] == "2"
    own = make_request("job-0123456789ab", PIN, ("true",), cpus=3.0, env={"OMP_NUM_THREADS": "7"})
    assert (
        env_of(container_config(own, network_mode="bridge", init=True, host_cpus=None))[
            "OMP_NUM_THREADS"
        ]
        == "7"
    )


def test_a_kubernetes_member_gets_its_share() -> None:
    from tests.unit.test_kubernetes_render import TARGET  # the golden files' pool target

    req = make_request("job-0123456789ab", PIN, ("true",), cpus=4.0)
    env = _member_env(req.spec, req.job_id, req.attempt_id, 1, TARGET)
    assert env["NUMEXPR_NUM_THREADS"] == "4"


def test_a_slurm_member_sees_its_share_in_its_environment(tmp_path: Path) -> None:
    req = make_request(
        "job-0123456789ab", PIN, ("/bin/sh", "-c", "echo threads=$OMP_NUM_THREADS"), cpus=2.0
    )
    rc, log, _ = run_member(tmp_path, req, None)
    assert rc == 0, log
    assert "threads=2" in log
