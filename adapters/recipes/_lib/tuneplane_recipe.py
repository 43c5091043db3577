"""What every post-training artifact shares (shipped beside it in the Job Capsule by the
recipe's `include`): its config.json, the job's directories and gang, and the relaunch under
torchrun. The standard library only, so that it imports, and is tested, without any framework.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

CONFIG_PATH = "/tuneplane/capsule/config.json"
WORKSPACE = "/workspace"  # where the runner unpacks the experiment's source


class ConfigError(ValueError):
    """config.json asks for something the framework would refuse later, or cannot do."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem} (fix: {fix})")
        self.problem, self.fix = problem, fix


def load_config(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The recipe's parameters at their config paths (docs/recipes.md); ``$CONFIG`` overrides
    the capsule's file (to run an artifact by hand)."""
    data = json.loads(Path(env.get("CONFIG", CONFIG_PATH)).read_text())
    if not isinstance(data, dict):
        raise ConfigError("config.json is not a JSON object", "render it with TunePlane")
    return data


def section(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"config.json's {key!r} is not an object", "render it with TunePlane")
    return dict(value)


@dataclass(frozen=True)
class Paths:
    output: Path  # checkpoints, the final model, report.json (recorded with a manifest)
    metrics: Path  # TensorBoard event files the platform collects
    workspace: Path  # the experiment's source (relative data and model paths)


def paths(env: Mapping[str, str]) -> Paths:
    output = Path(env.get("TUNEPLANE_OUTPUT_DIR") or "outputs")
    metrics = Path(env.get("TUNEPLANE_METRICS_DIR") or output / "tensorboard")
    return Paths(output, metrics, Path(env.get("TUNEPLANE_WORKSPACE") or WORKSPACE))


@dataclass(frozen=True)
class Gang:
    """The job's processes as the platform's rendezvous describes them (torch-process-group
    and Ray runtimes): ``nnodes`` members, ``nproc_per_node`` processes (GPUs) on each."""

    nnodes: int
    nproc_per_node: int
    node_rank: int
    master_addr: str
    master_port: int

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


def gang(env: Mapping[str, str]) -> Gang:
    try:
        return Gang(
            nnodes=int(env.get("NNODES", "1")),
            nproc_per_node=int(env.get("NPROC_PER_NODE", "1")),
            node_rank=int(env.get("NODE_RANK", "0")),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", "29500")),
        )
    except ValueError as exc:
        raise ConfigError(f"the job's rendezvous variables are not numbers: {exc}",
                          "run the recipe under TunePlane") from None  # fmt: skip


def torchrun_argv(
    script: str, env: Mapping[str, str], python: str = sys.executable
) -> list[str] | None:
    """The command that starts ``script`` once per process of the gang under torchrun, or None
    when there is one process or torchrun already started this one."""
    g = gang(env)
    if g.world_size <= 1 or "TORCHELASTIC_RUN_ID" in env:
        return None
    return [
        python, "-m", "torch.distributed.run",
        f"--nnodes={g.nnodes}", f"--nproc-per-node={g.nproc_per_node}",
        f"--node-rank={g.node_rank}", f"--master-addr={g.master_addr}",
        f"--master-port={g.master_port}", script,
    ]  # fmt: skip


def local_path(value: str, workspace: Path) -> Path | None:
    """``value`` as a file or directory of the experiment (relative to its workspace, or
    absolute) if it names one that exists, else None (a hub name, say)."""
    path = Path(value) if value.startswith("/") else workspace / value
    return path if path.exists() else None


def fail(error: ConfigError) -> NoReturn:
    """Stop before any framework starts, saying what is wrong and how to fix it."""
    print(f"tuneplane-recipe: {error.problem}\n  fix: {error.fix}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def write_report(output: Path, report: Mapping[str, Any]) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "report.json").write_text(json.dumps(dict(report), indent=2, default=str) + "\n")
