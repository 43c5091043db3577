"""`tp fleet check POOL`: check what a connected node does not prove (peers reachable on the
rendezvous ports, shared storage the same), and show the result per node."""

from __future__ import annotations

import time
from typing import Annotated, Any

from cyclopts import Parameter

from domain.errors import Unavailable
from entrypoints.cli import output
from entrypoints.cli.client import connect, seg

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")]
POLL_SECONDS = 1.0


def check(
    pool: str,
    /,
    *,
    last: Annotated[bool, Parameter(help="show the last check; start none")] = False,
    no_wait: Annotated[bool, Parameter(help="start it and return at once")] = False,
    timeout: Annotated[int, Parameter(help="seconds a member waits for its peers")] = 40,
    json: JsonFlag = False,
) -> int:
    """Check a node pool (operators): one small member on each connected, schedulable node;
    each connects to every other on the rendezvous ports, and a file written to the shared
    directory by one is read and checksummed by the others. Nodes that fail are marked and
    take no new work until a check passes. Exit 0 when every node passed, 1 when one failed.

    Parameters
    ----------
    pool
        The node pool (see `tp fleet ls`).
    """
    path = f"/v1/pools/{seg(pool)}/checks"
    with connect() as api:
        if last:
            result = api.get(f"{path}/latest")
        else:
            _, result = api.post(path, {"timeout_seconds": timeout})
            if not json:
                output.out.print(
                    f"check {result['id']} of pool {pool}: job {result['job_id']} on "
                    f"{', '.join(result['nodes'])}",
                    markup=False,
                )
            deadline = time.monotonic() + timeout + 300
            while not no_wait and result.get("finished_at") is None:
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"check {result['id']} has not ended",
                        fix=f"see its job: `tp job status {result['job_id']}`",
                    )
                time.sleep(POLL_SECONDS)
                result = api.get(f"{path}/latest")
    if json:
        output.print_json(result)
    else:
        show(result)
    ok = result.get("ok")
    return 0 if ok or (ok is None and (no_wait or last)) else 1


def show(result: dict[str, Any]) -> None:
    if result.get("finished_at") is None:
        output.out.print(
            f"running since {result['started_at']} (job {result['job_id']})", markup=False
        )
        return
    verdict = "passed" if result.get("ok") else "FAILED"
    output.out.print(f"pool {result['pool']}: {verdict} at {result['finished_at']}", markup=False)
    if result.get("note"):
        output.out.print(result["note"], markup=False)
    rows = [
        (r["node"], "ok" if r["ok"] else "FAILED", r["detail"]) for r in result.get("results", [])
    ]
    if rows:
        output.table(["NODE", "RESULT", "DETAIL"], rows)
