#!/usr/bin/env bash
# A CPU PyTorch environment, with TRL (the proof run's trl/sft step), that host-process members
# can run (deploy/gpu/check.sh --cpu and its test, tests/e2e/test_gpu_check.py): the node's host-process executor runs members as an
# unprivileged account when the daemon is root (docs/node-backend.md), so the environment must
# be readable by every user: made from the system Python (/usr/bin/python3, not one under a
# home directory) in /var/cache/tuneplane, never under ~.
#
#   export TUNEPLANE_TORCH_PYTHON="$(bash deploy/dev/torch-env.sh)"
#
# Idempotent: keyed by the pins below. torch 2.13.0 is the CPU build this kind of machine keeps
# on disk (about 1 GB installed, a minute the first time). Progress goes to stderr; the only
# stdout line is the environment's python.
set -euo pipefail

PINS=(torch==2.13.0 tensorboard==2.21.0 numpy trl==1.16.0 transformers==5.10.4 datasets==5.2.0
      accelerate==1.16.0)
PY=${TORCH_ENV_PYTHON:-/usr/bin/python3}
key=$( (printf '%s\n' "${PINS[@]}"; "$PY" -V) | sha256sum | cut -c1-12)
ENV_DIR="${TUNEPLANE_TORCH_ENV_ROOT:-/var/cache/tuneplane}/torch-cpu-$key"
if [ ! -f "$ENV_DIR/.installed" ]; then
  echo "==> installing CPU PyTorch for host-process members into $ENV_DIR" >&2
  rm -rf "$ENV_DIR"
  mkdir -p "$(dirname "$ENV_DIR")"
  chmod 755 "$(dirname "$ENV_DIR")"
  "$PY" -m venv "$ENV_DIR"
  (umask 022 && "$ENV_DIR/bin/python" -m pip install -q "${PINS[@]}" 2>&1 | grep -v "WARNING: Location" >&2 || true)
  "$ENV_DIR/bin/python" -c "import torch, torch.utils.tensorboard, trl" >&2
  chmod -R a+rX "$ENV_DIR"
  touch "$ENV_DIR/.installed"
fi
echo "$ENV_DIR/bin/python"
