"""Metrics on Slurm: one collector per member, started and ended by the member's wrapper.

Pure: what the backend writes and what ``member.sh`` runs (docs/slurm.md, "Metrics"). Per
member, in the attempt's directory ``D`` (shared):

* ``metrics-<rank>/``: the member's ``TUNEPLANE_METRICS_DIR`` (the training writes there; the
  collector only reads it);
* ``collector-<rank>/<member id>.json`` (directory 0700, file 0600): the collector's member file
  (docs/telemetry.md, "The members directory") with the member's collector token, written by
  the control plane at the member's launch; ``member.sh`` sets ``"ended": true`` in it when the
  training has ended, and the collector writes ``<member id>.drained`` beside it once all of it
  was shipped;
* ``collector-ca.pem``: the CA that signed the telemetry gateway's certificate (public);
* ``collector-<rank>.log``: the collector's log.

The collector's spool is on the node's own disk (``<spool root>/tp-<attempt>-<rank>``, 0700):
the collector refuses a network file system there. It is a child of the member's wrapper, dies
with it (``setpriv --pdeathsig``) and inside the allocation, so Slurm's end of the job ends it.
It runs with ``--ignore-term``: Slurm sends SIGTERM to every process of a stopped job, and the
collector ships on until the wrapper, having seen it drained (or the bound passed), sends SIGINT.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlurmCollector:
    """Where members' collectors ship and how they run on the Slurm nodes."""

    gateway: str  # HOST:PORT of the telemetry gateway, as the Slurm nodes reach it
    ca: str  # the CA file on the control plane (copied into each attempt's directory)
    command: str  # the `tp` command on the nodes (shell words), e.g. /opt/tuneplane/bin/tp
    spool_root: str = "/tmp"  # a directory on each node's local disk
    server_name: str | None = None  # the name in the gateway's certificate, if not HOST
    drain_seconds: int = 60  # how long a member waits for its collector after the training


CA_FILE = "collector-ca.pem"


def member_dir(rank: int) -> str:
    return f"collector-{rank}"


def member_file(
    job_id: str, attempt_id: str, member_id: str, index: int, token: str, metrics_dir: str
) -> str:
    """The collector's member file. ``"ended": false`` comes last, written exactly so: the
    wrapper turns it into ``"ended": true`` with ``sed`` (no JSON tool on the nodes)."""
    body = {
        "job": job_id,
        "attempt": attempt_id,
        "member": member_id,
        "index": index,
        "token": token,
        "metrics_dir": metrics_dir,
        "ended": False,
    }
    text = json.dumps(body)
    assert text.endswith('"ended": false}')
    return text


def start_lines(c: SlurmCollector | None, attempt_id: str) -> str:
    """``member.sh``: the metrics directory, then (with a collector) the collector in the
    background. Needs ``D`` and ``R``; sets ``M`` (metrics), ``C`` (members), ``S`` (spool) and
    ``cpid``. A collector that cannot start never stops the training: ``cpid`` is then empty or
    dead, and the end says why in the member's log."""
    lines = (
        'M="$D/metrics-$R"; mkdir -p "$M"; export TUNEPLANE_METRICS_DIR="$M"\n'
        "cpid=\n"  # no collector: the files stay in the attempt's directory, nothing ships
    )
    if c is None:
        return lines
    args = ["collector", "--ignore-term", "--gateway", c.gateway]
    if c.server_name:
        args += ["--server-name", c.server_name]
    words = " ".join(shlex.quote(a) for a in args) + f' --ca "$D/{CA_FILE}"'
    spool = shlex.quote(f"{c.spool_root.rstrip('/') or ''}/tp-{attempt_id}")
    return lines + (
        f'C="$D/collector-$R"; S={spool}-"$R"\n'
        '(umask 077; mkdir -p "$C" "$S")\n'
        # a requeued job runs again: its member is collected again (not ended, not drained)
        'for f in "$C"/*.json; do [ -e "$f" ] && (umask 077; sed \'s/"ended": true}$/"ended":'
        ' false}/\' "$f" >"$f.tmp" && mv -f "$f.tmp" "$f"); done; rm -f "$C"/*.drained\n'
        # dies with this wrapper even when the wrapper is killed (no orphan on the node)
        "P=; command -v setpriv >/dev/null 2>&1 && P='setpriv --pdeathsig INT'\n"
        f'$P {c.command} {words} --spool "$S" --members "$C"'
        ' >>"$D/collector-$R.log" 2>&1 </dev/null &\n'
        "cpid=$!\n"
    )


def end_lines(c: SlurmCollector | None) -> str:
    """``member.sh`` after the training ended (its exit file written): mark the member ended,
    wait (at most ``drain_seconds``) until the collector shipped everything, stop it, remove
    the spool. A collector that did not drain gets its log's end into the member's log."""
    if c is None:
        return ""
    why = (
        "tuneplane-slurm: the metrics collector of member $R"
        + ' $(if kill -0 $cpid 2>/dev/null; then echo "did not ship everything within'
        + f' {c.drain_seconds} s"; else echo "stopped before it shipped everything"; fi)'
        + " (the last lines of its log follow; docs/slurm.md)"
    )
    return (
        'if [ -n "$cpid" ]; then\n'
        '  f=$(ls "$C"/*.json 2>/dev/null | head -n 1)\n'
        '  if [ -n "$f" ]; then (umask 077; sed \'s/"ended": false}$/"ended": true}/\' "$f"'
        ' >"$f.tmp" && mv -f "$f.tmp" "$f"); fi\n'
        f'  n=0; while [ -n "$f" ] && [ ! -e "${{f%.json}}.drained" ] && [ $n -lt'
        f" {max(0, c.drain_seconds) * 4} ] && kill -0 $cpid 2>/dev/null;"
        " do sleep 0.25; n=$((n+1)); done\n"
        '  if [ -z "$f" ] || [ ! -e "${f%.json}.drained" ]; then\n'
        f'    echo "{why}"\n'
        '    tail -n 20 "$D/collector-$R.log" 2>/dev/null\n'
        "  fi\n"
        "  kill -INT $cpid 2>/dev/null; wait $cpid 2>/dev/null\n"
        '  rm -rf "$S"\n'
        "fi\n"
    )
