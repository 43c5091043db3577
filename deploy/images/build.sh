#!/bin/bash
# Build a local runtime image (no registry needed) into the engine at $DOCKER_HOST.
#
#   bash deploy/images/build.sh busybox|python|python-numpy|python-torch|pytorch-trl|verl [--force] [--docker-host unix:///...]
#
# Installs what the recipe needs when missing (Debian 12, root): busybox-static for `busybox`,
# debootstrap for the others. Then runs `python -m entrypoints.images_cli build ...`, which makes
# the root file system (cached under ${TUNEPLANE_IMAGE_CACHE:-~/.cache/tuneplane/images}) and
# imports it through the Engine API. Without DOCKER_HOST and --docker-host, the engine is the
# one deploy/dev/dockerd.sh starts. PYTHON selects the interpreter (default: .venv/bin/python).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NAME=${1:?usage: build.sh busybox|python|python-numpy|python-torch|pytorch-trl|verl [--force] [--docker-host H]}
shift

case "$NAME" in
  busybox) pkgs=(busybox-static) ;;
  python|python-numpy|python-torch|pytorch-trl|verl) pkgs=(debootstrap) ;;
  *) echo "build.sh: unknown runtime $NAME (busybox, python, python-numpy, python-torch, pytorch-trl or verl)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "build.sh: need root to install ${missing[*]}" >&2; exit 1; }
  echo "build.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
cd "$ROOT"
exec "$PY" -m entrypoints.images_cli build "$NAME" "$@"
