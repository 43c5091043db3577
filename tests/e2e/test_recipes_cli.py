"""The recipe catalog through the real `tp` CLI and API process: `tp methods` lists every recipe
with its framework and its default runtime; `tp methods NAME`
shows a post-training recipe's parameters, roles, metrics and artifact; a `--set` that breaks a
declared type, range or choice is refused at preview, naming the parameter and the fix; and a
new post-training experiment locks the TRL version of its built-in runtime."""

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
    assert "pytorch-trl" in listed and "python-numpy" in listed
    assert "not registered" not in listed  # every recipe's default runtime is built in
    assert "trl >=1.16,<2" in listed

    shown = cli("methods", "trl/grpo").stdout
    for text in ("framework: trl >=1.16,<2", "roles: main", "train/reward",
                 "artifact: grpo.py, report.py, rewards.py, tiny_lm.py", "num_generations",
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


def test_a_new_post_training_experiment_locks_its_built_in_runtimes_trl(cli: Cli) -> None:
    """`pytorch-trl` is built in, so `tp new` locks the TRL version it provides and `tp
    validate` accepts it (a default runtime the server lacks: tests/unit/test_recipes.py)."""
    made = cli("new", "sft", "--method", "trl/sft")
    assert "runs on runtime" not in made.stderr, made.stderr
    lock = json.loads((cli.cwd / "sft" / "recipe.lock.json").read_text())
    assert (lock["framework"], lock["framework_version"], lock["runtime"]) == (
        "trl", "1.16.0", "pytorch-trl"), lock  # fmt: skip
    assert cli("validate", "sft").returncode == 0
