#!/usr/bin/env bash
# The proof run on a GPU machine (deploy/gpu/README.md): train once bare for the baseline, start
# `tp up` with the host-process executor in a fresh state directory, run the same training as a
# job on one GPU of the detected model, and check: the job succeeded; the member saw exactly its
# GPU; the loss curve through TunePlane equals what the script wrote; GPU utilisation > 0 in the
# member's system series; the step time through TunePlane against the bare run (goal <= 1.02).
# Prints a short report, writes it as JSON, stops everything, exits 1 if a check failed (2: the
# run could not be made).
#
#   bash deploy/gpu/check.sh [--wheels DIR] [--train-wheels DIR] [--cpu] [--state-dir DIR]
#                            [--report FILE] [--python PY] [--steps N] [--profile P]
#                            [--runtime NAME]
#
# --wheels DIR   TunePlane's wheels and those of its dependencies the machine lacks
#                (deploy/gpu/wheels.sh), installed offline into <state dir>/site
#                (pip install --no-index --no-deps --target); without it, this checkout's
#                .venv (or the python3 on PATH) runs TunePlane
# --train-wheels DIR  where the training Python has no TRL: the trl/sft step's wheels
#                (deploy/gpu/train-wheels.sh; default <--wheels DIR>/train), installed offline
#                into a directory of their own that the TRL job's members get on PYTHONPATH:
#                ${TUNEPLANE_TRAIN_SITE_ROOT:-/var/cache/tuneplane}/train-site-<key>, outside
#                /tmp (members have a private /tmp) and readable by every user
# --cpu          CPU mode (also when the training Python sees no GPU): the node's GPUs come from
#                the recorded NVML in TUNEPLANE_FAKE_NVML (default: the recorded H200,
#                tests/fixtures/nvml/h200.txt); training runs on the CPU; what needs a GPU is reported
#                "not checked (CPU mode)"
# --python PY    the Python that trains (has torch; default python3); the job's runtime maps to
#                its directory (TUNEPLANE_NODE_RUNTIMES=RUNTIME=<PY's directory>), first on the
#                member's PATH; as root, members run as tuneplane-member, which must be able
#                to run it (a Python under /root cannot be)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CALLER="$PWD"
cd "$ROOT"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

wheels="" train_wheels="" cpu=0 state="" report="" train_py="python3" extra=()
# a path given relative to where check.sh was started from
path() { case "$1" in /*) echo "$1" ;; *) echo "$CALLER/$1" ;; esac; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpu=1; shift; continue ;;
    -h|--help) usage; exit 0 ;;
  esac
  [ $# -ge 2 ] || { echo "error: $1 needs a value (fix: see bash $0 --help)" >&2; exit 2; }
  case "$1" in
    --wheels) wheels="$(path "$2")"; shift 2 ;;
    --train-wheels) train_wheels="$(path "$2")"; shift 2 ;;
    --state-dir) state="$(path "$2")"; shift 2 ;;
    --report) report="$(path "$2")"; shift 2 ;;
    --python) case "$2" in */*) train_py="$(path "$2")" ;; *) train_py="$2" ;; esac; shift 2 ;;
    --steps|--profile|--runtime|--max-ratio) extra+=("$1" "$2"); shift 2 ;;
    *) echo "error: unknown argument $1 (fix: see bash $0 --help)" >&2; exit 2 ;;
  esac
done

train_py="$(command -v "$train_py" || true)"
[ -n "$train_py" ] || { echo "error: no training Python (fix: pass --python PY, a Python with torch)" >&2; exit 2; }
"$train_py" -c "import torch, torch.utils.tensorboard" 2>/dev/null \
  || { echo "error: $train_py cannot import torch and torch.utils.tensorboard (fix: pass --python PY with both)" >&2; exit 2; }
if [ $cpu -eq 0 ] && ! "$train_py" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
  echo "==> $train_py sees no GPU: CPU mode" >&2
  cpu=1
fi
if [ $cpu -eq 1 ] && [ -z "${TUNEPLANE_FAKE_NVML:-}" ]; then
  fake="$ROOT/tests/fixtures/nvml/h200.txt"  # a recorded H200 (tests/fixtures/nvml/README.md)
  if [ -f "$fake" ]; then export TUNEPLANE_FAKE_NVML="$fake"; fi
fi
[ $cpu -eq 1 ] && echo "==> CPU mode; TUNEPLANE_FAKE_NVML=${TUNEPLANE_FAKE_NVML:-(unset: no GPUs)}" >&2

if [ -n "$state" ] && [ -e "$state" ] && [ -n "$(ls -A "$state" 2>/dev/null || echo x)" ]; then
  echo "error: --state-dir $state is not an empty directory (fix: give a new or empty one; each run starts from nothing)" >&2
  exit 2
fi
state="${state:-$(mktemp -d "${TMPDIR:-/tmp}/tuneplane-gpu-check.XXXXXX")}"
mkdir -p "$state"
state="$(cd "$state" && pwd)"
report="${report:-$state/report.json}"

if [ -n "$wheels" ]; then
  tp_py="${TUNEPLANE_PYTHON:-python3}"
  [ -d "$wheels" ] || { echo "error: --wheels $wheels is not a directory (fix: bash deploy/gpu/wheels.sh, then pass its folder)" >&2; exit 2; }
  "$tp_py" deploy/gpu/select_wheels.py "$wheels" >"$state/wheels.txt" || exit 2
  mapfile -t need <"$state/wheels.txt"
  echo "==> installing ${#need[@]} wheels from $wheels into $state/site (offline)" >&2
  if [ ${#need[@]} -gt 0 ]; then
    "$tp_py" -m pip install -q --no-index --no-deps --disable-pip-version-check \
      --target "$state/site" "${need[@]}"
  fi
  export PYTHONPATH="$state/site${PYTHONPATH:+:$PYTHONPATH}"
elif [ -x .venv/bin/python ]; then
  tp_py=.venv/bin/python
else
  tp_py=python3
fi
"$tp_py" -c "import entrypoints.cli.main" \
  || { echo "error: $tp_py cannot import TunePlane (fix: pass --wheels DIR from deploy/gpu/wheels.sh)" >&2; exit 2; }

# TRL for the trl/sft step, where the training Python lacks it
[ -z "$train_wheels" ] && [ -n "$wheels" ] && [ -d "$wheels/train" ] && train_wheels="$wheels/train"
train_site=""
if [ -n "$train_wheels" ] && ! "$train_py" -c "import trl" 2>/dev/null; then
  [ -d "$train_wheels" ] || { echo "error: --train-wheels $train_wheels is not a directory (fix: bash deploy/gpu/train-wheels.sh DIR, then pass DIR)" >&2; exit 2; }
  mapfile -t names < <(ls "$train_wheels"/*.whl 2>/dev/null | xargs -rn1 basename | cut -d- -f1 | sort -u)
  [ ${#names[@]} -gt 0 ] || { echo "error: no wheels in --train-wheels $train_wheels (fix: bash deploy/gpu/train-wheels.sh $train_wheels)" >&2; exit 2; }
  key=$( (cd "$train_wheels" && sha256sum ./*.whl; "$train_py" -V; echo "$train_py") | sha256sum | cut -c1-12)
  train_site="${TUNEPLANE_TRAIN_SITE_ROOT:-/var/cache/tuneplane}/train-site-$key"
  case "$train_site/" in
    /tmp/*) echo "error: TUNEPLANE_TRAIN_SITE_ROOT is under /tmp, which members do not see (they have a private /tmp) (fix: give a directory elsewhere, e.g. /var/tmp)" >&2; exit 2 ;;
  esac
  if [ ! -f "$train_site/.installed" ]; then
    echo "==> installing ${names[*]} from $train_wheels into $train_site (offline), for the trl/sft step" >&2
    rm -rf "$train_site"
    mkdir -p "$train_site"
    chmod 755 "$(dirname "$train_site")"
    (umask 022 && "$train_py" -m pip install -q --no-index --no-deps --disable-pip-version-check \
      --find-links "$train_wheels" --target "$train_site" "${names[@]}") \
      || { echo "error: $train_py could not install the wheels of $train_wheels (fix: make them with bash deploy/gpu/train-wheels.sh DIR --python-version $("$train_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])'))" >&2; exit 2; }
    chmod -R a+rX "$train_site"
    touch "$train_site/.installed"
  fi
fi

args=(--python "$train_py" --work "$state" --report "$report")
[ -n "$train_site" ] && args+=(--train-site "$train_site")
[ $cpu -eq 1 ] && args+=(--cpu)
exec "$tp_py" deploy/gpu/check.py "${args[@]}" "${extra[@]}"
