"""The post-training recipes' integration artifacts, as the Job Capsule ships them: their pure
part renders config.json (from the declared parameters at their config paths) into exactly the
framework's keyword arguments or Hydra overrides (golden values), checks what the framework
would refuse later, and imports none of TRL, verl, transformers or torch to do so."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from adapters.recipes import load_recipes
from domain.catalog import Method, resolve_params

pytestmark = pytest.mark.unit
SHARED = ("tuneplane_recipe", "tiny_lm", "trl_common", "rewards", "report")
FRAMEWORKS = {"trl", "verl", "transformers", "torch", "peft", "datasets", "ray"}

Load = Callable[[str, str], ModuleType]


def method(name: str) -> Method:
    (m,) = [m for m in load_recipes() if m.name == name]
    return m


def config_of(name: str, given: dict[str, str]) -> dict[str, Any]:
    """config.json as the capsule carries it, for ``--set`` values ``given``."""
    m = method(name)
    return m.config(resolve_params(m, dict(given)))


@pytest.fixture
def artifact(tmp_path: Path) -> Iterator[Load]:
    """Import an artifact's file by path from its files as the capsule ships them."""
    added: list[str] = []

    def load(recipe: str, file: str) -> ModuleType:
        where = tmp_path / "capsule" / recipe.replace("/", "-")
        if not where.exists():
            where.mkdir(parents=True)
            for name, data in method(recipe).artifact:
                (where / name).write_bytes(data)
            for shared in SHARED:  # another recipe's copy may be loaded
                sys.modules.pop(shared, None)
            sys.path.insert(0, str(where))
            added.append(str(where))
        spec = importlib.util.spec_from_file_location(f"artifact_{recipe}_{file}", where / file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield load
    for path in added:
        sys.path.remove(path)
    for shared in SHARED:
        sys.modules.pop(shared, None)
    assert not FRAMEWORKS & set(sys.modules), "rendering imported a framework"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "ws").mkdir()
    return {
        "TUNEPLANE_OUTPUT_DIR": "/tuneplane/outputs",
        "TUNEPLANE_METRICS_DIR": "/tuneplane/metrics",
        "TUNEPLANE_WORKSPACE": str(tmp_path / "ws"),
        "TUNEPLANE_JOB_ID": "job-1",
    }


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


def test_sft_renders_sftconfig_and_lora(artifact: Load, env: dict[str, str]) -> None:
    sft = artifact("trl/sft", "sft.py")
    given = {"max_steps": "20", "learning_rate": "0.001", "lora_r": "8", "bf16": "false",
             "max_length": "64", "packing": "true"}  # fmt: skip
    plan = sft.render(config_of("trl/sft", given), env)
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
    artifact: Load, env: dict[str, str]
) -> None:
    sft = artifact("trl/sft", "sft.py")
    given = {**env, "TUNEPLANE_CHECKPOINT_DIR": "/tuneplane/checkpoints",
             "TUNEPLANE_RESUME_FROM": "/tuneplane/resume/checkpoint-40"}  # fmt: skip
    plan = sft.render(config_of("trl/sft", {}), given)
    assert plan["args"]["output_dir"] == "/tuneplane/checkpoints"  # docs/checkpoints.md
    assert plan["resume_from"] == "/tuneplane/resume/checkpoint-40"
    plan = sft.render(config_of("trl/sft", {}), {**given, "TUNEPLANE_RESUME_FROM": ""})
    assert plan["resume_from"] is None  # a first attempt (the variable is set, empty)


def test_grpo_renders_grpoconfig_rewards_and_a_local_model(
    artifact: Load, env: dict[str, str]
) -> None:
    ws = Path(env["TUNEPLANE_WORKSPACE"])
    (ws / "models" / "base").mkdir(parents=True)
    (ws / "prompts.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    grpo = artifact("trl/grpo", "grpo.py")
    given = {"model": "models/base", "model_dtype": "bfloat16", "dataset": "prompts.jsonl",
             "num_generations": "4", "max_completion_length": "32", "beta": "0.04",
             "use_vllm": "true", "reward_funcs": "accuracy+format"}  # fmt: skip
    plan = grpo.render(config_of("trl/grpo", given), env)
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
    artifact: Load, env: dict[str, str]
) -> None:
    grpo = artifact("trl/grpo", "grpo.py")
    tuneplane_recipe = sys.modules["tuneplane_recipe"]
    given = {"per_device_train_batch_size": "5", "num_generations": "4"}
    gang = {**env, "NNODES": "2", "NPROC_PER_NODE": "1"}
    with pytest.raises(tuneplane_recipe.ConfigError) as caught:
        grpo.render(config_of("trl/grpo", given), gang)
    assert caught.value.problem == (
        "the generation batch (5 per device × 2 processes × 1 accumulation steps = 10) is not"
        " a multiple of num_generations (4)"
    )
    assert "choose a num_generations that divides 10" in caught.value.fix
    given["gradient_accumulation_steps"] = "2"  # 20 = 5 groups of 4
    assert grpo.render(config_of("trl/grpo", given), gang)["args"]["num_generations"] == 4


def test_dpo_renders_dpoconfig_with_its_loss_list(artifact: Load, env: dict[str, str]) -> None:
    dpo = artifact("trl/dpo", "dpo.py")
    given = {"model": "Qwen/Qwen2.5-0.5B", "dataset": "trl-lib/ultrafeedback_binarized",
             "loss_type": "ipo", "beta": "0.5", "precompute_ref_log_probs": "true"}  # fmt: skip
    plan = dpo.render(config_of("trl/dpo", given), env)
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


def test_trl_data_sets_that_cannot_be_read_are_refused(artifact: Load, env: dict[str, str]) -> None:
    sft = artifact("trl/sft", "sft.py")
    error = sys.modules["tuneplane_recipe"].ConfigError
    (Path(env["TUNEPLANE_WORKSPACE"]) / "notes.txt").write_text("x")
    with pytest.raises(error, match=r"dataset notes\.txt is a \.txt file"):
        sft.render(config_of("trl/sft", {"dataset": "notes.txt"}), env)
    with pytest.raises(error, match=r"dataset data/missing\.jsonl is not in the experiment"):
        sft.render(config_of("trl/sft", {"dataset": "data/missing.jsonl"}), env)
    with pytest.raises(error, match="neither max_steps nor num_train_epochs"):
        sft.render(config_of("trl/sft", {"num_train_epochs": "0"}), env)


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
    artifact: Load, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
    for name, value in {**env, **rendezvous, "CONFIG": str(config)}.items():
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


VERL_FIXED = [
    "algorithm.adv_estimator='grpo'",
    "algorithm.use_kl_in_reward=false",
    "trainer.critic_warmup=0",
    "trainer.logger=['console','tensorboard']",
    "trainer.project_name='tuneplane'",
    "trainer.experiment_name='job-1'",
]
VERL_PARAMS = [
    "actor_rollout_ref.actor.clip_ratio=0.2",
    "actor_rollout_ref.actor.entropy_coeff=0.0",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
    "actor_rollout_ref.actor.fsdp_config.param_offload=false",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type='low_var_kl'",
    "actor_rollout_ref.actor.loss_agg_mode='token-mean'",
    "actor_rollout_ref.actor.optim.lr=3e-06",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.model.lora_alpha=16",
    "actor_rollout_ref.model.lora_rank=0",
    "actor_rollout_ref.model.use_remove_padding=true",
    "actor_rollout_ref.ref.fsdp_config.param_offload=false",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.name='sglang'",
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.top_p=1.0",
    "algorithm.norm_adv_by_std_in_grpo=true",
    "data.filter_overlong_prompts=true",
    "data.max_prompt_length=64",
    "data.max_response_length=32",
    "data.train_batch_size=16",
    "data.truncation='error'",
    "trainer.save_freq=-1",
    "trainer.test_freq=-1",
    "trainer.total_epochs=1",
    "trainer.total_training_steps=5",
    "trainer.val_before_train=false",
]
VERL_GIVEN = {"learning_rate": "3e-6", "rollout_n": "4", "rollout_name": "sglang",
              "tensor_model_parallel_size": "2", "train_batch_size": "16",
              "ppo_mini_batch_size": "8", "max_prompt_length": "64", "max_response_length": "32",
              "total_training_steps": "5"}  # fmt: skip


def test_verl_grpo_renders_hydra_overrides_for_main_ppo(
    artifact: Load, env: dict[str, str], tmp_path: Path
) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    gang = {**env, "NNODES": "1", "NPROC_PER_NODE": "2"}
    plan = grpo.render(config_of("verl/grpo", VERL_GIVEN), gang)
    here = tmp_path / "capsule" / "verl-grpo"
    assert plan["overrides"] == [
        *VERL_FIXED,
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=2",
        "trainer.default_local_dir='/tuneplane/outputs/checkpoints'",
        "actor_rollout_ref.model.path='/tuneplane/outputs/tiny-llama'",
        "data.train_files='/tuneplane/outputs/data/train.parquet'",
        "data.val_files='/tuneplane/outputs/data/test.parquet'",
        f"reward.custom_reward_function.path='{here / 'reward.py'}'",
        "reward.custom_reward_function.name='compute_score'",
        "+ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR='/tuneplane/metrics'",
        *VERL_PARAMS,
    ]
    assert plan["argv"][1:3] == ["-m", "verl.trainer.main_ppo"]
    assert plan["argv"][3:] == plan["overrides"]
    assert plan["tiny_model"] == {"dir": "/tuneplane/outputs/tiny-llama", "max_positions": 96,
                                  "seed": 0}  # fmt: skip
    assert plan["synthetic"] == {"dir": "/tuneplane/outputs/data", "samples": 256}
    assert plan["env"] == {"TENSORBOARD_DIR": "/tuneplane/metrics"}
    assert plan["engine"] == "sglang"


def test_verl_grpo_saves_into_tuneplanes_checkpoint_directory_and_resumes_with_verls_own_resume(
    artifact: Load, env: dict[str, str], tmp_path: Path
) -> None:
    """docs/recipes.md: verl's global_step_<N> directories go to TUNEPLANE_CHECKPOINT_DIR, each
    marked complete by the artifact's hook (imported on verl's driver: the artifact's directory
    is on its PYTHONPATH), and a retry resumes with resume_mode=resume_path; verl never deletes
    the read-only resume directory."""
    grpo = artifact("verl/grpo", "grpo.py")
    here = tmp_path / "capsule" / "verl-grpo"
    given = {**env, "NPROC_PER_NODE": "2", "PYTHONPATH": "/opt/x",
             "TUNEPLANE_CHECKPOINT_DIR": "/tuneplane/checkpoints",
             "TUNEPLANE_RESUME_FROM": "/tuneplane/resume/global_step_20"}  # fmt: skip
    plan = grpo.render(config_of("verl/grpo", VERL_GIVEN), given)
    said = [o for o in plan["overrides"] if o.startswith(("trainer.", "+ray_kwargs"))]
    assert said[said.index("trainer.n_gpus_per_node=2") + 1 :] == [
        "trainer.default_local_dir='/tuneplane/checkpoints'",
        "trainer.checkpoint_callback_class='tuneplane_verl.MarkComplete'",
        "trainer.del_local_ckpt_after_load=false",
        "trainer.resume_mode='resume_path'",
        "trainer.resume_from_path='/tuneplane/resume/global_step_20'",
        "+ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR='/tuneplane/metrics'",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH='{here}:/opt/x'",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.total_epochs=1",
        "trainer.total_training_steps=5",
        "trainer.val_before_train=false",
    ]
    assert plan["env"]["PYTHONPATH"] == f"{here}:/opt/x"
    first = grpo.render(config_of("verl/grpo", VERL_GIVEN), {**given, "TUNEPLANE_RESUME_FROM": ""})
    assert "trainer.resume_mode='disable'" in first["overrides"]  # nothing to resume from
    assert not [o for o in first["overrides"] if o.startswith("trainer.resume_from_path")]
    with pytest.raises(sys.modules["tuneplane_recipe"].ConfigError) as caught:
        grpo.render(
            config_of("verl/grpo", VERL_GIVEN),
            {**given, "TUNEPLANE_RESUME_FROM": "/tuneplane/resume/checkpoint-20"},
        )
    assert "not one of verl's checkpoints (global_step_<N>)" in caught.value.problem
    config = config_of("verl/grpo", VERL_GIVEN)
    config["verl"]["trainer"]["resume_mode"] = "auto"  # a hand-edited config.json
    with pytest.raises(sys.modules["tuneplane_recipe"].ConfigError, match="resume_mode"):
        grpo.render(config, given)


def test_verls_checkpoint_hook_marks_each_saved_checkpoint_complete(
    artifact: Load, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = artifact("verl/grpo", "tuneplane_verl.py").MarkComplete(config={"trainer": {}})
    saved = tmp_path / "checkpoints" / "global_step_20"
    (saved / "actor").mkdir(parents=True)
    (saved / "actor" / "model_world_size_2_rank_0.pt").write_bytes(b"shard")
    (saved / "data.pt").write_bytes(b"loader")
    hook.on_save(trainer=None, global_step=20, checkpoint_dir=str(saved), async_save=False)
    assert (saved / "COMPLETE").read_text() == "20\n"
    pending = tmp_path / "checkpoints" / "global_step_30"
    pending.mkdir()
    for _ in range(2):  # verl's workers may still be writing it: never marked, said once
        hook.on_save(trainer=None, global_step=30, checkpoint_dir=str(pending), async_save=True)
    assert not (pending / "COMPLETE").exists()
    assert capsys.readouterr().err.count("saved asynchronously: not marked complete") == 1


def test_verl_grpo_with_a_hub_model_its_own_data_and_verl_rewards(
    artifact: Load, env: dict[str, str]
) -> None:
    ws = Path(env["TUNEPLANE_WORKSPACE"])
    (ws / "gsm8k").mkdir()
    (ws / "gsm8k" / "train.parquet").write_bytes(b"PAR1")
    grpo = artifact("verl/grpo", "grpo.py")
    given = {**VERL_GIVEN, "model": "Qwen/Qwen2.5-0.5B-Instruct", "reward": "verl-default",
             "train_files": "gsm8k/train.parquet",
             "val_files": "hdfs://data/test.parquet"}  # fmt: skip
    plan = grpo.render(config_of("verl/grpo", given), {**env, "NPROC_PER_NODE": "2"})
    assert plan["tiny_model"] is None and plan["synthetic"] is None
    assert "actor_rollout_ref.model.path='Qwen/Qwen2.5-0.5B-Instruct'" in plan["overrides"]
    assert f"data.train_files='{ws / 'gsm8k' / 'train.parquet'}'" in plan["overrides"]
    assert "data.val_files='hdfs://data/test.parquet'" in plan["overrides"]
    assert not [o for o in plan["overrides"] if o.startswith("reward.")]


@pytest.mark.parametrize(
    ("given", "gang", "problem"),
    [
        ({"train_batch_size": "3", "rollout_n": "3"}, {"NPROC_PER_NODE": "2"},
         "train_batch_size × rollout_n (3 × 3) is not a multiple of the job's 2 GPUs"),
        ({"train_batch_size": "8", "ppo_mini_batch_size": "16"}, {},
         "train_batch_size (8) is below ppo_mini_batch_size (16)"),
        ({"tensor_model_parallel_size": "4"}, {"NPROC_PER_NODE": "2"},
         "rollout tensor_model_parallel_size 4 does not divide the job's 2 GPUs"),
        ({}, {"NNODES": "2"}, "model, train_files, val_files would be made on member 0 only"),
        ({"max_prompt_length": "16"}, {}, "max_prompt_length 16 is shorter than the synthetic"),
    ],
)  # fmt: skip
def test_verl_grpo_refuses_what_verl_would_refuse(
    artifact: Load, env: dict[str, str], given: dict[str, str], gang: dict[str, str], problem: str
) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    with pytest.raises(sys.modules["tuneplane_recipe"].ConfigError) as caught:
        grpo.render(config_of("verl/grpo", given), {**env, **gang})
    assert problem in caught.value.problem and caught.value.fix


def test_verl_grpo_makes_files_in_the_shared_directory_of_a_multi_member_job(
    artifact: Load, env: dict[str, str]
) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    gang = {**env, "NNODES": "2", "TUNEPLANE_SHARED_DIR": "/shared"}
    plan = grpo.render(config_of("verl/grpo", {}), gang)
    assert plan["tiny_model"]["dir"] == "/shared/job-1/tiny-llama"
    assert "data.train_files='/shared/job-1/data/train.parquet'" in plan["overrides"]
    assert "trainer.nnodes=2" in plan["overrides"]


@pytest.mark.parametrize(
    ("engine", "accelerators", "modules", "problem"),
    [
        ("vllm", 0, {"vllm"}, "this member has no GPU: verl 0.9.1 trains on GPUs only"),
        ("vllm", 1, set(), "the runtime has no vllm (rollout_name; module vllm): verl 0.9.1"),
        ("trtllm", 1, {"vllm"}, "the runtime has no trtllm (rollout_name; module tensorrt_llm)"),
        ("sglang", 0, set(), "this member has no GPU and the runtime has no sglang"),
    ],
)  # fmt: skip
def test_verl_grpo_refuses_a_member_it_cannot_train_on(
    artifact: Load, engine: str, accelerators: int, modules: set[str], problem: str
) -> None:
    """verl 0.9.1 needs GPUs and a rollout engine server (docs/recipes.md): a CPU-only member,
    or a runtime without the engine, is refused before Ray starts, with verl's reasons."""
    grpo = artifact("verl/grpo", "grpo.py")
    with pytest.raises(sys.modules["tuneplane_recipe"].ConfigError) as caught:
        grpo.preflight(engine, accelerators, modules.__contains__)
    assert problem in caught.value.problem
    assert "Total available GPUs 0 is less than total desired GPUs" in caught.value.problem
    assert "NCCL" in caught.value.problem and "GPU profile" in caught.value.fix
    grpo.preflight("sglang", 1, {"sglang"}.__contains__)  # a GPU and the engine: nothing to say


def test_verl_grpo_keeps_what_it_fixes(artifact: Load, env: dict[str, str]) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    config = config_of("verl/grpo", {})
    config["verl"]["trainer"]["nnodes"] = 4  # not a parameter: a hand-edited config.json
    with pytest.raises(sys.modules["tuneplane_recipe"].ConfigError, match=r"trainer\.nnodes"):
        grpo.render(config, env)


def test_hydra_values_and_verl_data_and_reward(artifact: Load) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    value = grpo.hydra_value
    assert [value(True), value(3), value(1e-06), value("null"), value("it's")] == [
        "true", "3", "1e-06", "'null'", "'it\\'s'",
    ]  # fmt: skip
    assert value(["a", 1]) == "['a',1]"
    row = grpo.synthetic_rows(2, "train")[1]
    assert row["data_source"] == "tuneplane/arithmetic" and row["extra_info"]["index"] == 1
    assert row["prompt"][0]["role"] == "user" and row["reward_model"]["style"] == "rule"
    reward = artifact("verl/grpo", "reward.py")
    truth = row["reward_model"]["ground_truth"]
    assert reward.compute_score("tuneplane/arithmetic", f" {truth} ok", truth) == 1.0
    assert reward.compute_score("tuneplane/arithmetic", "no number", truth) == 0.0
