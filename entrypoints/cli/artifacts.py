"""`tp artifacts ls JOB`, `tp artifacts verify JOB` and `tp artifacts get JOB PATH`: a job's
output manifests, checking its files against them, and downloading one (docs/capsule.md,
"Artifacts")."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.errors import Conflict, NotFound
from entrypoints.cli import output
from entrypoints.cli.client import connect
from entrypoints.cli.errors import UNAVAILABLE, ServerError
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
                where += f" (on node {output.escape(m['node'])})"
            if m["ok"]:
                digest = output.escape(m["digest"])
                output.out.print(
                    f"{where}: {m['files']} files match manifest {digest}", markup=False
                )
                continue
            if m["unchecked"]:
                output.warn(f"{where}: NOT CHECKED: {output.escape(m['unchecked'])}")
                continue
            rows = [(d["path"], d["problem"], d["detail"]) for d in m["differences"]]
            output.table(["PATH", "PROBLEM", "DETAIL"], rows, title=f"{where}: DIFFERS")
        if not checked["members"]:
            output.info(f"job {job_id} has no recorded artifacts to verify")
    if checked["ok"]:
        return 0
    return EXIT_TAMPERED if any(m["differences"] for m in checked["members"]) else UNAVAILABLE


@artifacts_app.command(name="get")
def get(
    job_id: str,
    path: str,
    /,
    *,
    output_file: Annotated[
        Path | None, Parameter(name=["--output", "-o"], allow_leading_hyphen=True)
    ] = None,  # `-o -`: standard output
    attempt: int | None = None,
    member: int = 0,
    force: bool = False,
    wait: float = 60.0,
) -> int:
    """Download one output file of a job, as its member's manifest lists it; its size and
    SHA-256 are checked against the manifest, and the file appears only once whole and
    checked. A file kept on a node is first sent by its daemon to the control plane (the node
    must be connected); exits 6 when it cannot be now.

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    path
        The file's path as `tp artifacts ls` lists it.
    output_file
        Where to write it (default: the file's name in the current directory); `-` writes it
        to standard output.
    attempt
        The attempt's number (default: the latest that recorded PATH for the member).
    member
        The member's index.
    force
        Replace OUTPUT_FILE when it exists.
    wait
        How long a node keeping the file may take to send it, seconds (0.5 to 600).
    """
    with connect() as api:
        if attempt is None:
            found = api.get(job_path(job_id, "/artifacts"))
            listed = [m["attempt"] for m in found["members"] if m["member"] == member
                      and any(f["path"] == path for f in m["files"])]  # fmt: skip
            if not listed:
                raise NotFound(
                    f"no recorded output of member {member} of job {job_id} is named {path!r}",
                    fix=f"`tp artifacts ls {job_id}` lists the files",
                )
            attempt = max(listed)
        target = output_file or Path(path.rsplit("/", 1)[-1])
        to_stdout = str(target) == "-"
        if not to_stdout and target.exists() and not force:
            raise Conflict(f"{target} exists", fix="name another file with -o, or add --force")
        where = job_path(job_id, f"/artifacts/{attempt}/{member}/file")
        params = {"path": path, "wait_seconds": wait}
        with api.download(where, params, first_byte=wait) as (headers, chunks):
            expected = headers.get("x-content-digest", "").removeprefix("sha256:")
            digest = hashlib.sha256()
            if to_stdout:
                for chunk in chunks:
                    digest.update(chunk)
                    sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
            else:
                _write_checked(target, chunks, digest)
    if digest.hexdigest() != expected:
        if not to_stdout:
            target.unlink(missing_ok=True)
        raise ServerError(
            f"{path}: received sha256 {digest.hexdigest()}, the server announced {expected}",
            fix="download it again; `tp artifacts verify` checks the stored files",
        )
    if not to_stdout:
        output.info(f"{path} (attempt {attempt} member {member}) → {target}, sha256 {expected}")
    return 0


def _write_checked(target: Path, chunks: Iterator[bytes], digest: Any) -> None:
    """Into a temporary file beside ``target``, renamed onto it once whole: an interrupted
    download leaves no half-written file under the name asked for."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
