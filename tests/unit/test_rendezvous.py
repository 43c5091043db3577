"""domain/rendezvous.py: the gang's rendezvous environment and the Ray wrapper."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from domain.rendezvous import ray_wrap, rendezvous_env

pytestmark = pytest.mark.unit


def env(**kw: object) -> dict[str, str]:
    args: dict[str, object] = {
        "members": 4,
        "index": 2,
        "master_addr": "10.0.0.7",
        "master_port": 29501,
        "gpus_per_member": 8,
        "process_model": "torch-process-group",
    }
    args.update(kw)
    return rendezvous_env(**args)  # type: ignore[arg-type]


def test_torch_member_gets_the_whole_rendezvous() -> None:
    assert env() == {
        "MASTER_ADDR": "10.0.0.7",
        "MASTER_PORT": "29501",
        "WORLD_SIZE": "4",
        "RANK": "2",
        "NODE_RANK": "2",
        "LOCAL_RANK": "0",
        "NNODES": "4",
        "NPROC_PER_NODE": "8",
        "TUNEPLANE_RENDEZVOUS": "10.0.0.7:29501",
    }


def test_peers_are_listed_by_rank_when_known() -> None:
    peers = ("10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.0.10")
    assert env(peers=peers)["TUNEPLANE_PEERS"] == "10.0.0.7,10.0.0.8,10.0.0.9,10.0.0.10"
    assert "TUNEPLANE_PEERS" not in env()


def test_cpu_members_run_one_process() -> None:
    assert env(gpus_per_member=0)["NPROC_PER_NODE"] == "1"


def test_ray_head_and_workers() -> None:
    head = env(index=0, process_model="ray")
    worker = env(index=3, process_model="ray")
    assert head["TUNEPLANE_RAY_HEAD"] == "1" and "RAY_ADDRESS" not in head
    assert worker["RAY_ADDRESS"] == "10.0.0.7:29501" and "TUNEPLANE_RAY_HEAD" not in worker
    assert "RAY_ADDRESS" not in env() and "TUNEPLANE_RAY_HEAD" not in env()


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"members": 0, "index": 0}, "at least one"),
        ({"index": 4}, "outside"),
        ({"index": -1}, "outside"),
        ({"master_port": 0}, "TCP port"),
        ({"master_port": 70000}, "TCP port"),
    ],
)
def test_nonsense_is_refused(kw: dict[str, int], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        env(**kw)


def test_ray_head_starts_the_head_then_runs_the_command_verbatim() -> None:
    cmd = ["python", "train.py", "--name", "a b; rm -rf /"]
    wrapped = ray_wrap(cmd, 0, "10.0.0.7", 6379)
    assert wrapped[:2] == ["sh", "-c"]
    assert "ray start --head --port=6379" in wrapped[2]
    assert wrapped[4:] == cmd  # passed as arguments, never re-parsed


def test_ray_worker_joins_the_head_and_blocks() -> None:
    wrapped = ray_wrap(["python", "train.py"], 2, "10.0.0.7", 6379)
    assert wrapped == ["sh", "-c", "exec ray start --address=10.0.0.7:6379 --block"]
    assert "train.py" not in " ".join(wrapped)  # workers serve the head; the driver runs on 0


def test_ray_wrapped_commands_run_in_a_shell(tmp_path: Path) -> None:
    """With a fake ``ray`` on PATH: the head's command runs after ``ray start`` succeeded, with
    its arguments intact; a failed ``ray start`` keeps the command from running."""
    ray = tmp_path / "ray"
    ray.write_text('#!/bin/sh\necho "ray $*"\nexit "${RAY_FAILS:-0}"\n')
    ray.chmod(0o755)
    path = f"{tmp_path}:/usr/bin:/bin"
    head = ray_wrap(["echo", "driver", "a b"], 0, "h", 6379)
    out = subprocess.run(head, capture_output=True, text=True, env={"PATH": path}, check=True)
    assert out.stdout == "ray start --head --port=6379\ndriver a b\n"
    failed = subprocess.run(
        head, capture_output=True, text=True, env={"PATH": path, "RAY_FAILS": "3"}
    )
    assert (failed.returncode, failed.stdout) == (3, "ray start --head --port=6379\n")
    worker = ray_wrap(["echo", "driver"], 1, "h", 6379)
    out = subprocess.run(worker, capture_output=True, text=True, env={"PATH": path}, check=True)
    assert out.stdout == "ray start --address=h:6379 --block\n"
