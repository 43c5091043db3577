"""Reward functions of `trl/grpo`, in the form GRPOTrainer calls them: ``f(completions,
**columns) -> list[float]``, one reward per completion (a string, or for conversational data the
list of messages generated). TRL logs each as `train/rewards/<function name>/mean`.
Plain Python: tested without TRL."""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"-?\d+")


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)  # conversational


def accuracy_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """1 when the first number of the completion is the row's `answer` column, else 0."""
    out = []
    for completion, want in zip(completions, answer, strict=True):
        found = _NUMBER.search(_text(completion))
        out.append(1.0 if found and found.group() == str(want).strip() else 0.0)
    return out


def format_reward(completions: list[Any], **_: Any) -> list[float]:
    """1 when the completion is a bare number (nothing else), else 0."""
    return [1.0 if re.fullmatch(r"\s*-?\d+\s*", _text(c)) else 0.0 for c in completions]


def length_reward(completions: list[Any], **_: Any) -> list[float]:
    """Shorter is better: 1 for an empty completion, 0 from 100 characters on."""
    return [1.0 - min(len(_text(c)), 100) / 100 for c in completions]


REWARDS = {
    "accuracy": (accuracy_reward,),
    "format": (format_reward,),
    "accuracy+format": (accuracy_reward, format_reward),
    "length": (length_reward,),
}
NEEDS_COLUMN = {accuracy_reward: "answer"}
