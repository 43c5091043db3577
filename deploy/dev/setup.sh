#!/usr/bin/env bash
# Install what TunePlane needs on a fresh Debian 12 machine (idempotent): Debian packages for the
# local container engine and runtime images, a virtualenv in .venv with the project and its
# development tools. Sourced by up.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || need_apt+=(busybox-static)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.tuneplane-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "==> installing Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v -i warning || true
  .venv/bin/python -m pip install -q -e '.[dev]' 2>&1 | grep -v -i warning || true
  .venv/bin/tp --help >/dev/null
  touch "$stamp"
fi
