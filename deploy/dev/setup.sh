#!/usr/bin/env bash
# Install what TunePlane needs on a fresh Debian 12 machine (idempotent): Debian packages for the
# local container engine and runtime images, a virtualenv in .venv with the project and its
# development tools, and the web console built into entrypoints/api/console_dist (npm ci + build). Sourced by up.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || need_apt+=(busybox-static)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v git >/dev/null 2>&1 || need_apt+=(git)
# The web console: Node 20 + npm build it (console/); headless Chromium runs its browser tests.
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# The multi-host test (tests/e2e/test_multi_host.py): network namespaces, veth pairs and `ss`
# (iproute2), a firewall in each namespace (nftables); `tp node install --systemd`'s units are
# checked with systemd-analyze (the systemd package; systemd need not run).
command -v ip >/dev/null 2>&1 && command -v ss >/dev/null 2>&1 || need_apt+=(iproute2)
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
# The plan tests read plans with contrib's auto_explain, which the pip-installed server lacks:
# they start Debian's server beside it (tests/fixtures/postgres.py, contrib_pg_server).
ls /usr/lib/postgresql/*/lib/auto_explain.so >/dev/null 2>&1 || need_apt+=(postgresql-15)
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

# The web console (docs/console.md): rebuilt when missing or older than any of its sources.
dist=entrypoints/api/console_dist/index.html
if [ ! -f "$dist" ] || [ -n "$(find console -path console/node_modules -prune -o -type f -newer "$dist" -print -quit)" ]; then
  echo "==> building the web console (npm ci && npm run build in console/)"
  (cd console && npm ci --no-audit --no-fund --loglevel=error && npm run build --silent) >/dev/null
fi
