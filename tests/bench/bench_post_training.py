"""Platform overhead for a post-training job (not part of the suite).

The same `trl/sft` run (the tiny Llama built from a config, synthetic data, 50 steps, one
process on the CPU, the `pytorch-trl` image) twice per round: submitted through TunePlane
(`tp submit` to a real cluster on loopback: `tp serve`, the TLS node gateway, one `tp node run`
daemon with 2 CPUs, the telemetry gateway and the node's collector, one PostgreSQL), and run
directly with the same image, files and CPU/memory limits through the Docker Engine API (no
TunePlane at all). Rounds alternate the two, so both see the same machine.

Reported per round and as medians: wall time (TunePlane: from sending the commit to the end of
`tp job logs -f`, which follows the job until it ends; direct: from creating the container to
its exit), time to the first step (to the wall time TRL's first logged step carries), and TRL's
own training steps per second
(`train_steps_per_second` in report.json: the training loop only). The ratios TunePlane/direct
are the result: steps/s is what the platform must not slow down (goal >= 0.95).

Run: ``.venv/bin/pytest tests/bench/bench_post_training.py -m bench -s`` (``BENCH_ROUNDS=N``
for another count than 3; the engine from ``deploy/dev/dockerd.sh`` in DOCKER_HOST).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.recipes import load_recipes
from domain.catalog import resolve_params
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.docker import build_image

pytestmark = pytest.mark.bench

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
STEPS = int(os.environ.get("BENCH_STEPS", "50"))
GIVEN = {"max_steps": str(STEPS), "logging_steps": "1", "save_steps": "1000", "bf16": "false",
         "synthetic_samples": "512", "per_device_train_batch_size": "4", "max_length": "32",
         "learning_rate": "0.001"}  # fmt: skip
CPUS, MEMORY_MB = 2, 6144


def engine(docker_host: str) -> httpx.Client:
    transport = httpx.HTTPTransport(uds=docker_host.removeprefix("unix://"))
    return httpx.Client(transport=transport, base_url="http://engine", timeout=600)


def direct(docker_host: str, image: str, work: Path) -> dict[str, float]:
    """The recipe's artifact and config.json in a directory mounted where the capsule would
    be, run in the same image with the same limits; no TunePlane."""
    (method,) = [m for m in load_recipes() if m.name == "trl/sft"]
    shutil.rmtree(work, ignore_errors=True)
    (work / "capsule" / "artifact").mkdir(parents=True)
    for name, data in method.artifact:
        (work / "capsule" / "artifact" / name).write_bytes(data)
    config = method.config(resolve_params(method, dict(GIVEN)))
    (work / "capsule" / "config.json").write_text(json.dumps(config))
    (work / "outputs").mkdir()
    body = {
        "Image": image,
        "Cmd": ["python3", "/tuneplane/capsule/artifact/sft.py"],
        "WorkingDir": "/workspace",
        "Env": ["TUNEPLANE_OUTPUT_DIR=/outputs", "TUNEPLANE_METRICS_DIR=/outputs/tensorboard",
                "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false"],
        "HostConfig": {"Binds": [f"{work / 'capsule'}:/tuneplane/capsule:ro",
                                 f"{work / 'outputs'}:/outputs"],
                       "NetworkMode": "host", "NanoCpus": CPUS * 10**9,
                       "Memory": MEMORY_MB * 2**20},
    }  # fmt: skip
    with engine(docker_host) as c:
        t0 = time.time()
        cid = c.post("/containers/create", json=body).json()["Id"]
        c.post(f"/containers/{cid}/start").raise_for_status()
        code = c.post(f"/containers/{cid}/wait").json()["StatusCode"]
        wall = time.time() - t0
        c.delete(f"/containers/{cid}", params={"force": "true"})
    assert code == 0, f"direct run exited {code}"
    report = json.loads((work / "outputs" / "report.json").read_text())
    return {"wall": wall, "first_step": first_step_wall(work / "outputs") - t0,
            "steps_per_s": report["metrics"]["train_steps_per_second"]}  # fmt: skip


def first_step_wall(outputs: Path) -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = outputs.glob("tensorboard/events.out.tfevents.*")
    tb = EventAccumulator(str(events))
    tb.Reload()
    first: float = min(e.wall_time for e in tb.Scalars("train/loss"))
    return first


def through_tuneplane(cli: Cli, cluster: Any) -> dict[str, float]:
    t0 = time.time()
    out = cli("submit", "sft", "--profile", f"nodes/cpu:{CPUS}", "--yes", *sets_of(GIVEN))
    job_id = job_id_in(out.stdout)
    # Wait the way a user does, with one process following the log to the end: polling
    # `tp job status` would start a Python every 0.7 s and take a core from the training (at
    # 0.3-0.45 s of CPU per call, that alone cost more than half the steps/s on 2 cores).
    cli("job", "logs", job_id, "-f", timeout=900)
    wall = time.time() - t0
    job = cli.status(job_id)
    assert job["state"] == "succeeded", cli("job", "logs", job_id).stdout[-3000:]
    (report,) = cluster.servers.state_dir.glob(f"nodes/*/outputs/{job_id}/*/0/report.json")
    curve = cluster.api("GET", f"/v1/jobs/{job_id}/metrics/curve?tag=train/loss&points=100")
    first = min(p["first_wall_time"] for a in curve["attempts"] for p in a["points"])
    steps_per_s = json.loads(report.read_text())["metrics"]["train_steps_per_second"]
    return {"wall": wall, "first_step": first - t0, "steps_per_s": steps_per_s}


def sets_of(given: dict[str, str]) -> list[str]:
    return [arg for k, v in given.items() for arg in ("--set", f"{k}={v}")]


@pytest.mark.timeout(3600)
async def test_post_training_overhead(
    node_cluster_factory: Any, docker_host: str, tmp_path: Path
) -> None:
    image = await asyncio.to_thread(build_image, "pytorch-trl", docker_host)
    cluster = await node_cluster_factory(1, cpus=CPUS, memory_mb=MEMORY_MB + 1024)
    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", cluster.servers.url, "--token", cluster.servers.token)
    cli("init", str(tmp_path / "ws"))
    cli.cwd = tmp_path / "ws"
    cli("new", "sft", "--method", "trl/sft")
    await asyncio.to_thread(direct, docker_host, "localhost/tuneplane/runtime-pytorch-trl:1",
                            tmp_path / "warm")  # fmt: skip
    rows: dict[str, list[dict[str, float]]] = {"tuneplane": [], "direct": []}
    for r in range(ROUNDS):
        order = ("tuneplane", "direct") if r % 2 == 0 else ("direct", "tuneplane")
        for kind in order:
            if kind == "direct":
                got = await asyncio.to_thread(
                    direct, docker_host, "localhost/tuneplane/runtime-pytorch-trl:1",
                    tmp_path / f"direct-{r}",
                )  # fmt: skip
            else:
                got = await asyncio.to_thread(through_tuneplane, cli, cluster)
            rows[kind].append(got)
            print(f"round {r} {kind:9s} wall {got['wall']:6.2f} s, first step "
                  f"{got['first_step']:6.2f} s, {got['steps_per_s']:.3f} steps/s")  # fmt: skip
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in rows.items()}
    print(f"\nimage {image}; {ROUNDS} rounds, medians:")
    for k, v in med.items():
        print(f"  {k:9s} wall {v['wall']:.2f} s, first step {v['first_step']:.2f} s, "
              f"{v['steps_per_s']:.3f} steps/s")  # fmt: skip
    t, d = med["tuneplane"], med["direct"]
    later = t["first_step"] - d["first_step"]
    print(f"  ratio TunePlane/direct: steps/s {t['steps_per_s'] / d['steps_per_s']:.3f}, "
          f"wall {t['wall'] / d['wall']:.3f}; first step {later:+.2f} s")  # fmt: skip
