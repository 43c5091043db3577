"""The recipe catalog through the real `tp` CLI and API process: `tp methods` lists every recipe
with its framework and says when its default runtime is not registered; `tp methods NAME`
shows a post-training recipe's parameters, roles, metrics and artifact; a `--set` that breaks a
declared type, range or choice is refused at preview, naming the parameter and the fix; and a
recipe whose default runtime the operator has not registered is refused with the way out."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_walkthrough import Cli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_tp_methods_lists_and_shows_the_post_training_recipes(cli: Cli) -> None:
    listed = cli("methods").stdout
    for name in ("custom/custom", "numpy/mlp-classification", "trl/sft", "trl/grpo", "trl/dpo",
                 "verl/grpo"):  # fmt: skip
        assert name in listed, listed
    assert "pytorch-trl (not registered" in listed and "python-numpy" in listed
    assert "trl >=1.16,<2" in listed

    shown = cli("methods", "trl/grpo").stdout
    for text in ("framework: trl >=1.16,<2", "roles: main", "train/reward",
                 "artifact: grpo.py, rewards.py, tiny_lm.py", "num_generations",
                 "accuracy+format", "reward_funcs"):  # fmt: skip
        assert text in shown, shown
    data = json.loads(cli("methods", "verl/grpo", "--json").stdout)
    assert data["framework"] == "verl" and data["needs"] == ["capsule", "shared_outputs"]
    params = {p["name"]: p for p in data["params"]}
    assert params["rollout_n"]["config"] == "verl.actor_rollout_ref.rollout.n"
    assert params["rollout_name"]["choices"] == ["vllm", "sglang", "trtllm"]


@pytest.mark.parametrize(
    ("setting", "says", "fix"),
    [
        ("num_generations=1", "parameter 'num_generations' is 1, below its minimum 2",
         "fix: set num_generations to at least 2"),
        ("loss_type=ppo", "parameter 'loss_type' is 'ppo', not one of its choices",
         "fix: choose one of: grpo, dr_grpo, dapo"),
        ("use_vllm=maybe", "parameter 'use_vllm' must be a bool",
         "fix: pass a bool, e.g. --set use_vllm=<bool>"),
        ("num_generation=4", "method trl/grpo has no parameter 'num_generation'",
         "num_generations"),
    ],
)  # fmt: skip
def test_a_bad_set_never_reaches_the_queue(cli: Cli, setting: str, says: str, fix: str) -> None:
    cli("new", "rl", "--method", "trl/grpo")
    refused = cli("submit", "rl", "--profile", "cpu:1", "--preview", "--set", setting, ok=False)
    assert refused.returncode != 0 and says in refused.stderr, refused.stderr
    assert fix in refused.stderr, refused.stderr
    assert not list((cli.cwd / ".tuneplane-data").glob("submissions/pv-*.json"))


def test_an_unregistered_default_runtime_is_refused_with_the_fix(cli: Cli) -> None:
    made = cli("new", "sft", "--method", "trl/sft")  # works: the lock pins no trl version yet
    assert "runs on runtime 'pytorch-trl' by default" in made.stderr, made.stderr
    lock = json.loads((cli.cwd / "sft" / "recipe.lock.json").read_text())
    assert lock["framework"] == "trl" and "framework_version" not in lock
    checked = cli("validate", "sft", ok=False)
    assert "method trl/sft runs on runtime 'pytorch-trl' by default" in checked.stderr
    assert "tp runtime add" in checked.stderr
    refused = cli("submit", "sft", "--profile", "cpu:1", "--preview", "--set", "max_steps=5",
                  ok=False)  # fmt: skip
    assert refused.returncode != 0
    assert "runs on runtime 'pytorch-trl' by default" in refused.stderr, refused.stderr
    assert "tp runtime add" in refused.stderr and "--runtime" in refused.stderr
