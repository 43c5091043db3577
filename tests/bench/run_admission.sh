#!/usr/bin/env bash
# Admission benchmark (not part of the test suite): 10,000 pending jobs over 1,000 nodes, through
# the in-memory adapters and a private embedded PostgreSQL, with same-run baselines.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source deploy/dev/setup.sh
exec .venv/bin/python -m tests.bench.bench_admission "$@"
