#!/bin/bash
# Build the control-plane image (tp serve, the gateways) into the engine at $DOCKER_HOST:
#
#   bash deploy/images/control-plane.sh [--tag REF] [--docker-host unix:///...] [--force]
#
# The project (this checkout, the web console included when built) and its runtime dependencies
# are installed with pip into the build context here (the wheels for Python 3.11 and
# glibc: the image's Python is Debian 12's 3.11), then `docker build` lays them over the
# `python-numpy` runtime image (Debian 12 with the whole standard library of its Python 3.11;
# the `python` runtime has python3-minimal only), built first by build.sh when missing. Nothing
# is fetched from inside the build. The tag defaults to tuneplane/control-plane:<hash of the
# sources>, so an unchanged checkout is not built twice; prints the tag.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TAG="" FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --docker-host) export DOCKER_HOST=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    *) echo "control-plane.sh: unknown argument $1 (--tag REF, --docker-host H, --force)" >&2; exit 2 ;;
  esac
done
[ -n "${DOCKER_HOST:-}" ] || export DOCKER_HOST=unix:///var/run/tuneplane-docker/docker.sock
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  echo "control-plane.sh: needs Python 3.11 to pick the image's wheels (PYTHON=$PY)" >&2; exit 1; }
cd "$ROOT"
if [ -z "$TAG" ]; then
  sum=$( { git ls-files -s domain application adapters entrypoints proto pyproject.toml deploy/images/control-plane;
           git diff HEAD -- domain application adapters entrypoints proto pyproject.toml deploy/images/control-plane;
           [ -f entrypoints/api/console_dist/index.html ] && sha256sum entrypoints/api/console_dist/index.html; } \
         | sha256sum | cut -c1-16)
  TAG=tuneplane/control-plane:$sum
fi
if [ $FORCE = 0 ] && docker image inspect "$TAG" >/dev/null 2>&1; then echo "$TAG"; exit 0; fi
base=localhost/tuneplane/runtime-python-numpy:3.11
docker image inspect "$base" >/dev/null 2>&1 || bash "$ROOT/deploy/images/build.sh" python >&2
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp deploy/images/control-plane/Dockerfile deploy/images/control-plane/entrypoint.sh "$ctx/"
# The dependencies change with pyproject.toml only: installed once per version of it, kept in
# the image cache and in a layer of their own (the engine reuses it); the project is its own.
deps=${TUNEPLANE_IMAGE_CACHE:-$HOME/.cache/tuneplane/images}/control-plane-deps-$(sha256sum pyproject.toml | cut -c1-16)
pip_target=("$PY" -m pip install -q --disable-pip-version-check --no-warn-script-location)
if [ ! -d "$deps" ]; then
  echo "control-plane.sh: installing the dependencies into $deps" >&2
  rm -rf "$deps.tmp"
  "${pip_target[@]}" --target "$deps.tmp" "$ROOT" >&2
  rm -rf "$deps.tmp"/{domain,application,adapters,entrypoints,proto} "$deps.tmp"/tuneplane-*.dist-info
  mv "$deps.tmp" "$deps"
fi
cp -al "$deps" "$ctx/deps" 2>/dev/null || cp -a "$deps" "$ctx/deps"
echo "control-plane.sh: installing the project into the build context" >&2
"${pip_target[@]}" --no-deps --target "$ctx/project" "$ROOT" >&2
echo "control-plane.sh: docker build -t $TAG" >&2
docker build -q --build-arg "BASE=$base" -t "$TAG" "$ctx" >&2
echo "$TAG"
