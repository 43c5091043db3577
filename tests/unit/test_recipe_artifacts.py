"""The post-training recipes' integration artifacts, as the Job Capsule ships them: their pure
part renders config.json (from the declared parameters at their config paths) into exactly the
framework's keyword arguments or Hydra overrides (golden values), checks what the framework
would refuse later, and imports none of TRL, verl, transformers or torch to do so (the verl recipe:
test_recipe_artifacts_verl.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.fixtures.recipe_artifacts import Load, config_of

pytestmark = pytest.mark.unit


TRAIN_DEFAULTS = {
    "num_train_epochs": 1.0,
    "max_steps": -1,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "seed": 42,
    "logging_steps": 10,
    "save_steps": 500,
    "bf16": True,
    "gradient_checkpointing": True,
    "output_dir": "/tuneplane/outputs/checkpoints",
    "report_to": ["tensorboard"],
    "disable_tqdm": True,
}


def test_sft_renders_sftconfig_and_lora(artifact: Load, member_env: dict[str, str]) -> None:
    sft = artifact("trl/sft", "sft.py")
    given = {"max_steps": "20", "learning_rate": "0.001", "lora_r": "8", "bf16": "false",
             "max_length": "64", "packing": "true"}  # fmt: skip
    plan = sft.render(config_of("trl/sft", given), member_env)
    assert plan == {
        "model": {"source": "tiny", "name": "tiny-llama"},
        "dataset": {"kind": "synthetic", "samples": 512},
        "peft": {
            "r": 8,
            "lora_alpha": 16,
            "lora_dropout": 0.05,
            "target_modules": "all-linear",
            "task_type": "CAUSAL_LM",
        },
        "args": {
            **TRAIN_DEFAULTS,
            "dataset_text_field": "text",
            "learning_rate": 0.001,
            "max_steps": 20,
            "max_length": 64,
            "packing": True,
            "loss_type": "nll",
            "bf16": False,
        },
        "metrics_dir": "/tuneplane/metrics",
        "output_dir": "/tuneplane/outputs",
        "resume_from": None,  # no TUNEPLANE_RESUME_FROM: a first attempt
    }


def test_trl_saves_into_tuneplanes_checkpoint_directory_and_resumes_from_its_checkpoint(
    artifact: Load, member_env: dict[str, str]
) -> None:
    sft = artifact("trl/sft", "sft.py")
    given = {**member_env, "TUNEPLANE_CHECKPOINT_DIR": "/tuneplane/checkpoints",
             "TUNEPLANE_RESUME_FROM": "/tuneplane/resume/checkpoint-40"}  # fmt: skip
    plan = sft.render(config_of("trl/sft", {}), given)
    assert plan["args"]["output_dir"] == "/tuneplane/checkpoints"  # docs/checkpoints.md
    assert plan["resume_from"] == "/tuneplane/resume/checkpoint-40"
    plan = sft.render(config_of("trl/sft", {}), {**given, "TUNEPLANE_RESUME_FROM": ""})
    assert plan["resume_from"] is None  # a first attempt (the variable is set, empty)


def test_grpo_renders_grpoconfig_rewards_and_a_local_model(
    artifact: Load, member_env: dict[str, str]
) -> None:
    ws = Path(member_env["TUNEPLANE_WORKSPACE"])
    (ws / "models" / "base").mkdir(parents=True)
    (ws / "prompts.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    grpo = artifact("trl/grpo", "grpo.py")
    given = {"model": "models/base", "model_dtype": "bfloat16", "dataset": "prompts.jsonl",
             "num_generations": "4", "max_completion_length": "32", "beta": "0.04",
             "use_vllm": "true", "reward_funcs": "accuracy+format"}  # fmt: skip
    plan = grpo.render(config_of("trl/grpo", given), member_env)
    assert plan == {
        "model": {"source": "pretrained", "name": str(ws / "models" / "base")},
        "dataset": {
            "kind": "file",
            "format": "json",
            "path": str(ws / "prompts.jsonl"),
            "split": "train",
        },
        "peft": None,
        "reward_funcs": ["accuracy_reward", "format_reward"],
        "args": {
            **TRAIN_DEFAULTS,
            "learning_rate": 1e-6,
            "num_generations": 4,
            "max_completion_length": 32,
            "temperature": 1.0,
            "top_p": 1.0,
            "beta": 0.04,
            "epsilon": 0.2,
            "num_iterations": 1,
            "loss_type": "dapo",
            "scale_rewards": "group",
            "mask_truncated_completions": False,
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": 0.3,
            "model_init_kwargs": {"dtype": "bfloat16"},
        },
        "metrics_dir": "/tuneplane/metrics",
        "output_dir": "/tuneplane/outputs",
        "resume_from": None,  # no TUNEPLANE_RESUME_FROM: a first attempt
    }


def test_grpo_refuses_a_generation_batch_of_partial_groups(
    artifact: Load, member_env: dict[str, str]
) -> None:
    grpo = artifact("trl/grpo", "grpo.py")
    tuneplane_recipe = sys.modules["tuneplane_recipe"]
    given = {"per_device_train_batch_size": "5", "num_generations": "4"}
    gang = {**member_env, "NNODES": "2", "NPROC_PER_NODE": "1"}
    with pytest.raises(tuneplane_recipe.ConfigError) as caught:
        grpo.render(config_of("trl/grpo", given), gang)
    assert caught.value.problem == (
        "the generation batch (5 per device × 2 processes × 1 accumulation steps = 10) is not"
        " a multiple of num_generations (4)"
    )
    assert "choose a num_generations that divides 10" in caught.value.fix
    given["gradient_accumulation_steps"] = "2"  # 20 = 5 groups of 4
    assert grpo.render(config_of("trl/grpo", given), gang)["args"]["num_generations"] == 4


def test_dpo_renders_dpoconfig_with_its_loss_list(
    artifact: Load, member_env: dict[str, str]
) -> None:
    dpo = artifact("trl/dpo", "dpo.py")
    given = {"model": "Qwen/Qwen2.5-0.5B", "dataset": "trl-lib/ultrafeedback_binarized",
             "loss_type": "ipo", "beta": "0.5", "precompute_ref_log_probs": "true"}  # fmt: skip
    plan = dpo.render(config_of("trl/dpo", given), member_env)
    assert plan["model"] == {"source": "pretrained", "name": "Qwen/Qwen2.5-0.5B"}
    assert plan["dataset"] == {
        "kind": "hub",
        "name": "trl-lib/ultrafeedback_binarized",
        "split": "train",
    }
    assert plan["args"] == {
        **TRAIN_DEFAULTS,
        "learning_rate": 1e-6,
        "max_length": 1024,
        "beta": 0.5,
        "loss_type": ["ipo"],
        "precompute_ref_log_probs": True,
    }


def test_trl_data_sets_that_cannot_be_read_are_refused(
    artifact: Load, member_env: dict[str, str]
) -> None:
    sft = artifact("trl/sft", "sft.py")
    error = sys.modules["tuneplane_recipe"].ConfigError
    (Path(member_env["TUNEPLANE_WORKSPACE"]) / "notes.txt").write_text("x")
    with pytest.raises(error, match=r"dataset notes\.txt is a \.txt file"):
        sft.render(config_of("trl/sft", {"dataset": "notes.txt"}), member_env)
    with pytest.raises(error, match=r"dataset data/missing\.jsonl is not in the experiment"):
        sft.render(config_of("trl/sft", {"dataset": "data/missing.jsonl"}), member_env)
    with pytest.raises(error, match="neither max_steps nor num_train_epochs"):
        sft.render(config_of("trl/sft", {"num_train_epochs": "0"}), member_env)


def test_torchrun_relaunch_follows_the_gang(artifact: Load) -> None:
    artifact("trl/sft", "sft.py")
    argv = sys.modules["tuneplane_recipe"].torchrun_argv
    assert argv("/a/sft.py", {}) is None
    gang = {"NNODES": "2", "NPROC_PER_NODE": "4", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.5",
            "MASTER_PORT": "29400"}  # fmt: skip
    assert argv("/a/sft.py", gang, python="python3") == [
        "python3", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=4",
        "--node-rank=1", "--master-addr=10.0.0.5", "--master-port=29400", "/a/sft.py",
    ]  # fmt: skip
    assert argv("/a/sft.py", {**gang, "TORCHELASTIC_RUN_ID": "x"}) is None  # already under it


def test_a_world_of_one_process_is_not_distributed(
    artifact: Load, member_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-member job gets the rendezvous variables, LOCAL_RANK=0 among them; with it,
    transformers' Trainer would wrap the model in DDP over a world of one (about 16% of the
    steps/s, docs/benchmarks.md). The TRL recipes drop LOCAL_RANK then, and only then."""
    sft = artifact("trl/sft", "sft.py")
    common = sys.modules["trl_common"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(config_of("trl/sft", {"bf16": "false"})))
    rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "0",
                  "NODE_RANK": "0", "LOCAL_RANK": "0", "NPROC_PER_NODE": "1"}  # fmt: skip
    for name, value in {**member_env, **rendezvous, "CONFIG": str(config)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("NNODES", "1")
    common.start(sft.__file__, sft.render)
    assert "LOCAL_RANK" not in os.environ
    monkeypatch.setenv("LOCAL_RANK", "0")  # a member of a gang of two, under torchrun already
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("NNODES", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    common.start(sft.__file__, sft.render)
    assert os.environ["LOCAL_RANK"] == "0"


def test_grpo_reward_functions(artifact: Load) -> None:
    rewards = artifact("trl/grpo", "rewards.py")
    completions = ["19", " 19 and more", "20", "x", [{"role": "assistant", "content": "19"}]]
    assert rewards.accuracy_reward(completions, answer=["19"] * 5) == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert rewards.format_reward(completions) == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert rewards.length_reward(["", "x" * 50, "x" * 500]) == [1.0, 0.5, 0.0]


def test_the_tiny_model_and_the_synthetic_data(artifact: Load) -> None:
    artifact("trl/sft", "sft.py")
    tiny = sys.modules["tiny_lm"]
    alphabet = tiny.byte_alphabet()
    assert len(set(alphabet)) == 256 and alphabet[ord("A")] == "A" and alphabet[32] == "Ġ"
    config = tiny.llama_config(100)
    assert len(tiny.vocab()) == 259 <= config["vocab_size"] and config["vocab_size"] % 8 == 0
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert tiny.sft_rows(3, 0) == tiny.sft_rows(3, 0)
    for row in tiny.prompt_rows(20, 1):
        a, b = row["prompt"].rstrip("=").split("+")
        assert int(a) + int(b) == int(row["answer"])
    pair = tiny.preference_rows(1, 2)[0]
    assert int(pair["rejected"]) == int(pair["chosen"]) + 1
