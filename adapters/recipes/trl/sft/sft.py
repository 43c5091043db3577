"""The integration artifact of `trl/sft`: supervised fine-tuning with TRL's `SFTTrainer`.

config.json → `SFTConfig(**args)` (see trl_common.py); the model is a hub name, a path in the
experiment, or `tiny-llama` (built from a config, nothing downloaded); the data set is a hub
name, a .json/.jsonl/.parquet/.csv file in the experiment (a `text` column, or
prompt/completion, or conversational `messages`), or `synthetic` (generated additions).
Logs `train/loss`, `train/mean_token_accuracy`, … to TensorBoard in $TUNEPLANE_METRICS_DIR;
saves checkpoints, the final model and report.json in $TUNEPLANE_OUTPUT_DIR.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tiny_lm  # beside this file in the capsule (the recipe's include)
import trl_common


def render(config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The plan of the run; ``plan["args"]`` are `SFTConfig`'s keyword arguments."""
    plan: dict[str, Any] = trl_common.render_common(config, env)
    return plan


def main() -> None:
    plan = trl_common.start(__file__, render)
    from trl import SFTConfig, SFTTrainer

    parts = trl_common.prepare(plan, tiny_lm.sft_rows)
    trainer = SFTTrainer(args=SFTConfig(**plan["args"]), **parts)
    trl_common.finish(trainer, plan, "trl/sft")


if __name__ == "__main__":
    main()
