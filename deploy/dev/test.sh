#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: installs what is missing, starts a private Docker
# engine (tests start their own PostgreSQL), then lint, types, layer contracts and pytest.
# Extra arguments go to pytest, e.g. `bash deploy/dev/test.sh -m unit`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source deploy/dev/setup.sh
eval "$(bash deploy/dev/dockerd.sh | grep '^export ')"
export DOCKER_HOST
# TRL and verl on the CPU, for the post-training recipes (~2 min the first time)
TUNEPLANE_POST_TRAINING_PYTHON="${TUNEPLANE_POST_TRAINING_PYTHON:-$(bash deploy/dev/post-training-env.sh)}"
export TUNEPLANE_POST_TRAINING_PYTHON

echo "==> generated code is current"
bash proto/generate.sh --check
echo "==> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check .; exit 1; }
echo "==> mypy (strict on every package)"
.venv/bin/mypy domain application adapters entrypoints
echo "==> import-linter"
.venv/bin/lint-imports
echo "==> pytest"
set +e
.venv/bin/pytest "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi
exit $rc
