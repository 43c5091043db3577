"""A job submitted with `tp submit` writes TensorBoard events and JSONL; its curves come back
through the API and `tp job metrics`, with the values written. The workload never sees the
collector token; a run longer than the token's lifetime gets newer ones and loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from tensorboardX import SummaryWriter

from tests.e2e.test_node_backend import Factory, cli_for, submit

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 300


def loss(step: int) -> float:
    return 2.0 / (1 + step / 50)


def wait_for(ok: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = ok()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


async def test_a_submitted_job_shows_its_curves(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(1)
    cli = await cli_for(cluster, tmp_path)
    exp = cli.cwd / "hello"
    runs = tmp_path / "runs"
    with SummaryWriter(str(runs)) as writer:  # the real writer PyTorch users use
        for step in range(STEPS):
            writer.add_scalar("train/loss", loss(step), step)
            writer.add_scalar("train/reward", step * 0.01, step)
            # one tag, two sub-runs: runs/acc/train/…tfevents…, runs/acc/val/…tfevents…
            # (tensorboardX's layout; torch.utils.tensorboard's is acc_train/, acc_val/)
            writer.add_scalars("acc", {"train": step / STEPS, "val": step / STEPS / 2}, step)
    (event_file,) = runs.glob("*tfevents*")
    (exp / "events.bin").write_bytes(event_file.read_bytes())
    for run in ("train", "val"):
        (sub,) = (runs / "acc" / run).glob("*tfevents*")
        (exp / f"acc_{run}.bin").write_bytes(sub.read_bytes())
    lines = [json.dumps({"step": s, "metrics": {"eval/acc": s / 10}}) for s in range(10)]
    lines.append(json.dumps({"step": 10, "metrics": {"eval/acc": math.nan}}))  # JSON's NaN
    (exp / "eval.jsonl").write_text("\n".join(lines) + "\n")
    # the job writes its event file in two halves, a second apart, then its JSONL
    size = len(event_file.read_bytes())
    command = (
        'd="$TUNEPLANE_METRICS_DIR"; test -d "$d" || exit 3; '
        "env | grep -c eyJ; "  # a JWT in the environment would start so
        f'head -c {size // 2} events.bin > "$d/events.out.tfevents.1.job"; sleep 1; '
        f'tail -c +{size // 2 + 1} events.bin >> "$d/events.out.tfevents.1.job"; '
        'cp eval.jsonl "$d/"; for r in train val; do mkdir -p "$d/acc/$r"; '
        'cp acc_$r.bin "$d/acc/$r/events.out.tfevents.2.job"; done; sleep 1; echo wrote'
    )
    job_id = submit(cli, command, profile="nodes/cpu:0.5")
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job["state"] == "succeeded", (job, cli("job", "logs", job_id).stdout)
    log = cli("job", "logs", job_id).stdout
    assert log.splitlines()[0] == "0" and "wrote" in log  # no token in the workload's env

    def summary() -> dict[str, Any] | None:
        s = cluster.api("GET", f"/v1/jobs/{job_id}/metrics")
        counts = {
            (x["tag"], x["run"]): x["count"] for x in s["series"] if not x["tag"].startswith("sys/")
        }
        want = {("train/loss", ""): STEPS, ("train/reward", ""): STEPS, ("eval/acc", ""): 11,
                ("acc", "acc/train"): STEPS, ("acc", "acc/val"): STEPS}  # fmt: skip
        return s if counts == want else None

    found = wait_for(summary, 60, "every point of the job's metrics")
    assert found["canonical"] == ["acc", "eval/acc", "train/loss", "train/reward"]
    assert found["runs"]["acc"] == ["acc/train", "acc/val"]
    assert found["collectors"][0]["corrupt_records"] == 0
    curve = cluster.api("GET", f"/v1/jobs/{job_id}/metrics/curve?tag=train/loss")
    assert curve["width"] == 1 and len(curve["merged"]) == STEPS
    float32 = [p["last"] for p in curve["merged"]]
    assert float32 == pytest.approx([loss(s) for s in range(STEPS)], rel=1e-6)
    acc = cluster.api("GET", f"/v1/jobs/{job_id}/metrics/curve?tag=acc")  # two curves
    assert [(a["attempt"], a["run"]) for a in acc["attempts"]] == [(1, "acc/train"), (1, "acc/val")]
    out = cli("job", "metrics", job_id, "--width", "40").stdout
    training_table = out.split("\n\n")[0].splitlines()[1:]  # the system group comes after
    rows = {line.split()[0] + line.split()[1]: line.split() for line in training_table}
    row = rows["train/loss" + str(STEPS - 1)]
    assert f"{loss(STEPS - 1):.6g}"[:5] in row[2]
    assert len(row[3]) == 40  # the width asked for, each character a bucket's max
    assert rows["acc(acc/train)"][2:4] == [str(STEPS - 1), f"{(STEPS - 1) / STEPS:.6g}"]
    assert rows["acc(acc/val)"][3] == f"{(STEPS - 1) / STEPS / 2:.6g}"
    assert rows["eval/acc10"][2] == "NaN"  # not finite: said so, not "nan" or null
    raw = cli("job", "metrics", job_id, "--raw", "--tag", "eval/acc", "--start", "9")
    assert [line.split()[:2] for line in raw.stdout.splitlines()] == [
        ["STEP", "VALUE"], ["9", "0.9"], ["10", "NaN"]
    ]  # fmt: skip
    listed = cli("job", "metrics", job_id, "--raw").stdout
    assert "acc/train/events.out.tfevents.2.job#0" in listed
    as_json = json.loads(cli("job", "metrics", job_id, "--json").stdout)
    training = {t for t in as_json["curves"] if not t.startswith("sys/")}
    assert training == {"acc", "eval/acc", "train/loss", "train/reward"}


async def test_a_run_longer_than_its_collector_token_ships_every_point(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    """Collector tokens live 8 s here and the job writes a JSONL line every half second for
    20 s. The gateway sends a newer token when less than half the lifetime is left, the node
    journals it and rewrites its collector's member file: every point arrives, and the member
    file carried several tokens, none of them in the workload's environment."""
    cluster = await node_cluster_factory(1, TUNEPLANE_COLLECTOR_TOKEN_SECONDS="8")
    cli = await cli_for(cluster, tmp_path)
    command = (
        'd="$TUNEPLANE_METRICS_DIR"; env | grep -c eyJ; for s in $(seq 0 39); do '
        """printf '{"step": %d, "metrics": {"train/loss": %d}}\\n' $s $s >> "$d/l.jsonl"; """
        "sleep 0.5; done; echo wrote"
    )
    job_id = submit(cli, command, profile="nodes/cpu:0.5")
    (daemon,) = cluster.daemons.values()
    members = daemon.state_dir / "collector" / "members"
    tokens: set[str] = set()
    deadline = time.monotonic() + 120
    while cluster.api("GET", f"/v1/jobs/{job_id}")["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, cli("job", "logs", job_id).stdout
        for path in members.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):  # drained meanwhile
                tokens.add(json.loads(path.read_text())["token"])
        await asyncio.sleep(0.3)
    log = cli("job", "logs", job_id).stdout
    assert cli("job", "status", job_id).stdout.count("succeeded") and "wrote" in log, log
    assert log.splitlines()[0] == "0"  # no token in the workload's environment
    assert len(tokens) >= 3, tokens  # issued with the Prepare, then renewed at least twice

    def every_point() -> dict[str, Any] | None:
        s = cluster.api("GET", f"/v1/jobs/{job_id}/metrics")
        counts = {x["tag"]: x["count"] for x in s["series"] if not x["tag"].startswith("sys/")}
        return s if counts == {"train/loss": 40} else None

    found = wait_for(every_point, 60, "every point of a run longer than its token")
    assert found["collectors"][0]["corrupt_records"] == 0
