#!/usr/bin/env bash
# Start TunePlane on its embedded defaults: installs what is missing, starts a private Docker
# engine for the local backend, then `tp up` (control plane + private PostgreSQL).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
source deploy/dev/setup.sh
eval "$(bash deploy/dev/dockerd.sh | grep '^export ')"
exec .venv/bin/tp up "$@"
