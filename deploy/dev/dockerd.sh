#!/bin/bash
# Start a private Docker engine for TunePlane's local backend, or reuse the one already running.
#
#   eval "$(bash deploy/dev/dockerd.sh)"      # sets DOCKER_HOST in this shell
#
# Idempotent. If $DOCKER_HOST (default unix:///var/run/tuneplane-docker/docker.sock) answers
# /_ping, nothing is done. Otherwise installs docker.io, busybox-static and curl when missing
# (Debian 12, root) and starts dockerd on that unix socket with --iptables=false --bridge=none
# (containers run with network mode "none"; see docs/local-backend.md), data under
# $TUNEPLANE_DOCKER_STATE (default /var/lib/tuneplane-docker).
# Progress goes to stderr; the only stdout line is `export DOCKER_HOST=...`.
#
# Environment: DOCKER_HOST (unix:// only), TUNEPLANE_DOCKER_STATE, TUNEPLANE_DOCKERD_TIMEOUT
# (seconds to wait for /_ping, default 60).
set -euo pipefail

DEFAULT_HOST=unix:///var/run/tuneplane-docker/docker.sock
HOST=${DOCKER_HOST:-$DEFAULT_HOST}
STATE=${TUNEPLANE_DOCKER_STATE:-/var/lib/tuneplane-docker}
TIMEOUT=${TUNEPLANE_DOCKERD_TIMEOUT:-60}

say() { echo "dockerd.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

case "$HOST" in
  unix://*) SOCK=${HOST#unix://} ;;
  *) die "DOCKER_HOST=$HOST is not a unix:// socket; this script only starts a local engine.
  Fix: unset DOCKER_HOST (default $DEFAULT_HOST) or point it at a reachable engine." ;;
esac
RUN=$(dirname "$SOCK")
PIDFILE=$RUN/dockerd.pid
LOG=$STATE/dockerd.log

ping() {
  [ -S "$SOCK" ] || return 1
  if command -v curl >/dev/null; then
    [ "$(curl -sf --max-time 3 --unix-socket "$SOCK" http://d/_ping 2>/dev/null)" = OK ]
  else
    return 1
  fi
}

done_() { echo "export DOCKER_HOST=$HOST"; exit 0; }

# alive PID [NAME]: running (not a zombie; PID 1 may reap slowly here) and, if given, NAME.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$(echo "${stat##*) }" | cut -d' ' -f1)" != Z ] || return 1
  [ -z "${2:-}" ] || tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q "$2"
}

ping && { say "engine at $HOST answers /_ping; nothing to do"; done_; }

# --- tools ------------------------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "need root to install ${missing[*]} (or install them yourself)"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi
[ "$(id -u)" = 0 ] || die "dockerd must be started as root here"

# --- a daemon from a previous run? -------------------------------------------------------------
if [ -f "$PIDFILE" ]; then
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ] && alive "$pid" dockerd; then
    say "dockerd (pid $pid) from an earlier run is alive; waiting for it to answer"
    for _ in $(seq $((TIMEOUT * 5))); do ping && done_; sleep 0.2; done
    tail -n 30 "$LOG" >&2 2>/dev/null || true
    die "dockerd pid $pid does not answer /_ping on $SOCK after ${TIMEOUT}s.
  Fix: stop it (kill $pid) and run this script again; its log is $LOG"
  fi
  say "removing stale pid file $PIDFILE"
  rm -f "$PIDFILE"
fi
[ -e "$SOCK" ] && { say "removing stale socket $SOCK"; rm -f "$SOCK"; }
# dockerd trusts containerd's pid file; after a crash it may name a zombie or a reused pid.
CPID=$RUN/exec/containerd/containerd.pid
if [ -f "$CPID" ] && ! alive "$(cat "$CPID" 2>/dev/null || echo 0)" containerd; then
  say "removing stale containerd pid file $CPID"
  rm -f "$CPID"
fi

# --- start ---------------------------------------------------------------------------------------
mkdir -p "$RUN" "$STATE/data"
chmod 0711 "$RUN"
say "starting dockerd on $HOST (data $STATE/data, log $LOG)"
started=$(date +%s%N)
setsid dockerd -H "$HOST" --data-root "$STATE/data" --exec-root "$RUN/exec" \
  --pidfile "$PIDFILE" --iptables=false --ip-masq=false --bridge=none \
  --containerd-namespace tuneplane --containerd-plugins-namespace tuneplane-plugins \
  >"$LOG" 2>&1 </dev/null &
dpid=$!
for _ in $(seq $((TIMEOUT * 10))); do
  if ping; then
    say "engine up in $(( ($(date +%s%N) - started) / 1000000 )) ms (pid $dpid)"
    done_
  fi
  alive "$dpid" || break
  sleep 0.1
done
say "--- last lines of $LOG ---"
tail -n 40 "$LOG" >&2 || true
if alive "$dpid"; then
  die "dockerd (pid $dpid) did not answer /_ping on $SOCK within ${TIMEOUT}s"
fi
die "dockerd exited before answering /_ping on $SOCK (see the log above)"
