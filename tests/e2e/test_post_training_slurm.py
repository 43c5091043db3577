"""`trl/sft` through the whole platform on the real Slurm cluster (tests/fixtures/slurm.py), as a
2-member gang: `tp new` → `tp submit --preview` → `tp submit --commit`, admission and
reservation on the `debug` partition, the Job Capsule checked by the runner on each Slurm task
(the `pytorch-trl` contract against the node's Python: the post-training environment put first
on the members' PATH by TUNEPLANE_SLURM_RUNTIMES), one torch process group (gloo, CPU) over
torchrun's rendezvous from TunePlane's variables, TRL's logged steps shipped by the Slurm
collectors through the telemetry gateway. docs/slurm.md ("Runtimes on Slurm"), docs/recipes.md.

Needs the Python with TRL (`deploy/dev/post-training-env.sh`, set as
TUNEPLANE_POST_TRAINING_PYTHON by deploy/dev/test.sh); skipped, saying so, without it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.e2e.test_slurm_backend import Factory
from tests.e2e.test_slurm_metrics import slurm_with_metrics
from tests.e2e.test_telemetry_e2e import wait_for
from tests.e2e.test_walkthrough import job_id_in
from tests.fixtures.slurm import SlurmCluster

TRL_PYTHON = os.environ.get("TUNEPLANE_POST_TRAINING_PYTHON", "")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        not TRL_PYTHON,
        reason="no TRL: `export TUNEPLANE_POST_TRAINING_PYTHON="
        "$(bash deploy/dev/post-training-env.sh)`",
    ),
]
STEPS = 4
TINY = {"max_steps": str(STEPS), "logging_steps": "1", "bf16": "false",
        "synthetic_samples": "32", "per_device_train_batch_size": "4", "max_length": "32",
        "learning_rate": "0.001"}  # fmt: skip
SFT_METRICS = ("train/loss", "train/mean_token_accuracy", "train/learning_rate",
               "train/grad_norm", "train/entropy")  # fmt: skip


@pytest.mark.timeout(600)
async def test_sft_trains_as_one_process_group_of_two_slurm_members(
    api_servers_factory: Factory, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    runtime_bin = str(Path(TRL_PYTHON).parent)  # a venv's bin: python3 is its interpreter
    async with slurm_with_metrics(
        api_servers_factory, slurm_cluster, tmp_path,
        TUNEPLANE_SLURM_RUNTIMES=f"pytorch-trl={runtime_bin}",
    ) as slurm:  # fmt: skip
        cli = slurm.cli
        cli("new", "tune", "--method", "trl/sft")
        cli("validate", "tune")
        sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
        cli("submit", "tune", "--profile", "debug/cpu:4", *sets, "--preview")
        (saved,) = (cli.cwd / ".tuneplane-data" / "submissions").glob("pv-*.json")
        spec = json.loads(saved.read_text())["preview"]["spec"]
        assert spec["runtime"]["name"] == "pytorch-trl", spec
        assert [r["members"] for r in spec["roles"]] == [2], spec
        out = cli("submit", "--commit", str(saved))
        job_id = job_id_in(out.stdout)

        job = slurm.finished(job_id, timeout=480)
        logs = [cli("job", "logs", job_id, "--member", str(m), ok=False).stdout for m in (0, 1)]
        assert job["state"] == "succeeded", (job["reason"], logs)
        [attempt] = job["attempts"]
        assert [m["exit_code"] for m in attempt["members"]] == [0, 0], attempt
        # one process group of two over the nodes: torchrun from the rendezvous variables,
        # each member one rank of it (trl_common.start, torchrun_argv)
        for rank, log in enumerate(logs):
            assert "-m torch.distributed.run --nnodes=2 --nproc-per-node=1" in log, log
            assert f"--node-rank={rank} --master-addr=127.0.0.1" in log, log
            # 32 rows in batches of 4 per process: one epoch is 4 steps only with 2 processes
            # (data parallel over the group; alone, 4 steps would be epoch 0.5)
            assert "'epoch': '1'}" in log, log
        assert f"sft done after {STEPS} steps" in logs[0], logs[0]  # the world's rank 0 only
        assert "done after" not in logs[1], logs[1]

        # every primary metric TRL logged, at each logged step, from rank 0 (member 0)
        want = {(0, tag): STEPS for tag in SFT_METRICS}
        wait_for(lambda: want.items() <= slurm.counts(job_id).items(), 60, "TRL's points")
        assert not [k for k in slurm.counts(job_id) if k[0] == 1], "rank 1 logs nothing"
        # the steps and values TRL logged (its log lines round to 4 digits)
        logged = [float(v) for v in re.findall(r"\{'loss': '([0-9.]+)'", logs[0])]
        curve = slurm.api("GET", f"/v1/jobs/{job_id}/metrics/curve?tag=train/loss&points=100")
        [run] = [a for a in curve["attempts"] if a["member_id"] == attempt["members"][0]["id"]]
        assert [p["first_step"] for p in run["points"]] == list(range(1, STEPS + 1)), run
        assert [p["last"] for p in run["points"]] == pytest.approx(logged, rel=1e-3), logged
        shown = cli("job", "metrics", job_id).stdout
        assert all(tag in shown for tag in SFT_METRICS), shown

        # the model and report.json, written by rank 0 in its TUNEPLANE_OUTPUT_DIR in the
        # shared directory, recorded when it succeeded and hashed again there
        listed = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)["members"]
        files = {m["member"]: {f["path"] for f in m["files"]} for m in listed}
        assert {"report.json", "model/model.safetensors", "model/tokenizer.json"} <= files[0]
        verified = cli("artifacts", "verify", job_id).stdout
        assert f"{len(files[0])} files match manifest" in verified, verified
        outputs = slurm.shared / "outputs" / job_id / attempt["id"]
        report = json.loads((outputs / "0" / "report.json").read_text())
        assert report["global_step"] == STEPS and report["recipe"] == "trl/sft", report
        (outputs / "0" / "report.json").write_text("{}\n")  # changed on the shared filesystem
        tampered = cli("artifacts", "verify", job_id, ok=False)
        assert tampered.returncode == 1 and "report.json" in tampered.stdout, tampered

        # a job whose own PATH hides the runtime's environment (it comes after it, as a
        # container's env after its image's) gets the nodes' python3, without TRL's stack: the
        # runner refuses it against the pytorch-trl contract before any user code runs
        exp = cli.cwd / "hello" / "experiment.toml"
        exp.write_text(exp.read_text().replace("[env]", '[env]\nPATH = "/usr/bin:/bin"', 1))
        out = cli("submit", "hello", "--profile", "debug/cpu:1", "--runtime", "pytorch-trl",
                  "--set", "command=echo user code ran", "--yes")  # fmt: skip
        job = slurm.finished(job_id_in(out.stdout))
        [member] = job["attempts"][-1]["members"]
        assert (job["state"], member["exit_code"]) == ("failed", 95), (job["reason"], job["log"])
        assert "the runtime contract pins accelerate 1.16.0" in job["log"], job["log"]
        assert "user code ran" not in job["log"]
