"""The verl recipe's integration artifact, as the Job Capsule ships it: its pure part renders
config.json into exactly the Hydra overrides of verl's ``main_ppo`` (golden values), checks what
verl would refuse later, and imports none of verl, transformers or torch to do so (the TRL
recipes: test_recipe_artifacts.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.fixtures.recipe_artifacts import Load, config_of

pytestmark = pytest.mark.unit


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
    artifact: Load, member_env: dict[str, str], tmp_path: Path
) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    gang = {**member_env, "NNODES": "1", "NPROC_PER_NODE": "2"}
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
    artifact: Load, member_env: dict[str, str], tmp_path: Path
) -> None:
    """docs/recipes.md: verl's global_step_<N> directories go to TUNEPLANE_CHECKPOINT_DIR, each
    marked complete by the artifact's hook (imported on verl's driver: the artifact's directory
    is on its PYTHONPATH), and a retry resumes with resume_mode=resume_path; verl never deletes
    the read-only resume directory."""
    grpo = artifact("verl/grpo", "grpo.py")
    here = tmp_path / "capsule" / "verl-grpo"
    given = {**member_env, "NPROC_PER_NODE": "2", "PYTHONPATH": "/opt/x",
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
    artifact: Load, member_env: dict[str, str]
) -> None:
    ws = Path(member_env["TUNEPLANE_WORKSPACE"])
    (ws / "gsm8k").mkdir()
    (ws / "gsm8k" / "train.parquet").write_bytes(b"PAR1")
    grpo = artifact("verl/grpo", "grpo.py")
    given = {**VERL_GIVEN, "model": "Qwen/Qwen2.5-0.5B-Instruct", "reward": "verl-default",
             "train_files": "gsm8k/train.parquet",
             "val_files": "hdfs://data/test.parquet"}  # fmt: skip
    plan = grpo.render(config_of("verl/grpo", given), {**member_env, "NPROC_PER_NODE": "2"})
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
    artifact: Load,
    member_env: dict[str, str],
    given: dict[str, str],
    gang: dict[str, str],
    problem: str,
) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    with pytest.raises(sys.modules["tuneplane_recipe"].ConfigError) as caught:
        grpo.render(config_of("verl/grpo", given), {**member_env, **gang})
    assert problem in caught.value.problem and caught.value.fix


def test_verl_grpo_makes_files_in_the_shared_directory_of_a_multi_member_job(
    artifact: Load, member_env: dict[str, str]
) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    gang = {**member_env, "NNODES": "2", "TUNEPLANE_SHARED_DIR": "/shared"}
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


def test_verl_grpo_keeps_what_it_fixes(artifact: Load, member_env: dict[str, str]) -> None:
    grpo = artifact("verl/grpo", "grpo.py")
    config = config_of("verl/grpo", {})
    config["verl"]["trainer"]["nnodes"] = 4  # not a parameter: a hand-edited config.json
    with pytest.raises(sys.modules["tuneplane_recipe"].ConfigError, match=r"trainer\.nnodes"):
        grpo.render(config, member_env)


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
