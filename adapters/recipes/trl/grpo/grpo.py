"""The integration artifact of `trl/grpo`: Group Relative Policy Optimization with TRL's
`GRPOTrainer` and the reward functions of rewards.py.

config.json → `GRPOConfig(**args)` (see trl_common.py) and ``reward.funcs`` → the trainer's
``reward_funcs``. Data: prompt-only rows (`prompt`, plus `answer` for the accuracy reward), from
a hub name, a file in the experiment, or `synthetic` (additions to complete). Generation runs in
the trainer (transformers), or in vLLM colocated with it (``use_vllm``). Logs `train/reward`,
`train/rewards/<function>/mean`, `train/kl`, `train/completions/mean_length`, … to TensorBoard
in $TUNEPLANE_METRICS_DIR; saves checkpoints, the model and report.json in the outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rewards  # beside this file in the capsule
import tiny_lm
import trl_common
from tuneplane_recipe import ConfigError, fail, gang, section


def render(config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The plan of the run; ``plan["args"]`` are `GRPOConfig`'s keyword arguments and
    ``plan["reward_funcs"]`` the names of the reward functions, in order."""
    plan: dict[str, Any] = trl_common.render_common(config, env)
    args = plan["args"]
    funcs = str(section(config, "reward").get("funcs", "accuracy+format"))
    if funcs not in rewards.REWARDS:
        raise ConfigError(f"unknown reward functions {funcs!r}",
                          "choose one of: " + ", ".join(rewards.REWARDS))  # fmt: skip
    plan["reward_funcs"] = [f.__name__ for f in rewards.REWARDS[funcs]]
    if args.get("use_vllm"):
        args["vllm_mode"] = "colocate"  # vLLM in the training processes: no separate server role
    # GRPOConfig's own rule, checked before any framework starts: each generation batch (the
    # global batch of one optimizer step) holds whole groups of num_generations completions.
    processes = gang(env).world_size
    batch = args["per_device_train_batch_size"] * processes * args["gradient_accumulation_steps"]
    generations = args["num_generations"]
    if batch % generations:
        raise ConfigError(
            f"the generation batch ({args['per_device_train_batch_size']} per device × "
            f"{processes} processes × {args['gradient_accumulation_steps']} accumulation steps"
            f" = {batch}) is not a multiple of num_generations ({generations})",
            f"make per_device_train_batch_size × gradient_accumulation_steps × {processes} a"
            f" multiple of {generations}, or choose a num_generations that divides {batch}",
        )
    return plan


def main() -> None:
    plan = trl_common.start(__file__, render)
    from trl import GRPOConfig, GRPOTrainer

    parts = trl_common.prepare(plan, tiny_lm.prompt_rows)
    funcs = [getattr(rewards, name) for name in plan["reward_funcs"]]
    columns = parts["train_dataset"].column_names
    for func in funcs:
        column = rewards.NEEDS_COLUMN.get(func)
        if column and column not in columns:
            fail(ConfigError(
                f"reward {func.__name__} needs a column {column!r}; the data set has {columns}",
                "add the column, or choose reward_funcs=format or length",
            ))  # fmt: skip
    trainer = GRPOTrainer(args=GRPOConfig(**plan["args"]), reward_funcs=funcs, **parts)
    trl_common.finish(trainer, plan, "trl/grpo")


if __name__ == "__main__":
    main()
