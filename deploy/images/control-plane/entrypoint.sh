#!/bin/sh
# `tp ARGS` (serve, gateway node, gateway telemetry, admin …); `python …` runs Python itself
# (e.g. python -m adapters.postgres.migrate upgrade --url "$TUNEPLANE_DATABASE_URL").
if [ "${1:-}" = python ] || [ "${1:-}" = python3 ]; then shift; exec python3 "$@"; fi
exec python3 -m entrypoints.cli.main "$@"
