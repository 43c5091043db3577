"""The README walk-through, end to end: the real `tp` CLI against a real API process, real
PostgreSQL and a real container engine. tp init → tp new → submit --preview → submit --commit
→ the job runs in a container → tp job logs prints its output → tp job stop stops a long one."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.docker.backend import DockerBackend
from tests.fixtures.docker import engine_call

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TP = str(Path(sys.executable).parent / "tp")
JOB_ID = re.compile(r"\bjob-[0-9a-f]+\b")


def job_id_in(text: str) -> str:
    """The first job id ``text`` names (as `tp submit` prints it)."""
    found = JOB_ID.search(text)
    assert found is not None, text
    return found.group(0)


class Cli:
    def __init__(self, home: Path, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
        self.env["TUNEPLANE_CONFIG_DIR"] = str(home / "config")

    def __call__(
        self, *args: str, ok: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [TP, *args], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if ok and proc.returncode != 0:
            raise AssertionError(
                f"tp {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def status(self, job_id: str) -> dict[str, Any]:
        return json.loads(self("job", "status", job_id, "--json").stdout)  # type: ignore[no-any-return]

    def api(self) -> httpx.Client:
        """An HTTP client with the login the CLI saved, for polls (``wait_state``): what `tp`
        sends, without a process a poll."""
        creds = json.loads(
            (Path(self.env["TUNEPLANE_CONFIG_DIR"]) / "credentials.json").read_text()
        )
        headers = {"Authorization": f"Bearer {creds['token']}"}
        return httpx.Client(base_url=creds["server"], headers=headers, timeout=30)

    def wait_state(
        self,
        job_id: str,
        states: set[str],
        timeout: float = 60,
        also: Callable[[dict[str, Any]], bool] = lambda job: True,
    ) -> dict[str, Any]:
        """Poll the job as `tp job status --json` reads it (GET /v1/jobs/ID with the login the
        CLI saved), in this process: starting `tp` every poll would take 0.3-0.45 s of a core
        each time from the workloads under test on a 2-core machine."""
        deadline = time.monotonic() + timeout
        with self.api() as api:
            while True:
                job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}").raise_for_status().json()
                if job["state"] in states and also(job):
                    return job
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"job {job_id} still {job['state']} after {timeout}s: {job}"
                    )
                time.sleep(0.2)


def hello_workspace(url: str, token: str, home: Path) -> Cli:
    """A `tp` logged in to ``url`` with a workspace under ``home`` holding the experiment
    `hello` (custom/custom: submit it with ``--set command=…``)."""
    c = Cli(home, home)
    c("login", "--server", url, "--token", token)
    c("init", str(home / "ws"))
    c.cwd = home / "ws"
    c("new", "hello", "--method", "custom/custom")
    return c


def test_submit_run_and_read_logs(cli: Cli) -> None:
    cli("new", "hello", "--method", "custom/custom")
    exp = cli.cwd / "hello"
    (exp / "train.sh").write_text(
        "echo 'hello from tuneplane'\n"
        "echo 'to stderr' >&2\n"
        "cat data.txt\n"
        "test ! -e checkpoint.bin && echo 'ignored file not shipped'\n"
    )
    (exp / "data.txt").write_text("data file shipped\n")  # untracked, not ignored: shipped
    (exp / ".gitignore").write_text("checkpoint.bin\n")
    (exp / "checkpoint.bin").write_bytes(b"\0" * 1024)  # ignored: not shipped
    cli("validate", "hello")

    preview = cli("submit", "hello", "--profile", "cpu:1", "--preview")
    files = list((cli.cwd / ".tuneplane-data" / "submissions").glob("pv-*.json"))
    assert len(files) == 1, preview.stdout
    saved = json.loads(files[0].read_text())
    assert saved["preview"]["spec"]["runtime"]["digest"].startswith("sha256:")
    assert saved["retry_key"] and saved["preview"]["id"] in preview.stdout
    assert files[0].stat().st_mode & 0o077 == 0

    first = cli("submit", "--commit", str(files[0]))
    job_id = job_id_in(first.stdout)
    again = cli("submit", "--commit", str(files[0]))
    assert job_id_in(again.stdout) == job_id
    assert "already" in again.stdout

    job = cli.wait_state(job_id, {"succeeded", "failed"})
    assert job["state"] == "succeeded", job
    assert job["exit_code"] == 0

    logs = cli("job", "logs", job_id).stdout
    for line in (
        "hello from tuneplane",
        "to stderr",
        "data file shipped",
        "ignored file not shipped",
    ):
        assert line in logs, logs
    listed = cli("job", "ls", "--all").stdout
    assert job_id in listed


async def test_stop_a_long_job(cli: Cli, docker_host: str) -> None:
    cli("new", "sleeper", "--method", "custom/custom")
    out = cli(
        "submit",
        "sleeper",
        "--profile",
        "cpu:1",
        "--set",
        "command=echo started; sleep 600",
        "--yes",
    )
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"running"})
    handle = job["attempts"][0]["members"][0]["handle"]
    assert handle

    cli("job", "stop", job_id, "--wait", timeout=90)
    job = cli.wait_state(job_id, {"cancelled"}, timeout=30)
    member = job["attempts"][0]["members"][0]
    assert member["state"] == "stopped"
    assert member["exit_code"] == 128 + 15, member  # SIGTERM reached it; no SIGKILL was needed
    assert "started" in cli("job", "logs", job_id).stdout

    async with DockerBackend(docker_host) as backend:
        assert (await backend.observe(handle)).status == "missing"  # released
    again = cli("job", "stop", job_id)  # idempotent
    assert again.returncode == 0


async def test_a_member_killed_outside_tuneplane_fails_saying_so(
    cli: Cli, docker_host: str
) -> None:
    """Issue 19, item 6: `docker kill` behind TunePlane's back ends the job `failed` (a
    `tp job stop` is `cancelled`), the reason naming what ended it, as on every backend."""
    cli("new", "sleeper", "--method", "custom/custom")
    out = cli("submit", "sleeper", "--profile", "cpu:1", "--set", "command=sleep 600", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"running"})
    handle = job["attempts"][0]["members"][0]["handle"]
    path = f"/containers/{handle}/kill"  # docker kill
    assert (await asyncio.to_thread(engine_call, docker_host, "POST", path)).status_code == 204
    job = cli.wait_state(job_id, {"failed", "cancelled", "succeeded"}, timeout=60)
    member = job["attempts"][0]["members"][0]
    assert (job["state"], member["state"], member["exit_code"]) == ("failed", "failed", 137)
    reason = "cancelled outside TunePlane: docker kill (SIGKILL)"
    assert (member["reason"], job["reason"]) == (reason, reason)


def test_a_capsule_changed_after_preview_fails_before_user_code(cli: Cli, tmp_path: Path) -> None:
    cli("new", "tampered", "--method", "custom/custom")
    exp = cli.cwd / "tampered"
    (exp / "train.sh").write_text("echo 'user code ran'\n")
    cli("submit", "tampered", "--profile", "cpu:1", "--preview")
    (saved,) = (cli.cwd / ".tuneplane-data" / "submissions").glob("pv-*.json")
    spec = json.loads(saved.read_text())["preview"]["spec"]
    assert spec["capsule"]["digest"].startswith("sha256:")

    def blob(digest: str) -> Path:
        (path,) = (tmp_path / "state").rglob(digest.removeprefix("sha256:"))
        return path

    capsule, source = blob(spec["capsule"]["blob"]), blob(spec["source"]["digest"])
    data, at = bytearray(capsule.read_bytes()), capsule.read_bytes().find(source.read_bytes())
    assert at > 0
    data[at + source.stat().st_size // 2] ^= 0x01  # one bit of the source, inside the capsule
    capsule.write_bytes(bytes(data))

    out = cli("submit", "--commit", str(saved))
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"})
    assert job["state"] == "failed", job
    # the blob store's digest check refuses it before launch (the runner checks the capsule's
    # files against its manifest too: tests/integration/test_capsule_runner.py)
    status = cli("job", "status", job_id).stdout
    assert "its Job Capsule cannot be read" in status, status
    assert f"blob {spec['capsule']['blob']} fails its digest check" in status, status
    assert not job["attempts"][0]["members"][0]["handle"], job  # never launched


def test_outputs_are_recorded_and_verified_and_tampering_is_reported(
    cli: Cli, tmp_path: Path
) -> None:
    cli("new", "writer", "--method", "custom/custom")
    (cli.cwd / "writer" / "train.sh").write_text(
        'mkdir -p "$TUNEPLANE_OUTPUT_DIR/ckpt"\n'
        'printf "weights-%s" 1 2 3 > "$TUNEPLANE_OUTPUT_DIR/ckpt/model.bin"\n'
        'echo \'{"accuracy": 0.9}\' > "$TUNEPLANE_OUTPUT_DIR/report.json"\n'
    )
    out = cli("submit", "writer", "--profile", "cpu:1", "--yes")
    job_id = job_id_in(out.stdout)
    assert cli.wait_state(job_id, {"succeeded", "failed"})["state"] == "succeeded"

    listed = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)
    (member,) = listed["members"]
    files = {f["path"]: f for f in member["files"]}
    assert set(files) == {"ckpt/model.bin", "report.json"}
    assert files["ckpt/model.bin"]["size"] == len("weights-1weights-2weights-3")
    assert member["digest"].startswith("sha256:")
    assert "ckpt/model.bin" in cli("artifacts", "ls", job_id).stdout
    assert "2 files match manifest" in cli("artifacts", "verify", job_id).stdout

    (outputs,) = (tmp_path / "state" / "outputs" / job_id).glob("*/0")
    (outputs / "ckpt" / "model.bin").write_bytes(b"weights-X" * 3)
    (outputs / "report.json").unlink()
    (outputs / "extra.txt").write_text("planted")
    verdict = cli("artifacts", "verify", job_id, ok=False)
    assert verdict.returncode == 1
    for line in ("ckpt/model.bin", "changed", "report.json", "missing", "extra.txt", "added"):
        assert line in verdict.stdout, verdict.stdout


def test_a_stale_recipe_lock_is_refused_until_upgraded(cli: Cli) -> None:
    cli("new", "locked", "--method", "custom/custom")
    lock_file = cli.cwd / "locked" / "recipe.lock.json"
    lock = json.loads(lock_file.read_text())
    assert lock["method"] == "custom/custom" and lock["digest"].startswith("sha256:")
    cli("validate", "locked")
    lock_file.write_text(json.dumps({**lock, "digest": "sha256:" + "0" * 64}))  # an older recipe

    checked = cli("validate", "locked", ok=False)
    assert checked.returncode != 0 and "recipe.lock.json is stale" in checked.stderr
    assert "tp recipe upgrade locked" in checked.stderr
    preview = cli("submit", "locked", "--profile", "cpu:1", "--preview", ok=False)
    assert preview.returncode != 0 and "recipe.lock.json is stale" in preview.stderr

    cli("recipe", "upgrade", "locked")
    assert json.loads(lock_file.read_text())["digest"] == lock["digest"]
    cli("validate", "locked")
    cli("submit", "locked", "--profile", "cpu:1", "--preview")


def _waiting_line(lines: Any, *words: str, unless: str = "") -> str:
    """The next `waiting: …` line of `tp submit --follow`'s stderr holding every word (and
    not ``unless``)."""
    for line in lines:
        said = line.startswith("waiting: ") and all(w in line for w in words)
        if said and not (unless and unless in line):
            return str(line)
    raise AssertionError(f"--follow ended without a waiting line saying {words}")


def test_follow_says_why_a_job_waits_and_the_readme_uncordons(cli: Cli) -> None:
    """The README's quota walk-through, then what a newcomer hit after it: a job held by a
    quota shows why in `tp job ls`; `--follow` on it says that it waits and why, and again as
    that changes (quota, then the cordoned node); uncordoning lets it run, as the README now
    says. Before, the walk-through left the only node cordoned and `--follow` hung silently.
    The set-up and the admin's steps go through the HTTP API (each `tp` start costs seconds of
    a busy 2-core machine); what is under test runs as `tp`."""
    creds = json.loads((Path(cli.env["TUNEPLANE_CONFIG_DIR"]) / "credentials.json").read_text())
    api = httpx.Client(
        base_url=creds["server"], headers={"Authorization": f"Bearer {creds['token']}"}
    )
    cli("new", "hello", "--method", "custom/custom")
    api.post("/v1/teams", json={"name": "vision"}).raise_for_status()
    queue = {"name": "research", "team": "vision", "priority": 10, "job_quota": 1}
    api.post("/v1/queues", json=queue).raise_for_status()
    submit = ["submit", "hello", "--profile", "cpu:1", "--queue", "research", "--yes"]
    # exits on SIGTERM at once (PID 1 ignores a signal it has no handler for)
    out = cli(*submit, "--set", "command=trap 'exit 0' TERM; sleep 300 & wait").stdout
    first = job_id_in(out)
    follow = subprocess.Popen(
        [TP, *submit, "--set", "command=echo second-ran", "--follow"],
        cwd=cli.cwd, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert follow.stderr is not None
        lines = iter(follow.stderr.readline, "")
        held = _waiting_line(lines, "is pending", "queue research (team vision) quota 1/1")
        second = job_id_in(held)
        listed = cli("job", "ls").stdout  # the REASON column
        assert second in listed and "quota 1/1" in " ".join(listed.split()), listed
        api.post("/v1/nodes/local/cordon").raise_for_status()
        api.post(f"/v1/jobs/{first}/cancel").raise_for_status()
        _waiting_line(lines, second, "cordoned", unless="quota 1/1")  # said again as it changed
        api.post("/v1/nodes/local/uncordon").raise_for_status()  # the README's last step now
        out, _ = follow.communicate(timeout=120)
        assert follow.returncode == 0 and "second-ran" in out, out
    finally:
        api.close()
        if follow.poll() is None:
            follow.kill()
            follow.wait()
