"""`tp submit`: preview (pack, upload, resolve) → submission file → commit with a retry key.

The submission file ``<workspace>/.tuneplane-data/submissions/<preview-id>.json`` holds
``{"server", "preview", "retry_key"}``. Committing sends (preview id, digest, retry key); a
transient failure is retried with the same key, so the server hands back the same job.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

from cyclopts import Parameter
from rich.prompt import Confirm

from domain.errors import InvalidInput
from domain.retry import RetryPolicy
from entrypoints.cli import errors, output, submissions
from entrypoints.cli.archive import pack
from entrypoints.cli.catalog import fetch_method
from entrypoints.cli.client import Api, connect, with_retries
from entrypoints.cli.jobs import describe_end, end_code, follow_job, wait_to_start
from entrypoints.cli.recipe_lock import read_lock
from entrypoints.cli.submissions import (
    parse_sets,
    print_summary,
    read_submission,
    shown,
    write_submission,
)
from entrypoints.cli.validation import check_params
from entrypoints.cli.workspace import Experiment, find_workspace, load_experiment


def make_preview(
    api: Api,
    exp: Experiment,
    profiles: list[str],
    sets: dict[str, str],
    runtime: str | None,
    allow_secret_files: bool,
    queue: str | None = None,
    retry: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], int]:
    """Pack and upload the source, then ask the server to resolve the submission."""
    with output.byte_progress("packing", None) as bar:
        archive = pack(
            exp.path,
            allow_secret_files=allow_secret_files,
            on_progress=bar.advance,
            on_total=bar.total,
        )
    try:
        if archive.skipped:
            output.warn("not packed (not regular files): " + ", ".join(archive.skipped))
        with output.byte_progress("uploading", archive.size) as bar:

            def send() -> Any:
                bar.reset()  # a retry uploads from the start
                chunks = archive.chunks(bar.advance)
                return api.upload("/v1/archives", chunks, archive.size, archive.digest)

            uploaded = with_retries(send, "upload")
    finally:
        archive.discard()
    body = {
        "experiment": exp.name,
        "method": exp.method,
        "profiles": profiles,
        "queue": queue,
        "params": {**exp.params, **sets},
        "runtime": runtime or exp.runtime,
        "source": {"digest": uploaded.get("digest", archive.digest), "size": archive.size},
        "env": exp.env,
        "plugins": [p.to_dict() for p in exp.plugins],  # experiment.toml [plugins]
    }
    if retry is not None:  # --retry N, else experiment.toml [retry]
        body["retry"] = retry
    lock = read_lock(exp.path)
    if lock is not None:  # the server refuses a stale one (409)
        body["recipe_lock"] = lock
    _, preview = with_retries(lambda: api.post("/v1/previews", body), "preview")
    return dict(preview), len(archive.files)


def _retry(attempts: int) -> dict[str, Any]:
    """``--retry N``, checked here as the server checks it."""
    try:
        RetryPolicy.attempts(attempts)
    except InvalidInput as exc:
        raise InvalidInput(
            f"--retry {attempts}: {exc.message}",
            fix="give --retry N with N from 1 (no retry) to 100",
            field="--retry",
        ) from None
    return {"max_attempts": attempts}


def commit(api: Api, submission: dict[str, Any]) -> str:
    """POST /v1/jobs with the file's triple, retrying transient failures with the same key."""
    body = {
        "preview_id": submission["preview"]["id"],
        "digest": submission["preview"]["digest"],
        "retry_key": submission["retry_key"],
    }
    status, receipt = with_retries(lambda: api.post("/v1/jobs", body), "commit")
    job_id = str(receipt["job_id"])
    note = "created" if status == 201 else "(already submitted)"
    output.out.print(f"job {job_id} {note}", markup=False)
    return job_id


def after_commit(api: Api, job_id: str, wait: bool, follow: bool) -> int:
    if follow:
        return follow_job(api, job_id)
    if wait:
        job = wait_to_start(api, job_id)
        output.out.print(
            f"job {job_id} {job['state']}" if job["state"] == "running" else describe_end(job),
            markup=False,
        )
        return end_code(job)
    output.info(f"follow it with: tp job logs {job_id} -f")
    return 0


Flag = Annotated[bool, Parameter(negative=())]


def submit(
    name: str | None = None,
    /,
    *,
    profile: Annotated[tuple[str, ...], Parameter(name="--profile")] = (),
    queue: Annotated[str | None, Parameter(name="--queue")] = None,
    set_: Annotated[tuple[str, ...], Parameter(name="--set")] = (),
    runtime: Annotated[str | None, Parameter(name="--runtime")] = None,
    retry: Annotated[int | None, Parameter(name="--retry")] = None,
    allow_secret_files: Flag = False,
    preview: Flag = False,
    commit_file: Annotated[Path | None, Parameter(name="--commit")] = None,
    yes: Annotated[bool, Parameter(name=["--yes", "-y"])] = False,
    wait: Flag = False,
    follow: Annotated[bool, Parameter(name=["--follow", "-f"])] = False,
) -> int:
    """Submit an experiment: --preview (then --commit FILE), or --yes for both in one go.

    Parameters
    ----------
    name
        The experiment (directory name or path).
    profile
        Resource request (see `tp profiles`): h200:8, h200 (a whole node), cpu:2, a named
        profile, or ROLE=REQUEST, repeatable for a job of several roles
        (--profile train=h200:8 --profile rollout=h100:2); default: `profile` in
        experiment.toml.
    queue
        The queue to wait in (see `tp queue ls`); default: `default`, or your team's only queue.
    set_
        Override a parameter: --set KEY=VALUE (repeatable; the server converts the type).
    runtime
        Runtime to run in (see `tp runtime ls`); default: experiment.toml, else the method's.
    retry
        N attempts in all, a new one after any end but your own `tp job stop` (replaces
        experiment.toml's [retry]; 1: no retry). See docs/lifecycles.md#retries.
    allow_secret_files
        Pack files that look like secrets (.env, *.pem, id_rsa, ...) anyway.
    preview
        Only preview: resolve, write the submission file, create no job.
    commit_file
        Commit a submission file written by --preview; `latest`: the workspace's newest.
    yes
        Preview and commit without asking.
    wait
        After committing, wait until the job has started.
    follow
        After committing, wait for the job and stream its logs until it ends.
    """
    if commit_file is not None:
        if (
            name
            or preview
            or yes
            or profile
            or queue
            or set_
            or runtime
            or retry is not None
            or allow_secret_files
        ):
            raise InvalidInput(
                "--commit takes only the submission file (and --wait/--follow)",
                fix="run `tp submit --commit FILE`; to change the submission, preview again",
                field="--commit",
            )
        commit_file = submissions.commit_file(commit_file)
        submission = read_submission(commit_file)
        with connect() as api:
            if submission.get("server") and submission["server"].rstrip("/") != api.server:
                raise InvalidInput(
                    f"{commit_file} was previewed on {submission['server']}, "
                    f"but you are logged in to {api.server}",
                    fix=f"run `tp login --server {submission['server']} --token T` first",
                    field="--commit",
                )
            job_id = commit(api, submission)
            return after_commit(api, job_id, wait, follow)
    if name is None:
        raise InvalidInput(
            "name an experiment, or pass --commit FILE",
            fix="e.g. `tp submit my-exp --profile cpu:1 --preview`",
            field="NAME",
        )
    if preview and (yes or wait or follow):
        raise InvalidInput(
            "--preview creates no job: it cannot be combined with --yes, --wait or --follow",
            fix="drop --preview to submit now",
            field="--preview",
        )
    if not preview and not yes and not sys.stdin.isatty():
        raise InvalidInput(
            "not asking for confirmation: input is not a terminal",
            fix="pass --yes to submit without asking, or --preview to only preview",
            field="--yes",
        )
    exp = load_experiment(name)
    chosen = list(profile) or ([exp.profile] if exp.profile else [])
    if not chosen:
        raise InvalidInput(
            "no profile given",
            fix=f"pass --profile P (see `tp profiles`) or set `profile` in {exp.file}",
            field="--profile",
        )
    sets = parse_sets(set_)
    workspace = find_workspace(exp.path)
    with connect() as api:
        problems = check_params(exp, fetch_method(api, exp.method), sets)
        for problem in problems[:-1]:
            output.err.print(errors.render(problem), markup=False)
        if problems:  # refused here, before packing and uploading anything
            raise problems[-1]
        policy = _retry(retry) if retry is not None else exp.retry
        resolved, n_files = make_preview(
            api, exp, chosen, sets, runtime, allow_secret_files, queue, policy
        )
        path = write_submission(workspace, api.server, resolved)
        print_summary(resolved, n_files)
        output.info(f"submission file: {shown(path)}")
        if preview:
            output.out.print(f"next: tp submit --commit {shown(path)}", markup=False)
            output.info("(or: tp submit --commit latest, the workspace's newest preview)")
            return 0
        if not yes and not Confirm.ask("submit this job?", console=output.err, default=False):
            output.out.print(
                f"not submitted; later: tp submit --commit {shown(path)}", markup=False
            )
            return 0
        job_id = commit(api, read_submission(path))
        return after_commit(api, job_id, wait, follow)
