"""The integration artifact of `verl/grpo`: GRPO with verl's PPO trainer
(`python -m verl.trainer.main_ppo`, Hydra config `ppo_trainer`) and
``algorithm.adv_estimator=grpo``.

config.json's ``verl`` object holds parameters at their verl config paths; ``render`` flattens
it into Hydra overrides, adds what the platform fixes (the GRPO estimator, the gang's nodes and
GPUs, TensorBoard in $TUNEPLANE_METRICS_DIR, checkpoints in $TUNEPLANE_CHECKPOINT_DIR, each
marked complete, resumed from $TUNEPLANE_RESUME_FROM; else in $TUNEPLANE_OUTPUT_DIR) and what
``run`` asks for (the model: a hub name, a model directory in the experiment, or `tiny-llama`
built from a config and saved; the data: parquet files in verl's RL format, or `synthetic`
additions; the reward: reward.py's exact answer, or verl's built-in scorers by data source).
``render`` is pure and tested without verl; ``main`` builds what must exist on disk and then
replaces itself with verl's trainer, which starts the actor, rollout and reference workers on
the Ray cluster the platform started (docs/recipes.md).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tiny_lm  # beside this file in the capsule (the recipe's include)
from tuneplane_recipe import ConfigError, Gang, fail, gang, load_config, local_path, paths, section

HERE = Path(__file__).resolve().parent
SYNTHETIC_SOURCE = "tuneplane/arithmetic"
SYNTHETIC_PROMPT_TOKENS = 32  # "user: 49+49=\nassistant: " is 24 byte tokens


def flatten(tree: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out += flatten(value, path + ".") if isinstance(value, Mapping) else [(path, value)]
    return out


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar: strings always quoted (so that `null`, `1e-3` or a
    path stay strings), lists in brackets."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    escaped = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _check_batches(verl: Mapping[str, Any], g: Gang) -> None:
    """verl's own batch rules (verl.utils.config.validate_config, ActorConfig.validate), checked
    before Ray and the workers start."""
    data, arr = section(verl, "data"), section(verl, "actor_rollout_ref")
    actor, rollout = section(arr, "actor"), section(arr, "rollout")
    gpus, batch, n = g.world_size, int(data["train_batch_size"]), int(rollout["n"])
    mini = int(actor["ppo_mini_batch_size"])
    if batch * n % gpus:
        raise ConfigError(
            f"train_batch_size × rollout_n ({batch} × {n}) is not a multiple of the job's"
            f" {gpus} GPUs ({g.nnodes} members × {g.nproc_per_node})",
            f"choose a train_batch_size or rollout_n whose product divides by {gpus}",
        )
    if batch < mini:
        raise ConfigError(f"train_batch_size ({batch}) is below ppo_mini_batch_size ({mini})",
                          f"set ppo_mini_batch_size to at most {batch}")  # fmt: skip
    tp = int(rollout.get("tensor_model_parallel_size", 1))
    if gpus % tp:
        raise ConfigError(f"rollout tensor_model_parallel_size {tp} does not divide the job's"
                          f" {gpus} GPUs", f"use a divisor of {gpus}")  # fmt: skip


def _checkpoints(env: Mapping[str, str]) -> dict[str, Any]:
    """With TunePlane's checkpoint directory (docs/checkpoints.md): verl saves its
    ``global_step_<N>`` directories there, each marked complete by tuneplane_verl.py's hook
    once verl wrote it, and a retry resumes from ``TUNEPLANE_RESUME_FROM`` with verl's own
    resume (the actor's shards, optimizer and the data loader's position; its global step
    from the directory's name). The resume directory is read-only: verl never deletes it."""
    work = env.get("TUNEPLANE_CHECKPOINT_DIR")
    if not work:
        return {}
    out: dict[str, Any] = {
        "trainer.default_local_dir": work,
        "trainer.checkpoint_callback_class": "tuneplane_verl.MarkComplete",
        "trainer.del_local_ckpt_after_load": False,
        "trainer.resume_mode": "disable",  # a first attempt, or none verified: from the start
    }
    resume = env.get("TUNEPLANE_RESUME_FROM")
    if resume:
        if not re.fullmatch(r"global_step_\d+", Path(resume).name):
            raise ConfigError(
                f"TUNEPLANE_RESUME_FROM {resume} is not one of verl's checkpoints"
                " (global_step_<N>): verl takes the step to resume at from that name",
                "resume verl/grpo only from checkpoints it saved itself (trainer.save_freq)",
            )
        out.update({"trainer.resume_mode": "resume_path", "trainer.resume_from_path": resume})
    return out


def render(config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The plan: ``overrides`` (Hydra's, for verl.trainer.main_ppo), the files ``main`` makes
    (``tiny_model``, ``synthetic``), the Ray workers' ``env`` and the trainer's ``argv``."""
    where, g = paths(env), gang(env)
    run, verl = section(config, "run"), section(config, "verl")
    _check_batches(verl, g)
    made = where.output
    if g.nnodes > 1:  # verl's workers and its data loader may run on any member
        if not env.get("TUNEPLANE_SHARED_DIR"):
            needs = [k for k in ("model", "train_files", "val_files")
                     if run.get(k) in (tiny_lm.TINY, "synthetic")]  # fmt: skip
            if needs:
                raise ConfigError(
                    f"{', '.join(needs)} would be made on member 0 only, and this job has"
                    f" {g.nnodes} members and no shared directory",
                    "name a hub model and data sets every member can read, or run on a backend"
                    " that shares a directory ($TUNEPLANE_SHARED_DIR)",
                )
        else:
            made = Path(env["TUNEPLANE_SHARED_DIR"]) / env.get("TUNEPLANE_JOB_ID", "job")
    data = section(verl, "data")
    prompt, response = int(data["max_prompt_length"]), int(data["max_response_length"])
    fixed: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,  # GRPO puts the KL in the actor's loss instead
        "trainer.critic_warmup": 0,
        "trainer.logger": ["console", "tensorboard"],
        "trainer.project_name": "tuneplane",
        "trainer.experiment_name": env.get("TUNEPLANE_JOB_ID", "local"),
        "trainer.nnodes": g.nnodes,
        "trainer.n_gpus_per_node": g.nproc_per_node,
        "trainer.default_local_dir": str(where.output / "checkpoints"),
        **_checkpoints(env),
    }
    plan: dict[str, Any] = {"tiny_model": None, "synthetic": None}
    model = str(run.get("model", tiny_lm.TINY))
    if model == tiny_lm.TINY:
        plan["tiny_model"] = {"dir": str(made / "tiny-llama"), "max_positions": prompt + response,
                              "seed": 0}  # fmt: skip
        fixed["actor_rollout_ref.model.path"] = plan["tiny_model"]["dir"]
    else:
        found = local_path(model, where.workspace)
        fixed["actor_rollout_ref.model.path"] = str(found) if found else model
    for split, key in (("train", "train_files"), ("test", "val_files")):
        name = str(run.get(key, "synthetic"))
        if name == "synthetic":
            plan["synthetic"] = {"dir": str(made / "data"), "samples": int(run.get("samples", 256))}
            fixed[f"data.{key}"] = str(made / "data" / f"{split}.parquet")
            continue
        found = local_path(name, where.workspace)
        if found is None and not name.startswith(("hdfs://", "s3://", "gs://")):
            raise ConfigError(f"{key} {name} is not in the experiment ({where.workspace})",
                              "put the parquet file in the experiment and name it relative"
                              " to it")  # fmt: skip
        fixed[f"data.{key}"] = str(found) if found else name
    if plan["tiny_model"] and plan["synthetic"] and prompt < SYNTHETIC_PROMPT_TOKENS:
        raise ConfigError(  # else verl filters every prompt out, and fails later on an empty set
            f"max_prompt_length {prompt} is shorter than the synthetic prompts in the chat"
            f" template of tiny-llama (up to {SYNTHETIC_PROMPT_TOKENS} tokens)",
            f"set max_prompt_length to at least {SYNTHETIC_PROMPT_TOKENS}",
        )
    if run.get("reward", "arithmetic") == "arithmetic":
        fixed["reward.custom_reward_function.path"] = str(HERE / "reward.py")
        fixed["reward.custom_reward_function.name"] = "compute_score"
    # the trainer runs in a Ray actor: variables reach it through the job's runtime_env
    worker_env = {"TENSORBOARD_DIR": str(where.metrics)}
    if "trainer.checkpoint_callback_class" in fixed:  # the hook is imported on verl's driver
        worker_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    for name, value in worker_env.items():
        fixed[f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}"] = value
    given = flatten(verl)
    clash = sorted({k for k, _ in given} & {k.lstrip("+") for k in fixed})
    if clash:
        raise ConfigError(f"config.json sets what the recipe fixes: {', '.join(clash)}",
                          "leave these to the recipe")  # fmt: skip
    overrides = [f"{k}={hydra_value(v)}" for k, v in [*fixed.items(), *sorted(given)]]
    rollout = section(section(verl, "actor_rollout_ref"), "rollout")
    plan.update(
        engine=str(rollout.get("name", "vllm")),
        overrides=overrides,
        env=worker_env,
        argv=[sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
    )
    return plan


def synthetic_rows(samples: int, split: str) -> list[dict[str, Any]]:
    """verl's RL data format: a chat prompt, the data source the reward is chosen by, and the
    ground truth the reward compares with."""
    seed = 0 if split == "train" else 1
    return [
        {
            "data_source": SYNTHETIC_SOURCE,
            "prompt": [{"role": "user", "content": row["prompt"]}],
            "ability": "arithmetic",
            "reward_model": {"style": "rule", "ground_truth": row["answer"]},
            "extra_info": {"split": split, "index": i},
        }
        for i, row in enumerate(tiny_lm.prompt_rows(samples, seed))
    ]


def make_files(plan: Mapping[str, Any]) -> None:
    """What the overrides point at and does not exist yet: the tiny model, the synthetic data."""
    tiny = plan["tiny_model"]
    if tiny is not None:
        tiny_lm.build_model(tiny["max_positions"], tiny["seed"]).save_pretrained(tiny["dir"])
        tiny_lm.build_tokenizer().save_pretrained(tiny["dir"])
    synthetic = plan["synthetic"]
    if synthetic is not None:
        import pandas as pd

        Path(synthetic["dir"]).mkdir(parents=True, exist_ok=True)
        for split in ("train", "test"):
            rows = synthetic_rows(synthetic["samples"], split)
            pd.DataFrame(rows).to_parquet(Path(synthetic["dir"]) / f"{split}.parquet")


# the rollout engines verl 0.9.1's trainer can generate with (its RolloutReplicaRegistry), by the
# module each one needs in the runtime
ENGINE_MODULES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}
NO_CPU_RUN = (
    "verl 0.9.1 trains on GPUs only: its trainer asks Ray for a GPU per process"
    " (single_controller/ray/base.py: 'Total available GPUs 0 is less than total desired GPUs"
    " N'), its workers join a process group with NCCL (utils/distributed.py; a CPU PyTorch has"
    " none), and it generates only through a vLLM, SGLang or TensorRT-LLM server"
)


def preflight(engine: str, accelerators: int, installed: Callable[[str], bool]) -> None:
    """What verl 0.9.1 needs of the member it starts on and would otherwise fail on deep inside
    Ray after a minute (or wait for forever): GPUs and the rollout engine. ``accelerators`` is
    the GPUs (or NPUs) this process sees; ``installed`` tells whether a module is importable."""
    missing = []
    if accelerators < 1:
        missing.append("this member has no GPU")
    module = ENGINE_MODULES.get(engine, engine)
    if not installed(module):
        missing.append(f"the runtime has no {engine} (rollout_name; module {module})")
    if missing:
        raise ConfigError(
            f"{' and '.join(missing)}: {NO_CPU_RUN}",
            f"submit with a GPU profile and a runtime with {engine} built for its CUDA"
            " (docs/recipes.md, 'What a GPU run of verl/grpo needs')",
        )


def _accelerators() -> int:
    import torch

    npu = getattr(torch, "npu", None)  # Ascend's torch_npu, which verl also runs on
    return int(torch.cuda.device_count()) + (int(npu.device_count()) if npu is not None else 0)


def main() -> None:
    try:
        plan = render(load_config(), os.environ)
        found = lambda module: importlib.util.find_spec(module) is not None  # noqa: E731
        preflight(plan["engine"], _accelerators(), found)
    except ConfigError as error:
        fail(error)
    make_files(plan)
    os.environ.update(plan["env"])
    print("tuneplane-recipe: " + " ".join(plan["argv"]), flush=True)
    os.execv(plan["argv"][0], plan["argv"])


if __name__ == "__main__":
    main()
