#!/usr/bin/env bash
# Benchmarks (not part of the test suite): commits per second through the HTTP API.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/dev/setup.sh
command -v wrk >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends wrk >/dev/null; }
eval "$(bash deploy/dev/dockerd.sh | grep '^export ')"
export DOCKER_HOST
.venv/bin/tp runtime build busybox >/dev/null
exec .venv/bin/python -m tests.bench.bench_commits "$@"
