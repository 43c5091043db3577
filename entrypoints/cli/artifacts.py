"""`tp artifacts ls JOB` and `tp artifacts verify JOB`: a job's output manifests, and checking
its files against them (docs/capsule.md, "Artifacts")."""

from __future__ import annotations

from cyclopts import App

from entrypoints.cli import output
from entrypoints.cli.client import connect
from entrypoints.cli.errors import UNAVAILABLE
from entrypoints.cli.jobs import JsonFlag, job_path

artifacts_app = App(name="artifacts", help="A job's output files and their manifests.")

EXIT_TAMPERED = 1


@artifacts_app.command(name="ls")
def ls(job_id: str, /, *, json: JsonFlag = False) -> int:
    """List the files each member of a job left in its output directory, as recorded (path,
    size, sha256) when it completed.

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    """
    with connect() as api:
        found = api.get(job_path(job_id, "/artifacts"))
    if json:
        output.print_json(found)
        return 0
    if not found["members"]:
        output.info(f"job {job_id} has no recorded artifacts (none of its members completed"
                    " on a backend that keeps outputs, or they wrote none)")  # fmt: skip
        return 0
    for m in found["members"]:
        title = (f"attempt {m['attempt']} member {m['member']}: {len(m['files'])} files,"
                 f" {output.human_size(m['size'])}, manifest {m['digest']}")  # fmt: skip
        rows = [(f["path"], output.human_size(f["size"]), f["sha256"]) for f in m["files"]]
        output.table(["PATH", "SIZE", "SHA256"], rows, title=title)
    return 0


@artifacts_app.command(name="verify")
def verify(job_id: str, /, *, wait: float = 30.0, json: JsonFlag = False) -> int:
    """Hash a job's output files again and compare them with the recorded manifests; report
    every changed, missing or added file. Files kept on a node are hashed there (its daemon
    must be connected). Exits 1 when anything differs, 6 when some files could not be
    checked now.

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    wait
        How long nodes holding files may take to answer, seconds (0.5 to 300).
    """
    with connect() as api:
        path = job_path(job_id, "/artifacts/verify")
        checked = api.request("POST", path, params={"wait_seconds": wait}).json()
    if json:
        output.print_json(checked)
    else:
        for m in checked["members"]:
            where = f"attempt {m['attempt']} member {m['member']}"
            if m["node"]:
                where += f" (on node {m['node']})"
            if m["ok"]:
                print(f"{where}: {m['files']} files match manifest {m['digest']}")
                continue
            if m["unchecked"]:
                output.warn(f"{where}: NOT CHECKED: {m['unchecked']}")
                continue
            rows = [(d["path"], d["problem"], d["detail"]) for d in m["differences"]]
            output.table(["PATH", "PROBLEM", "DETAIL"], rows, title=f"{where}: DIFFERS")
        if not checked["members"]:
            output.info(f"job {job_id} has no recorded artifacts to verify")
    if checked["ok"]:
        return 0
    return EXIT_TAMPERED if any(m["differences"] for m in checked["members"]) else UNAVAILABLE
