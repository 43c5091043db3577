"""Checking a node pool (`tp fleet check POOL`): what a connected node does not prove.

A check is a small gang, one member on each connected, schedulable node of the pool, running
``CHECK_SCRIPT`` (POSIX sh with busybox tools, so it runs in the smallest runtime image):

- **network**: every member listens on its rendezvous port (``MASTER_PORT + RANK``) and connects
  to every other member at its node's address (``TUNEPLANE_PEERS``), so each pair is tried
  from each side; a message counts only when the listener answers it (``ack``), since a
  connection the kernel accepted may still be dropped unread;
- **shared storage**: member 0 writes 256 KiB of random bytes into the shared directory
  (``/shared``, the daemon's ``--shared-dir``) and tells everyone its sha256 over the network;
  the others wait for the file and compare.

Each member prints ``TPCHECK`` lines and always exits 0 (a gang would stop the others at the
first failure and lose their findings); the control plane reads every member's output when the
job ends and records a result per node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

CHECK_MEMBER_CPUS = 0.1
CHECK_MEMBER_MEMORY_MB = 64
CHECK_TIMEOUT_SECONDS = 40  # how long a member waits for its peers and the shared file

CHECK_SCRIPT = r"""
R=$RANK; W=$WORLD_SIZE; P=$MASTER_PORT; ID=${TUNEPLANE_ATTEMPT_ID:-check}
PEERS=$(echo "${TUNEPLANE_PEERS:-}" | tr ',' ' ')
T=__TIMEOUT__
HEARD=/tmp/tpcheck-heard; : > $HEARD
ACK=/tmp/tpcheck-ack
printf '#!/bin/sh\nread line\necho "$line" >> %s\necho ack\n' "$HEARD" > $ACK; chmod +x $ACK
SUM=none
if [ "$R" = 0 ]; then
  if [ -d /shared ] && dd if=/dev/urandom of=/shared/.tpcheck-$ID bs=1024 count=256 2>/dev/null
  then SUM=$(sha256sum /shared/.tpcheck-$ID | cut -d' ' -f1)
  elif [ -d /shared ]; then echo "TPCHECK fail storage: cannot write to the shared directory"
  fi
fi
timeout $((T + 5)) nc -ll -p $((P + R)) -e $ACK &
LISTENER=$!
k=0
for addr in $PEERS; do
  if [ $k -ne "$R" ]; then
    ok=0; t=0
    while [ $t -lt $T ]; do
      reply=$(echo "from $R sum=$SUM" | nc -w 2 "$addr" $((P + k)) 2>/dev/null)
      if [ "$reply" = ack ]; then ok=1; break; fi
      sleep 1; t=$((t + 1))
    done
    if [ $ok = 1 ]; then echo "TPCHECK ok tcp to member $k"
    else echo "TPCHECK fail network: member $R cannot reach member $k at $addr:$((P + k))"; fi
  fi
  k=$((k + 1))
done
heard() { sed -n 's/^from \([0-9]*\) .*/\1/p' $HEARD | sort -u | wc -l; }
t=0
while [ "$(heard)" -lt $((W - 1)) ] && [ $t -lt $T ]; do sleep 1; t=$((t + 1)); done
kill $LISTENER 2>/dev/null
if [ "$R" = 0 ]; then
  if [ "$SUM" = none ] && [ ! -d /shared ]; then echo "TPCHECK storage none"; fi
else
  SUM=$(grep '^from 0 ' $HEARD | sed 's/.*sum=//' | head -n 1)
  if [ -z "$SUM" ]; then echo "TPCHECK fail storage: no word from member 0"
  elif [ "$SUM" = none ]; then echo "TPCHECK storage none"
  elif [ ! -d /shared ]; then
    echo "TPCHECK fail storage: no shared directory on this node (tp node run --shared-dir)"
  else
    t=0; while [ ! -f /shared/.tpcheck-$ID ] && [ $t -lt $T ]; do sleep 1; t=$((t + 1)); done
    if [ ! -f /shared/.tpcheck-$ID ]; then
      echo "TPCHECK fail storage: member 0's file never appeared in the shared directory"
    elif [ "$(sha256sum /shared/.tpcheck-$ID | cut -d' ' -f1)" != "$SUM" ]; then
      echo "TPCHECK fail storage: member 0's file reads back different here (checksum)"
    else echo "TPCHECK ok storage"; fi
  fi
fi
echo "TPCHECK done"
exit 0
"""


def check_script(timeout_seconds: int = CHECK_TIMEOUT_SECONDS) -> str:
    return CHECK_SCRIPT.replace("__TIMEOUT__", str(timeout_seconds)).strip() + "\n"


@dataclass(frozen=True, slots=True)
class NodeResult:
    node: str
    ok: bool
    detail: str  # what failed, or what was verified


@dataclass(frozen=True, slots=True)
class PoolCheck:
    id: str
    pool: str
    job_id: str
    nodes: tuple[str, ...]  # by member index
    started_at: datetime
    finished_at: datetime | None = None
    results: tuple[NodeResult, ...] = ()
    note: str = ""  # about the whole check, e.g. "no shared storage configured"

    @property
    def ok(self) -> bool | None:
        """None while running; else whether every node passed."""
        if self.finished_at is None:
            return None
        return bool(self.results) and all(r.ok for r in self.results)


def judge(
    nodes: Sequence[str], outputs: Sequence[str], finished: Sequence[bool]
) -> list[NodeResult]:
    """Per node (by member index), its result from every member's output.

    A failed connection names both ends; the blame goes to a node that more than half of its
    peers could not reach, or that could not reach more than half of them (with two nodes,
    both). Storage failures belong to the node that saw them; a member that did not run to its
    end fails its node.
    """
    world = len(nodes)
    outbound, inbound = [0] * world, [0] * world
    notes: list[list[str]] = [[] for _ in nodes]
    failed = [False] * world
    reached = [0] * world
    storage = [""] * world
    for r, output in enumerate(outputs):
        lines = [x.strip() for x in output.splitlines() if x.startswith("TPCHECK ")]
        if not finished[r] or "TPCHECK done" not in lines:
            failed[r] = True
            notes[r].append("the check did not run to its end on this node")
        for line in lines:
            if line.startswith("TPCHECK fail network:"):
                match = _UNREACHABLE.search(line)
                if match and 0 <= int(match.group(1)) < world:
                    k = int(match.group(1))
                    outbound[r] += 1
                    inbound[k] += 1
                    notes[r].append(f"cannot reach {nodes[k]} ({match.group(2)})")
                    notes[k].append(f"unreachable from {nodes[r]} on {match.group(2)}")
            elif line.startswith("TPCHECK fail "):
                failed[r] = True
                notes[r].append(line.removeprefix("TPCHECK fail "))
            elif line.startswith("TPCHECK ok tcp"):
                reached[r] += 1
            elif line == "TPCHECK ok storage":
                storage[r] = "shared storage verified"
            elif line == "TPCHECK storage none":
                storage[r] = "no shared storage"
    results = []
    for i, node in enumerate(nodes):
        blamed = 2 * inbound[i] > world - 1 or 2 * outbound[i] > world - 1
        if failed[i] or blamed:
            results.append(NodeResult(node, False, "; ".join(dict.fromkeys(notes[i]))))
        else:
            done = [f"{reached[i]} of {world - 1} peers reached", storage[i]]
            results.append(NodeResult(node, True, ", ".join(filter(None, done))))
    return results


_UNREACHABLE = re.compile(r"cannot reach member (\d+) at (\S+)")


def pool_note(results: Sequence[NodeResult]) -> str:
    if results and all("no shared storage" in r.detail for r in results):
        return "no shared storage configured on this pool (tp node run --shared-dir)"
    return ""
