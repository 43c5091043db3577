#!/usr/bin/env bash
# Run the test suite on a fresh machine: installs what is missing, starts a private Docker
# engine (tests start their own PostgreSQL), builds the runtime images while lint, types and
# layer contracts run, then pytest with the 30 slowest tests listed. Extra arguments go to pytest, e.g.
# `bash deploy/dev/test.sh -m unit`.
#
# --fast: the developer loop (docs/testing.md): the same lint, types and contracts, then every
# test that needs no container engine, Slurm or browser and is not marked slow (markers that
# tests/fixtures/tiers.py derives from the fixtures a test uses), with no engine started and
# none reachable, on two workers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
fast=0
if [ "${1:-}" = "--fast" ]; then fast=1; shift; fi
source deploy/dev/setup.sh
if [ $fast -eq 1 ]; then
  # No engine: a test that reaches one without its marker fails (tests/fixtures/tiers.py).
  export DOCKER_HOST="unix:///nonexistent/the-fast-tier-has-no-container-engine.sock"
  # The node nemesis (tests/sim/test_node_nemesis.py) runs 100 of its 500 seeds; CI runs all.
  export NEMESIS_SEEDS="${NEMESIS_SEEDS:-0-99}"
  # Two workers (pytest-xdist): each starts its own PostgreSQL and S3 server on its own ports.
  pytest_args=(-m "not (engine or slurm or browser or slow)" --no-engines -n 2 --durations=15)
else
  eval "$(bash deploy/dev/dockerd.sh | grep '^export ')"
  export DOCKER_HOST
  # TRL and verl on the CPU, for the post-training recipes (~2 min the first time)
  TUNEPLANE_POST_TRAINING_PYTHON="${TUNEPLANE_POST_TRAINING_PYTHON:-$(bash deploy/dev/post-training-env.sh)}"
  export TUNEPLANE_POST_TRAINING_PYTHON
  # CPU PyTorch that host-process members (an unprivileged account) can run, for the proof run's
  # CPU mode (tests/e2e/test_gpu_check.py; about a minute the first time)
  TUNEPLANE_TORCH_PYTHON="${TUNEPLANE_TORCH_PYTHON:-$(bash deploy/dev/torch-env.sh)}"
  export TUNEPLANE_TORCH_PYTHON
  # the proof run's TRL wheels, as they travel to a GPU machine whose Python has no TRL
  # (deploy/gpu/train-wheels.sh; 1.8 MiB), for that PyTorch's Python version
  TUNEPLANE_TRAIN_WHEELS="${TUNEPLANE_TRAIN_WHEELS:-$(bash deploy/gpu/train-wheels.sh \
    /var/cache/tuneplane/train-wheels --python-version "$("$TUNEPLANE_TORCH_PYTHON" -c \
    'import sys; print("%d.%d" % sys.version_info[:2])')")}"
  export TUNEPLANE_TRAIN_WHEELS
  # The runtime images and the control-plane image the engine tests use, built (or found in the
  # cache) while lint and types run, so that no test's set-up pays for them: on a fresh machine
  # that is about 5 minutes (deploy/images/build.sh caches each by its recipe).
  images_log="$(mktemp -t tuneplane-images.XXXXXX)"
  (
    set -e
    for name in busybox python-numpy python-torch pytorch-trl verl; do
      bash deploy/images/build.sh "$name" --docker-host "$DOCKER_HOST"
    done
    bash deploy/images/control-plane.sh --docker-host "$DOCKER_HOST"
  ) >"$images_log" 2>&1 &
  images_pid=$!
  # Three workers on two cores, one module each at a time (a module's servers are started once):
  # with two, the CPU sat 15 % idle while both waited on timers (docs/testing.md, session 50). The longest
  # modules first (tests/fixtures/schedule.py, not xdist's order by number of tests); each
  # worker's control planes get their own share of the rendezvous ports (tests/fixtures/server.py).
  # The run's times per test go to test-artifacts/junit.xml (git-ignored), from which
  # `python -m tests.fixtures.schedule test-artifacts/junit.xml` refreshes tests/durations.json.
  pytest_args=(-n "${TUNEPLANE_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder --durations=30
    --junitxml=test-artifacts/junit.xml)
fi

echo "==> generated code is current"
bash proto/generate.sh --check
echo "==> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check .; exit 1; }
echo "==> mypy (strict on every package and the tests)"
.venv/bin/mypy domain application adapters entrypoints tests
echo "==> import-linter"
.venv/bin/lint-imports
if [ $fast -eq 0 ]; then
  echo "==> runtime images"
  wait "$images_pid" || { cat "$images_log"; echo "building the runtime images failed (log above)"; exit 1; }
fi
echo "==> pytest"
# The suite starts `tp` about 1,400 times (servers, gateways, daemons, collectors, commands).
# Where PYTHONDONTWRITEBYTECODE is set (as on the CI machines), each of them would compile
# every project module it imports from source, a clean clone having no bytecode: about 0.4 s
# of a core a `tp serve` start. Compile them once here and let every process write what it
# compiles (pytest its rewritten test modules too); docs/testing.md.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q -j 0 domain application adapters entrypoints proto >/dev/null
set +e
.venv/bin/pytest "${pytest_args[@]}" "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi
exit $rc
