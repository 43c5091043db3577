#!/usr/bin/env bash
# The wheels the proof run's trl/sft step needs in a training Python that has PyTorch,
# transformers, accelerate, pyarrow, pandas and xxhash but not TRL (the GPU machines of
# deploy/gpu/README.md): trl, datasets, dill and multiprocess, pure Python (1.8 MiB). check.sh
# installs them into a directory of their own that the job's members see on PYTHONPATH
# (`--train-wheels DIR`); they never go into TunePlane's site or the training Python's own.
# Run it HERE, with network:
#
#   bash deploy/gpu/train-wheels.sh DIR [--python-version X.Y]   # default 3.12 (the GPU machine)
#
# Prints DIR (absolute) on stdout, progress on stderr. Idempotent: a wheel already there is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# the versions deploy/dev/torch-env.sh installs (trl/sft is tested with them)
PINS=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)
[ $# -ge 1 ] || { echo "usage: bash $0 DIR [--python-version X.Y]" >&2; exit 2; }
DIR="$1"; shift
version=3.12
if [ $# -gt 0 ]; then
  [ "$1" = --python-version ] && [ $# -eq 2 ] \
    || { echo "error: unknown arguments $* (fix: bash $0 DIR [--python-version X.Y])" >&2; exit 2; }
  version="$2"
fi
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=python3
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
for pin in "${PINS[@]}"; do
  name=${pin%%==*}; ver=${pin#*==}
  # multiprocess has one wheel per Python version (py312-none-any): pip picks it by --python-version
  tag="*"; [ "$name" = multiprocess ] && tag="py${version//./}-*"
  compgen -G "$DIR/${name}-${ver}-${tag}.whl" >/dev/null && continue
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$version" \
    --implementation py --abi none --platform any -d "$DIR" "$pin" >&2 \
    || { echo "error: no pure-Python wheel of $pin for Python $version (fix: pin one that has it)" >&2; exit 1; }
done
echo "$DIR"
