#!/usr/bin/env bash
# A Python environment with TRL and verl on the CPU, to test the post-training recipes'
# artifacts against the real frameworks: the TRL ones train the tiny model they build from a
# config (tests/integration/test_trl_recipes.py), the verl one's Hydra overrides compose with
# verl's own config and pass its checks (tests/integration/test_verl_recipe.py). docs/recipes.md.
#
#   export TUNEPLANE_POST_TRAINING_PYTHON="$(bash deploy/dev/post-training-env.sh)"
#
# Idempotent: a virtualenv keyed by the pins below, under ${XDG_CACHE_HOME:-~/.cache}/tuneplane
# (shared by every checkout on the machine). torch 2.13.0 is the CPU build this kind of
# machine keeps on disk; installed first, nothing asks for a CUDA build. transformers is the
# newest that verl 0.9.1 allows (<5.11). About 2 GB and two minutes the first time. Progress
# goes to stderr; the only stdout line is the environment's python.
set -euo pipefail

PINS=(torch==2.13.0 trl==1.16.0 verl==0.9.1 transformers==5.10.4 peft==0.21.2 datasets==5.2.0
      accelerate==1.16.0 tensorboard==2.21.0)
PY=${PYTHON:-python3}
key=$(printf '%s\n' "${PINS[@]}" | sha256sum | cut -c1-12)
ENV_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/tuneplane/post-training-$key"
if [ ! -f "$ENV_DIR/.installed" ]; then
  echo "==> installing TRL and verl on the CPU into $ENV_DIR" >&2
  rm -rf "$ENV_DIR"
  "$PY" -m venv "$ENV_DIR"
  "$ENV_DIR/bin/python" -m pip install -q torch==2.13.0 2>&1 | grep -v "WARNING: Location" >&2 || true
  "$ENV_DIR/bin/python" -m pip install -q "${PINS[@]}" 2>&1 | grep -v "WARNING: Location" >&2 || true
  "$ENV_DIR/bin/python" -c "import trl, verl, peft, tensorboard, torch, hydra, pandas" >&2
  touch "$ENV_DIR/.installed"
fi
echo "$ENV_DIR/bin/python"
