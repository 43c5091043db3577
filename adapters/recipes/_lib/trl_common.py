"""What the TRL recipes (`trl/sft`, `trl/grpo`, `trl/dpo`) share: config.json rendered into the
trainer's config keyword arguments (``render_common``: pure, tested without TRL), then the model,
tokenizer, data set and LoRA config built with the frameworks (``prepare``), and the end of a run
(``finish``). Shipped beside each TRL artifact by its recipe's `include`.

config.json (docs/recipes.md): ``model`` (``name``, ``dtype``), ``data`` (``dataset``,
``split``, ``samples``), ``args`` (keyword arguments of the trainer's config class,
named as TRL names them), ``peft`` (LoRA; ``r`` = 0 trains every weight).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import report  # the SDK (adapters/sdk/report.py), included beside this file
import tiny_lm
from tuneplane_recipe import (
    ConfigError,
    fail,
    gang,
    load_config,
    local_path,
    paths,
    section,
    torchrun_argv,
    write_report,
)

FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def model_plan(config: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    model = section(config, "model")
    name = str(model.get("name", tiny_lm.TINY))
    if name == tiny_lm.TINY:
        return {"source": "tiny", "name": name}
    found = local_path(name, workspace)
    plan: dict[str, Any] = {"source": "pretrained", "name": str(found) if found else name}
    if model.get("dtype", "auto") != "auto":
        plan["init_kwargs"] = {"dtype": model["dtype"]}
    return plan


def dataset_plan(config: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    data = section(config, "data")
    name = str(data.get("dataset", "synthetic"))
    if name == "synthetic":
        return {"kind": "synthetic", "samples": int(data.get("samples", 256))}
    found = local_path(name, workspace)
    if found is not None:
        fmt = FORMATS.get(found.suffix) if found.is_file() else None
        if found.is_file() and fmt is None:
            raise ConfigError(
                f"dataset {name} is a {found.suffix or 'suffix-less'} file",
                "give a .json, .jsonl, .parquet or .csv file, a dataset directory or a hub name",
            )
        return {"kind": "file", "format": fmt, "path": str(found),
                "split": str(data.get("split", "train"))}  # fmt: skip
    if name.startswith(("/", "./", "../")) or Path(name).suffix in FORMATS:
        raise ConfigError(
            f"dataset {name} is not in the experiment ({workspace})",
            "put the file in the experiment's directory and name it relative to it",
        )
    return {"kind": "hub", "name": name, "split": str(data.get("split", "train"))}


def peft_plan(config: Mapping[str, Any]) -> dict[str, Any] | None:
    peft = section(config, "peft")
    if int(peft.get("r", 0)) == 0:
        return None
    return {
        "r": int(peft["r"]),
        "lora_alpha": int(peft.get("lora_alpha", 16)),
        "lora_dropout": float(peft.get("lora_dropout", 0.0)),
        "target_modules": str(peft.get("target_modules", "all-linear")),
        "task_type": "CAUSAL_LM",
    }


def render_common(config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The plan of a TRL run: model, dataset, LoRA, and the trainer config's keyword
    arguments (``args``) with what the platform fixes: outputs, TensorBoard, plain logs."""
    where = paths(env)
    args = section(config, "args")
    args.update(
        # TunePlane's checkpoint directory when it gives one (docs/checkpoints.md): the
        # trainer's checkpoint-<step> directories there carry over to the next attempt
        output_dir=env.get("TUNEPLANE_CHECKPOINT_DIR") or str(where.output / "checkpoints"),
        report_to=["tensorboard"],
        disable_tqdm=True,  # the trainer's log lines, one per logging step, in `tp job logs`
    )
    if args.get("max_steps", -1) == -1 and args.get("num_train_epochs", 1) <= 0:
        raise ConfigError("neither max_steps nor num_train_epochs asks for any training",
                          "set max_steps > 0 or num_train_epochs > 0")  # fmt: skip
    model = model_plan(config, where.workspace)
    if "init_kwargs" in model:
        args["model_init_kwargs"] = model.pop("init_kwargs")
    return {
        "model": model,
        "dataset": dataset_plan(config, where.workspace),
        "peft": peft_plan(config),
        "args": args,
        "metrics_dir": str(where.metrics),
        "output_dir": str(where.output),
        "resume_from": env.get("TUNEPLANE_RESUME_FROM") or None,
    }


def start(script: str, render: Callable[[dict[str, Any], Mapping[str, str]], dict[str, Any]]
          ) -> dict[str, Any]:  # fmt: skip
    """Read and render config.json (stopping with the fix on a bad one), relaunch under
    torchrun when the job has several processes, point TensorBoard at the platform's metrics
    directory; the plan."""
    try:
        plan = render(load_config(), os.environ)
        argv = torchrun_argv(script, os.environ)
        alone = gang(os.environ).world_size <= 1
    except ConfigError as error:
        fail(error)
    if argv is not None:
        print("tuneplane-recipe: " + " ".join(argv), flush=True)
        os.execv(argv[0], argv)
    if alone:  # a world of one process is not distributed: with LOCAL_RANK set, transformers'
        os.environ.pop("LOCAL_RANK", None)  # Trainer wraps it in DDP anyway (~16% of its steps/s)
    # transformers 5 takes TensorBoard's directory from this variable (logging_dir is gone)
    os.environ["TENSORBOARD_LOGGING_DIR"] = plan["metrics_dir"]
    return plan


def prepare(
    plan: dict[str, Any], rows: Callable[[int, int], list[dict[str, str]]]
) -> dict[str, Any]:
    """The trainer's model, processing class, train data set and LoRA config."""
    import torch
    from datasets import Dataset, load_dataset

    args = plan["args"]
    if not torch.cuda.is_available():
        args["use_cpu"] = True
    out: dict[str, Any] = {}
    model = plan["model"]
    if model["source"] == "tiny":
        max_positions = int(args.get("max_length") or 0) + int(
            args.get("max_completion_length") or 0
        )
        # saved and passed by path, as a pretrained model is: TRL then loads the reference
        # model (beta > 0, DPO) and the tokenizer the same way for both
        directory = Path(tempfile.mkdtemp(prefix="tiny-llama-"))
        tiny_lm.build_model(max(max_positions, 256), int(args.get("seed", 42))).save_pretrained(
            directory
        )
        tiny_lm.build_tokenizer().save_pretrained(directory)
        out["model"] = str(directory)
    else:
        out["model"] = model["name"]  # TRL loads it (and its tokenizer) with model_init_kwargs
    data = plan["dataset"]
    if data["kind"] == "synthetic":
        dataset = Dataset.from_list(rows(data["samples"], 0))
    elif data["kind"] == "file" and data["format"]:
        dataset = load_dataset(data["format"], data_files=data["path"], split=data["split"])
    else:
        dataset = load_dataset(data.get("path") or data["name"], split=data["split"])
    out["train_dataset"] = dataset
    if plan["peft"] is not None:
        from peft import LoraConfig

        out["peft_config"] = LoraConfig(**plan["peft"])
    return out


def _mark_saved_checkpoints() -> Any:
    """A callback that marks each checkpoint the trainer saved complete (the SDK's
    ``report.checkpoint``, rank 0, after the trainer wrote it), so that TunePlane resumes a
    later attempt from it."""
    from transformers import TrainerCallback

    class MarkComplete(TrainerCallback):  # type: ignore[misc]
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.is_world_process_zero:
                path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                report.checkpoint(path, state.global_step)
            return control

    return MarkComplete()


def finish(trainer: Any, plan: dict[str, Any], kind: str) -> None:
    """Train (from TUNEPLANE_RESUME_FROM when given: the trainer's own resume, optimizer,
    scheduler and RNG states included), marking each saved checkpoint complete; save the
    trained model and report.json (rank 0) in the platform's output directory."""
    trainer.add_callback(_mark_saved_checkpoints())
    if plan.get("resume_from"):
        print(f"tuneplane-recipe: resuming from {plan['resume_from']}", flush=True)
    result = trainer.train(resume_from_checkpoint=plan.get("resume_from"))
    output = Path(plan["output_dir"])
    trainer.save_model(str(output / "model"))
    if trainer.is_world_process_zero():
        processing = getattr(trainer, "processing_class", None)
        if processing is not None:
            processing.save_pretrained(str(output / "model"))
        logged = [h for h in trainer.state.log_history if "loss" in h]
        write_report(output, {
            "recipe": kind,
            "global_step": trainer.state.global_step,
            "train_loss": result.training_loss,
            "last_log": logged[-1] if logged else {},
            "metrics": result.metrics,
        })  # fmt: skip
        print(f"tuneplane-recipe: {kind} done after {trainer.state.global_step} steps",
              file=sys.stderr, flush=True)  # fmt: skip
