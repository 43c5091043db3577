"""The integration artifact of `trl/dpo`: Direct Preference Optimization with TRL's
`DPOTrainer` (the reference model is the starting model, loaded by TRL).

config.json → `DPOConfig(**args)` (see trl_common.py; ``loss_type`` is one name here and the
one-element list DPOConfig takes). Data: preference rows (`prompt`, `chosen`, `rejected`) from a
hub name, a file in the experiment, or `synthetic` (right and wrong sums). Logs `train/loss`,
`train/rewards/accuracies`, `train/rewards/margins`, … to TensorBoard in
$TUNEPLANE_METRICS_DIR; saves checkpoints, the model and report.json in the outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tiny_lm  # beside this file in the capsule (the recipe's include)
import trl_common


def render(config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The plan of the run; ``plan["args"]`` are `DPOConfig`'s keyword arguments."""
    plan: dict[str, Any] = trl_common.render_common(config, env)
    args = plan["args"]
    if "loss_type" in args:
        args["loss_type"] = [args["loss_type"]]
    return plan


def main() -> None:
    plan = trl_common.start(__file__, render)
    from trl import DPOConfig, DPOTrainer

    parts = trl_common.prepare(plan, tiny_lm.preference_rows)
    trainer = DPOTrainer(args=DPOConfig(**plan["args"]), **parts)
    trl_common.finish(trainer, plan, "trl/dpo")


if __name__ == "__main__":
    main()
