#!/usr/bin/env bash
# Download what a GPU machine (Python 3.12, x86-64, no network; deploy/gpu/README.md) needs to
# run TunePlane beyond what it has (deploy/gpu/present.txt): the Python 3.12 manylinux wheels of
# the missing dependencies, at the versions installed in this checkout's .venv, and TunePlane
# itself as a wheel. Run it HERE, with network:
#
#   bash deploy/gpu/wheels.sh [DIR]        # default DIR: .whl/ (git-ignored)
#
# Prints each wheel and the total, and refuses (exit 1) when the repository's files that travel
# (tracked, and untracked but not ignored) plus the wheels exceed 64 MiB, the limit of what a
# device machine is sent. Idempotent: a wheel already in DIR is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
DIR="${1:-.whl}"
LIMIT=$((64 * 1024 * 1024))
PY=.venv/bin/python
[ -x "$PY" ] || { echo "error: no .venv here (fix: source deploy/dev/setup.sh)" >&2; exit 2; }
mkdir -p "$DIR"

# protobuf and nvidia-ml-py are on the machine, but TunePlane may need newer ones than it has
# (generated code needs protobuf >= 7.35.1): their wheels travel (0.4 MiB), and check.sh
# installs one only where the machine's version is not accepted.
mapfile -t needed < <("$PY" deploy/gpu/needed.py --also protobuf --also nvidia-ml-py)
# the proof run's own tool: pytest runs the real NVML adapters' contract on the GPU
# (tests/contract/test_gpu_probe_contract.py); installed only where the machine lacks it
for tool in pytest pluggy iniconfig; do
  needed+=("$tool==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$tool")")
done
echo "==> ${#needed[@]} distributions the GPU machine lacks (deploy/gpu/present.txt)"
for req in "${needed[@]}"; do
  name=${req%%==*}; version=${req#*==}
  stem=$(echo "$name" | tr '-' '_' | tr '[:upper:]' '[:lower:]')
  if compgen -G "$DIR/${stem}-${version}-*.whl" >/dev/null \
     || compgen -G "$DIR/$(echo "$name" | tr '-' '_')-${version}-*.whl" >/dev/null; then
    continue
  fi
  "$PY" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    -d "$DIR" "$req" \
    || { echo "error: no Python 3.12 x86-64 wheel of $req (fix: pin a version that has one)" >&2; exit 1; }
done

# a wheel left from an earlier run whose version is no longer wanted would travel and be installed
for whl in "$DIR"/*.whl; do
  base=$(basename "$whl"); dist=$(echo "${base%%-*}" | tr '_' '-' | tr '[:upper:]' '[:lower:]')
  ver=$(echo "$base" | cut -d- -f2)
  [ "$dist" = tuneplane ] && continue
  printf '%s\n' "${needed[@]}" | tr '_' '-' | tr '[:upper:]' '[:lower:]' | grep -qx "$dist==$ver" \
    || { echo "removing $base: no longer needed" >&2; rm -f "$whl"; }
done

echo "==> the trl/sft step's wheels for a training Python without TRL (check.sh: <DIR>/train)"
bash deploy/gpu/train-wheels.sh "$DIR/train" --python-version 3.12 >/dev/null

echo "==> TunePlane itself, as a wheel (with the built console when entrypoints/api/console_dist exists)"
rm -f "$DIR"/tuneplane-*.whl
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$build" . >"$build/log" 2>&1 \
  || { cat "$build/log" >&2; echo "error: TunePlane's wheel did not build" >&2; exit 1; }
cp "$build"/tuneplane-*.whl "$DIR"/

ls -l "$DIR"/*.whl "$DIR"/train/*.whl | awk '{printf "%10d  %s\n", $5, $NF}'
wheels=$(cat "$DIR"/*.whl "$DIR"/train/*.whl | wc -c)
repo=$(git ls-files -z --cached --others --exclude-standard | xargs -0 cat 2>/dev/null | wc -c)
total=$((wheels + repo))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "wheels: $(ls "$DIR"/*.whl "$DIR"/train/*.whl | wc -l) files, $(mib "$wheels"); repository: $(mib "$repo"); total $(mib "$total") of $(mib "$LIMIT")"
if [ "$total" -gt "$LIMIT" ]; then
  echo "error: the repository and the wheels exceed 64 MiB (fix: make a large dependency an optional extra, adapters/extras.py, or list it in deploy/gpu/present.txt if the machine has it)" >&2
  exit 1
fi
