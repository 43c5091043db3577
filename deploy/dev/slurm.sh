#!/bin/bash
# Start a private single-host Slurm cluster for TunePlane's Slurm backend, or reuse the running one.
#
#   eval "$(bash deploy/dev/slurm.sh | grep '^export ')"   # start (or reuse); sets the variables
#   bash deploy/dev/slurm.sh start [DIR]                    # the same, state under DIR
#   bash deploy/dev/slurm.sh stop [DIR]                     # stop every daemon of that cluster
#
# Debian 12's Slurm 22.05 (slurm-wlm, slurmrestd, munge; installed when missing, as root):
# a private munged (its own key and socket), slurmctld, four slurmd started as `slurmd -N n1..n4`
# on distinct ports of 127.0.0.1 (proctrack/linuxproc, task/none, no cgroups), and slurmrestd on a
# unix socket with rest_auth/local. Nothing is shared with a system Slurm or munge: own ports
# (free ones, chosen at start), own slurm.conf, own state. See docs/slurm.md.
# Idempotent: if the cluster in DIR answers (daemons alive, munge, slurmctld and /ping answer),
# nothing is done. If only some of its daemons died (e.g. slurmrestd), only those are started
# again, with the same slurm.conf, ports and key: slurmctld without -c recovers its jobs, so
# nothing running is lost. Otherwise (no slurm.conf yet, or the repair does not bring it back)
# what is left of it is stopped and it starts afresh (slurmctld -c: no old jobs).
# Progress goes to stderr; stdout has only `export NAME=value` lines:
#   SLURM_CONF (for sinfo/squeue/sbatch), SLURMRESTD_SOCKET (the unix socket of the REST API).
#
# Environment: TUNEPLANE_SLURM_STATE (DIR when not given, default /tmp/tuneplane-slurm),
# TUNEPLANE_SLURM_TIMEOUT (seconds to wait for the cluster, default 60),
# TUNEPLANE_SLURM_MIN_JOB_AGE (MinJobAge, default 300), TUNEPLANE_SLURM_SPLIT (non-empty: two
# partitions, debug = n1,n2 and extra = n3,n4, instead of debug = all four),
# TUNEPLANE_SLURM_GRES (e.g. gpu:fake:2: every node declares 2 GPUs of model "fake", counted only,
# no device files), TUNEPLANE_SLURM_ACCOUNTING (non-empty: also a private MariaDB and slurmdbd, so that accounting,
# sacct and slurmrestd's /slurmdb/v0.0.38 work; installs slurmdbd and mariadb-server).
set -euo pipefail

CMD=start
case "${1:-}" in start | stop) CMD=$1; shift ;; esac
DIR=${1:-${TUNEPLANE_SLURM_STATE:-/tmp/tuneplane-slurm}}
TIMEOUT=${TUNEPLANE_SLURM_TIMEOUT:-60}
NODES=(n1 n2 n3 n4)
API=v0.0.38

say() { echo "slurm.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

mkdir -p "$DIR" 2>/dev/null || die "cannot create the state directory $DIR"
DIR=$(cd "$DIR" && pwd)
CONF=$DIR/slurm.conf
SOCK=$DIR/slurmrestd.sock
MSOCK=$DIR/munge/munge.socket
export SLURM_CONF=$CONF

# alive PID: running and not a zombie (PID 1 may reap slowly here).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$(echo "${stat##*) }" | cut -d' ' -f1)" != Z ]
}

ACCT=${TUNEPLANE_SLURM_ACCOUNTING:-}
GRES=${TUNEPLANE_SLURM_GRES:-}  # e.g. gpu:fake:2: every node has 2 "GPUs" of model fake
pidfiles() {
  echo "$DIR/slurmrestd.pid"
  for n in "${NODES[@]}"; do echo "$DIR/slurmd-$n.pid"; done
  echo "$DIR/slurmctld.pid"
  if [ -n "$ACCT" ] || [ -f "$DIR/slurmdbd.pid" ]; then echo "$DIR/slurmdbd.pid" "$DIR/mariadb/mariadbd.pid"; fi
  echo "$DIR/munge/munged.pid"
}

# The sessions of this cluster's slurmstepd processes (they and the jobs' processes outlive
# slurmd): found by the SLURM_CONF in their environment, which only this cluster's daemons pass.
step_sessions() {
  local p
  for p in $(pgrep -x slurmstepd || true); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$CONF" || continue
    ps -o sid= -p "$p" 2>/dev/null || true
  done | sort -u
}

stop_all() {
  local f pid sid
  for f in $(pidfiles); do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && alive "$pid"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  for sid in $(step_sessions); do pkill -KILL -s "$sid" 2>/dev/null || true; done
  rm -f "$SOCK"
}

# slurmctld answers and reports every node (in any state: a busy cluster is a healthy one)
ctld_ok() {
  [ -f "$CONF" ] && [ "$(sinfo -h -N -o %N 2>/dev/null | sort -u | wc -l)" = "${#NODES[@]}" ]
}
# every node reachable: none down, unknown or not responding (a drained one is fine)
nodes_respond() {
  local states
  states=$(sinfo -h -N -o %T 2>/dev/null) || return 1
  [ "$(echo "$states" | wc -l)" -ge "${#NODES[@]}" ] || return 1
  ! echo "$states" | grep -qiE '^(down|unknown|not_responding|no_respond)|\*$'
}
munge_ok() { [ -S "$MSOCK" ] && munge -n -S "$MSOCK" 2>/dev/null | unmunge -S "$MSOCK" >/dev/null 2>&1; }
nodes_idle() {
  [ -f "$CONF" ] && [ "$(sinfo -h -t idle -o %D 2>/dev/null || true)" = "${#NODES[@]}" ]
}
rest_ok() {
  [ -S "$SOCK" ] && curl -sf --max-time 3 --unix-socket "$SOCK" "http://slurm/slurm/$API/ping" \
    >/dev/null 2>&1
}
# every daemon of the cluster alive by its pid file (slurmctld notices a dead slurmd only after
# SlurmdTimeout, so sinfo alone would still say idle)
daemons_alive() {
  local f pid
  for f in $(pidfiles); do
    pid=$(cat "$f" 2>/dev/null || true)
    [ -n "$pid" ] && alive "$pid" || return 1
  done
}
up() { daemons_alive && munge_ok && ctld_ok && rest_ok; }

done_() {
  echo "export SLURM_CONF=$CONF"
  echo "export SLURMRESTD_SOCKET=$SOCK"
  exit 0
}

if [ "$CMD" = stop ]; then
  stop_all
  rm -f "$CONF"  # stopped on purpose: the next start is a fresh one (slurmctld -c), not a repair
  say "stopped the cluster in $DIR"
  exit 0
fi

if command -v sinfo >/dev/null && up; then
  say "the cluster in $DIR answers; nothing to do"
  done_
fi

# --- starting each daemon (used for a fresh start and to restart one that died) ---------------
start_munged() {
  rm -f "$MSOCK" "$MSOCK.lock"
  runuser -u munge -- munged --key-file="$DIR/munge/munge.key" --socket="$MSOCK" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed" >&2
  for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
  munge_ok || { tail -n 20 "$DIR/munge/munged.log" >&2 || true; die "munged does not answer on $MSOCK"; }
}
start_mariadb() {  # M and DBPORT set; the datadir exists
  setsid mariadbd --no-defaults --user=mysql --datadir="$M/data" --socket="$M/mysql.sock" \
    --port="$DBPORT" --bind-address=127.0.0.1 --pid-file="$M/mariadbd.pid" \
    --log-error="$M/err.log" --innodb-buffer-pool-size=32M </dev/null >/dev/null 2>&1 &
  for _ in $(seq 100); do [ -S "$M/mysql.sock" ] && break; sleep 0.1; done
}
start_slurmdbd() {  # slurmdbd reads slurmdbd.conf beside $SLURM_CONF
  slurmdbd >&2 || die "slurmdbd did not start; see $DIR/log/slurmdbd.log"
  for _ in $(seq 100); do
    sacctmgr -i -n list cluster >/dev/null 2>&1 && break
    sleep 0.1
  done
}
start_slurmd() {
  slurmd -N "$1" -f "$CONF" >&2 || die "slurmd -N $1 did not start; see $DIR/log/slurmd-$1.log"
}
start_slurmrestd() {  # OPENAPI set
  rm -f "$SOCK"
  SLURMRESTD_SECURITY=disable_user_check setsid slurmrestd -f "$CONF" -a rest_auth/local \
    -s "$OPENAPI" "unix:$SOCK" \
    >>"$DIR/log/slurmrestd.log" 2>&1 </dev/null &
  echo $! >"$DIR/slurmrestd.pid"
}
dead() {  # dead PIDFILE: its daemon does not run
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  ! { [ -n "$pid" ] && alive "$pid"; }
}

# Start again only the daemons of the cluster in $DIR that died, with its slurm.conf, ports and
# munge key; slurmctld without -c (it recovers its jobs from StateSaveLocation). Fails (for a
# fresh start) when there is no such cluster or it does not answer within $TIMEOUT.
repair() {
  local n restarted=()
  [ -f "$CONF" ] && [ -s "$DIR/munge/munge.key" ] && [ "$(id -u)" = 0 ] || return 1
  OPENAPI=openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36
  if [ -f "$DIR/slurmdbd.conf" ]; then
    OPENAPI=openapi/v0.0.38,openapi/dbv0.0.38
    M=$DIR/mariadb
    DBPORT=$(sed -n 's/^StoragePort=//p' "$DIR/slurmdbd.conf")
  fi
  if ! munge_ok; then
    dead "$DIR/munge/munged.pid" || return 1  # alive but not answering: start afresh
    (start_munged) || return 1
    restarted+=(munged)
  fi
  if [ -f "$DIR/slurmdbd.conf" ]; then
    if dead "$DIR/mariadb/mariadbd.pid"; then start_mariadb; restarted+=(mariadbd); fi
    if dead "$DIR/slurmdbd.pid"; then (start_slurmdbd) || return 1; restarted+=(slurmdbd); fi
  fi
  if dead "$DIR/slurmctld.pid"; then
    slurmctld -f "$CONF" >&2 || return 1
    restarted+=(slurmctld)
  fi
  for n in "${NODES[@]}"; do
    if dead "$DIR/slurmd-$n.pid"; then (start_slurmd "$n") || return 1; restarted+=("slurmd-$n"); fi
  done
  if dead "$DIR/slurmrestd.pid" || ! rest_ok; then
    if ! dead "$DIR/slurmrestd.pid"; then  # alive but not answering on its socket
      kill "$(cat "$DIR/slurmrestd.pid")" 2>/dev/null || true
      sleep 0.5
    fi
    start_slurmrestd; restarted+=(slurmrestd)
  fi
  say "restarting only ${restarted[*]:-nothing} of the cluster in $DIR (its jobs are kept)"
  for _ in $(seq $((TIMEOUT * 10))); do
    if ctld_ok && nodes_respond && rest_ok && daemons_alive; then return 0; fi
    sleep 0.1
  done
  say "the cluster in $DIR did not answer after restarting ${restarted[*]:-nothing}"
  return 1
}

if command -v sinfo >/dev/null && command -v slurmrestd >/dev/null && repair; then
  say "the cluster in $DIR answers again"
  done_
fi

# --- tools ------------------------------------------------------------------------------------
missing=()
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v slurmrestd >/dev/null || missing+=(slurmrestd)
command -v munged >/dev/null || missing+=(munge)
command -v curl >/dev/null || missing+=(curl)
command -v python3 >/dev/null || missing+=(python3)
if [ -n "$ACCT" ]; then
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
fi
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "need root to install ${missing[*]} (or install them yourself)"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi
[ "$(id -u)" = 0 ] || die "the Slurm daemons must be started as root here (slurmd runs jobs)"

started=$(date +%s%N)
stop_all  # whatever is left of an earlier cluster in $DIR
mkdir -p "$DIR"/{state,log,munge} "${NODES[@]/#/$DIR/spool/}"
chmod 0755 "$DIR"

# --- munge: a private daemon with its own key ---------------------------------------------------
if [ ! -s "$DIR/munge/munge.key" ]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
fi
chown -R munge:munge "$DIR/munge"
chmod 0711 "$DIR/munge"  # munged wants its socket's directory searchable by all
chmod 0400 "$DIR/munge/munge.key"
start_munged

# --- slurm.conf (and accounting) ----------------------------------------------------------------
# free TCP ports on 127.0.0.1: slurmctld, then one per slurmd
read -r -a PORTS <<<"$(python3 -c '
import socket
socks = [socket.socket() for _ in range(7)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')"
HOST=$(hostname -s)
ACCT_CONF=AccountingStorageType=accounting_storage/none
OPENAPI=openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36
if [ -n "$ACCT" ]; then  # MariaDB (private datadir and port) + slurmdbd: /slurmdb/v0.0.38, sacct
  M=$DIR/mariadb DBPORT=${PORTS[5]} DBDPORT=${PORTS[6]}
  mkdir -p "$M"
  chown mysql:mysql "$M"
  if [ ! -d "$M/data/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$M/data" --auth-root-authentication-method=socket \
      >"$M/install.log" 2>&1 || die "mariadb-install-db failed; see $M/install.log"
  fi
  start_mariadb
  mariadb --socket="$M/mysql.sock" -u root -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" >&2 ||
    die "MariaDB does not answer; see $M/err.log"
  cat >"$DIR/slurmdbd.conf" <<DBD
AuthType=auth/munge
AuthInfo=socket=$MSOCK
DbdAddr=127.0.0.1
DbdHost=$HOST
DbdPort=$DBDPORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DBPORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/slurmdbd.pid
DBD
  chmod 600 "$DIR/slurmdbd.conf"
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBDPORT
AccountingStoragePass=$MSOCK"
  OPENAPI=openapi/v0.0.38,openapi/dbv0.0.38
fi
{
  cat <<CONF
# Written by deploy/dev/slurm.sh: a private single-host test cluster (see docs/slurm.md).
ClusterName=tuneplane
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=${PORTS[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MSOCK
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$ACCT_CONF
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
MinJobAge=${TUNEPLANE_SLURM_MIN_JOB_AGE:-300}${GRES:+
GresTypes=gpu}
KillWait=5
CONF
  i=1
  for n in "${NODES[@]}"; do
    echo "NodeName=$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=${PORTS[$i]} CPUs=2 RealMemory=2000${GRES:+ Gres=$GRES} State=UNKNOWN"
    i=$((i + 1))
  done
  if [ -n "${TUNEPLANE_SLURM_SPLIT:-}" ]; then  # two partitions: debug n1,n2 and extra n3,n4
    echo "PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP"
    echo "PartitionName=extra Nodes=n[3-4] MaxTime=INFINITE State=UP"
  else
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  fi
} >"$CONF"
if [ -n "$GRES" ]; then  # GPUs that are only counted (no device files): enough for scheduling
  count=${GRES##*:} model=${GRES#gpu:}; model=${model%:*}
  mkdir -p "$DIR/dev"  # plain files standing for device files: nothing opens them (task/none)
  for g in $(seq 0 $((count - 1))); do touch "$DIR/dev/fakegpu$g"; done
  echo "Name=gpu Type=$model File=$DIR/dev/fakegpu[0-$((count - 1))]" >"$DIR/gres.conf"
else
  rm -f "$DIR/gres.conf"
fi
# No cgroup.conf: 22.05 has no CgroupPlugin=disabled (23.02+); with proctrack/linuxproc and
# task/none the cgroup plugin slurmd loads anyway (autodetect) is never used for jobs.
rm -f "$DIR/cgroup.conf"

# --- daemons ------------------------------------------------------------------------------------
if [ -n "$ACCT" ]; then
  start_slurmdbd
  sacctmgr -i add cluster tuneplane >/dev/null 2>&1 || true
fi
say "starting slurmctld (port ${PORTS[0]}) and slurmd ${NODES[*]} (ports ${PORTS[*]:1}) in $DIR"
slurmctld -c -f "$CONF" >&2 || die "slurmctld did not start; see $DIR/log/slurmctld.log"
for n in "${NODES[@]}"; do start_slurmd "$n"; done
: >"$DIR/log/slurmrestd.log"
start_slurmrestd

for _ in $(seq $((TIMEOUT * 10))); do
  if nodes_idle && rest_ok; then
    say "cluster up in $(( ($(date +%s%N) - started) / 1000000 )) ms (state $DIR)"
    done_
  fi
  sleep 0.1
done
for f in slurmctld.log slurmrestd.log; do
  say "--- last lines of $DIR/log/$f ---"
  tail -n 20 "$DIR/log/$f" >&2 || true
done
sinfo >&2 || true
die "the cluster in $DIR is not up after ${TIMEOUT}s (logs in $DIR/log)"
