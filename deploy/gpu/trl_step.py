"""The proof run's TRL step (deploy/gpu/check.py): where the training Python has TRL, the
`trl/sft` recipe (the tiny Llama it builds from a config, synthetic data: no download) runs as a
job on the same GPU through the host-process executor, on a runtime registered from that
Python's own versions (`host-trl`), and its loss curve comes back through the collector.

Where that Python lacks TRL, check.sh installs the carried wheels (`--train-wheels`) into a
directory of their own (``site``): the versions are read with it on PYTHONPATH, and the job's
experiment.toml puts it on its members' PYTHONPATH ([env])."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

RUNTIME = "host-trl"
FRAMEWORKS = ("trl", "transformers", "torch", "accelerate", "datasets")
STEPS = 8
SETS = {
    "max_steps": str(STEPS), "logging_steps": "1", "bf16": "false", "synthetic_samples": "64",
    "per_device_train_batch_size": "4", "learning_rate": "0.001", "save_steps": "4",
    "max_length": "32",
}  # fmt: skip
VERSIONS = (
    "import importlib.metadata as md, json, sys\n"
    "found = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        found[name] = md.version(name)\n"
    "    except md.PackageNotFoundError:\n"
    "        pass\n"
    'print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "frameworks": found}))\n'
)


def host_versions(python: str, site: str | None = None) -> dict[str, Any] | None:
    """The training Python's version and its frameworks' versions (with ``site`` first on its
    path); None without TRL."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # TunePlane's wheels: not
    if site:
        env["PYTHONPATH"] = site
    done = subprocess.run(
        [python, "-c", VERSIONS, *FRAMEWORKS], env=env, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        return None
    found: dict[str, Any] = json.loads(done.stdout)
    return found if "trl" in found["frameworks"] else None


def register(tp: Callable[..., str], versions: dict[str, Any]) -> None:
    """The training Python as runtime ``host-trl``: its digest names its versions (no image
    runs on a host-process node; the runner checks each framework in the member)."""
    body = json.dumps(versions, sort_keys=True).encode()
    args = ["runtime", "add", RUNTIME, "--image", "host/trl:1"]
    args += ["--digest", "sha256:" + hashlib.sha256(body).hexdigest(), "--python"]
    args += [versions["python"], "--replace"]
    for name, version in sorted(versions["frameworks"].items()):
        args += ["--framework", f"{name}={version}"]
    tp(*args)


def submit(tp: Callable[..., str], ws: Path, profile: str, site: str | None = None) -> str:
    tp("new", "sft", "--method", "trl/sft", cwd=ws)
    if site:  # the carried TRL, on the members' PYTHONPATH
        toml = ws / "sft" / "experiment.toml"
        text = toml.read_text()
        if "\n[env]\n" not in text:
            raise RuntimeError(f"tp new wrote no [env] table in {toml}: {text[-400:]}")
        toml.write_text(text.replace("\n[env]\n", f"\n[env]\nPYTHONPATH = {json.dumps(site)}\n", 1))
    sets = [arg for k, v in SETS.items() for arg in ("--set", f"{k}={v}")]
    out = tp("submit", "sft", "--profile", profile, "--runtime", RUNTIME, "--yes", *sets, cwd=ws)
    for word in out.split():
        if word.startswith("job-"):
            return word
    raise RuntimeError(f"tp submit printed no job id: {out[-800:]}")
