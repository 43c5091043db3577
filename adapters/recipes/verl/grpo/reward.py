"""The reward of `verl/grpo` with reward=arithmetic, in verl's custom reward function form
(reward.custom_reward_function.path/name): ``compute_score(data_source, solution_str,
ground_truth, extra_info) -> float``. Plain Python: tested without verl."""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"-?\d+")


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any
) -> float:
    """1 when the first number of the response is the ground truth, else 0."""
    found = _NUMBER.search(solution_str)
    return 1.0 if found and found.group() == str(ground_truth).strip() else 0.0
