"""Writes journal entries in a tight loop, for the kill -9 tests of the node journal.

    python -m tests.support.journal_writer PATH PREFIX [COUNT]

Puts ``entry(PREFIX, i)`` for i = 0, 1, … and prints ``put <member id>`` after each put has
returned (so it is committed); every tenth entry it also raises the epoch and prints
``epoch <n>``. With COUNT it stops after COUNT entries, prints ``done`` and sleeps (leaving its
WAL un-checkpointed for the test to kill it); without, it runs until killed.
"""

from __future__ import annotations

import sys
import time

from adapters.node.journal import SqliteJournal
from domain.node_daemon_ports import JournalEntry
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef, Phase


def entry(prefix: str, i: int) -> JournalEntry:
    """The entry the writer puts as its ``i``-th (deterministic, for the test to compare)."""
    ref = MemberRef(f"att-{prefix}-{i // 4}", f"mem-{prefix}-{i}", i % 4, 1 + i // 10)
    order = PrepareOrder(
        ref=ref,
        node="n1",
        job_id=f"job-{prefix}",
        image="sha256:" + "ab" * 32,
        command=("python", "train.py", f"--seed={i}", "ünïcode ✓"),
        env={"TUNEPLANE_MEMBER_INDEX": str(i % 4), "PAD": "x" * (i % 700)},
        cpus=2.5,
        memory_mb=1024,
        gpu_indices=(i % 8,),
        source_digest=None if i % 3 else "sha256:" + "cd" * 32,
        members=4,
        process_model="torch-process-group",
        check_port=29500 if i % 4 == 0 else 0,
        capsule=i % 3 == 0,  # the blob under source_digest is a Job Capsule
    )
    phase = (Phase.PREPARING, Phase.PREPARED, Phase.RUNNING, Phase.EXITED)[i % 4]
    return JournalEntry(
        order,
        phase,
        container_id=None if phase is Phase.PREPARING else f"c{i:064d}",
        exit_code=i % 256 if phase is Phase.EXITED else None,
        reason="done" if phase is Phase.EXITED else "",
    )


def main() -> None:
    path, prefix = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else None
    journal = SqliteJournal(path, node_name="n1")
    epoch = journal.epoch()
    i = 0
    while count is None or i < count:
        e = entry(prefix, i)
        journal.put(e)
        print("put", e.member_id, flush=True)
        if i % 10 == 9:
            epoch += 1
            journal.set_epoch(epoch)
            print("epoch", epoch, flush=True)
        i += 1
    print("done", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
