"""`verl/grpo` against verl itself (0.9.1, CPU): the artifact, exactly as the Job Capsule ships
it, makes the tiny model and the synthetic data, and its Hydra overrides compose with verl's own
`ppo_trainer` config into one that verl's `validate_config` accepts (GRPO: a reference policy,
no critic), whose custom reward verl loads and whose training set verl's RLHFDataset reads with
the tiny model's tokenizer. Training itself needs GPUs and a rollout engine: on a CPU the
artifact stops before Ray starts, with verl's reasons (docs/recipes.md).

Needs a Python with verl: `deploy/dev/test.sh` makes one (`deploy/dev/post-training-env.sh`)
and sets TUNEPLANE_POST_TRAINING_PYTHON; elsewhere this test is skipped, saying so."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from adapters.recipes import load_recipes
from domain.catalog import resolve_params

PYTHON = os.environ.get("TUNEPLANE_POST_TRAINING_PYTHON", "")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        not PYTHON,
        reason="no verl: `export TUNEPLANE_POST_TRAINING_PYTHON="
        "$(bash deploy/dev/post-training-env.sh)`",
    ),
]

CHECK = """
import json, os, sys
sys.path.insert(0, os.path.dirname(os.environ["ENTRY"]))
import grpo, tuneplane_recipe
plan = grpo.render(tuneplane_recipe.load_config(), os.environ)
grpo.make_files(plan)

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
import verl.trainer.main_ppo as main_ppo
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils import hf_tokenizer
from verl.utils.config import validate_config
from verl.utils.dataset.rl_dataset import RLHFDataset

config_dir = os.path.join(os.path.dirname(main_ppo.__file__), "config")
with initialize_config_dir(config_dir=config_dir, version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=plan["overrides"])
OmegaConf.resolve(cfg)
critic, reference = need_critic(cfg), need_reference_policy(cfg)
validate_config(cfg, use_reference_policy=reference, use_critic=critic)
reward = get_custom_reward_fn(cfg)
tokenizer = hf_tokenizer(cfg.actor_rollout_ref.model.path)
data = RLHFDataset(data_files=cfg.data.train_files, tokenizer=tokenizer, config=cfg.data)
row = data[0]
truth = row["reward_model"]["ground_truth"]

from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
hook = build_checkpoint_callback(cfg)  # as verl's driver does: by trainer.checkpoint_callback_class
saved = os.path.join(cfg.trainer.default_local_dir, "global_step_3")
os.makedirs(os.path.join(saved, "actor"))
open(os.path.join(saved, "data.pt"), "wb").close()
hook.on_save(trainer=None, global_step=3, checkpoint_dir=saved, async_save=False)
print("RESULT " + json.dumps({
    "hook": type(hook).__name__, "marked": open(os.path.join(saved, "COMPLETE")).read(),
    "resume_mode": cfg.trainer.resume_mode, "resume_from_path": cfg.trainer.resume_from_path,
    "del_local_ckpt_after_load": cfg.trainer.del_local_ckpt_after_load,
    "pythonpath": cfg.ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH,
    "critic": critic, "reference": reference,
    "adv_estimator": cfg.algorithm.adv_estimator, "rollout_n": cfg.actor_rollout_ref.rollout.n,
    "actor_rollout_n": cfg.actor_rollout_ref.actor.rollout_n,
    "lr": cfg.actor_rollout_ref.actor.optim.lr, "logger": list(cfg.trainer.logger),
    "tensorboard": cfg.ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR,
    "rows": len(data), "data_source": row["data_source"],
    "right": reward(data_source=row["data_source"], solution_str=truth, ground_truth=truth),
    "wrong": reward(data_source=row["data_source"], solution_str="x", ground_truth=truth),
}))
"""


def capsule(tmp_path: Path, given: dict[str, str]) -> dict[str, str]:
    """The artifact and config.json as the Job Capsule ships them; the member's environment."""
    (m,) = [m for m in load_recipes() if m.name == "verl/grpo"]
    artifact = tmp_path / "capsule" / "artifact"
    artifact.mkdir(parents=True)
    for file, data in m.artifact:
        (artifact / file).write_bytes(data)
    config = tmp_path / "capsule" / "config.json"
    config.write_text(json.dumps(m.config(resolve_params(m, dict(given)))))
    (tmp_path / "workspace").mkdir()
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "ENTRY": str(artifact / "grpo.py"),
        "CONFIG": str(config),
        "TUNEPLANE_OUTPUT_DIR": str(tmp_path / "outputs"),
        "TUNEPLANE_METRICS_DIR": str(tmp_path / "metrics"),
        "TUNEPLANE_WORKSPACE": str(tmp_path / "workspace"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",  # a CPU member, even on a machine with a GPU
        "TUNEPLANE_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "TUNEPLANE_RESUME_FROM": str(tmp_path / "resume" / "global_step_2"),  # a retry
    }


def test_the_rendered_overrides_are_a_config_verl_accepts(tmp_path: Path) -> None:
    given = {"train_batch_size": "8", "ppo_mini_batch_size": "4", "rollout_n": "4",
             "learning_rate": "2e-6", "synthetic_samples": "16", "max_response_length": "16",
             "max_prompt_length": "32"}  # fmt: skip
    env = capsule(tmp_path, given)
    done = subprocess.run([PYTHON, "-c", CHECK], cwd=tmp_path / "workspace", env=env,
                          capture_output=True, text=True, timeout=280)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert json.loads(line.removeprefix("RESULT ")) == {
        "hook": "MarkComplete",  # the artifact's, loaded by verl's own loader
        "marked": "3\n",
        "resume_mode": "resume_path",
        "resume_from_path": env["TUNEPLANE_RESUME_FROM"],
        "del_local_ckpt_after_load": False,
        "pythonpath": str(Path(env["ENTRY"]).parent),
        "critic": False,
        "reference": True,
        "adv_estimator": "grpo",
        "rollout_n": 4,
        "actor_rollout_n": 4,
        "lr": 2e-6,
        "logger": ["console", "tensorboard"],
        "tensorboard": str(tmp_path / "metrics"),
        "rows": 16,
        "data_source": "tuneplane/arithmetic",
        "right": 1.0,
        "wrong": 0.0,
    }
    assert (tmp_path / "outputs" / "tiny-llama" / "config.json").is_file()
    assert (tmp_path / "outputs" / "data" / "test.parquet").is_file()


def test_on_a_cpu_the_artifact_stops_with_verls_reasons_before_ray_starts(
    tmp_path: Path,
) -> None:
    """verl 0.9.1 cannot train here (docs/recipes.md): run as the runner runs it, on a member
    without a GPU and a runtime without vLLM, the artifact exits 2 saying why and what a GPU
    run needs, before it writes anything or starts Ray (which would fail a minute later on
    'Total available GPUs 0 is less than total desired GPUs 1')."""
    env = capsule(tmp_path, {"synthetic_samples": "8"})
    done = subprocess.run([PYTHON, env["ENTRY"]], cwd=tmp_path / "workspace", env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stderr.startswith(
        "tuneplane-recipe: this member has no GPU and the runtime has no vllm"
    ), done.stderr
    assert "Total available GPUs 0 is less than total desired GPUs N" in done.stderr
    assert "fix: submit with a GPU profile and a runtime with vllm" in done.stderr
    assert not (tmp_path / "outputs").exists() and "ray" not in done.stdout.lower()
