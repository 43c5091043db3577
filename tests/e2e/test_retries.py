"""Retries through every layer (docs/lifecycles.md#retries): a policy written in
experiment.toml or given as `tp submit --retry N` reaches the preview, the job, the supervisor
and the scheduler; on the node backend a fenced node's attempt ends `node-lost` and the next
attempt runs on the nodes left, only after every member of the first is known ended."""

from __future__ import annotations

import asyncio
import itertools
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.e2e.test_node_backend import Factory, cli_for, submit
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.nodes import NodeCluster
from tests.fixtures.postgres import _admin, database_url
from tests.fixtures.server import Servers, _admin_token, start_servers, stop_servers
from tests.support import http
from tests.support.db import plain_dsn
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def local_server(
    pg_server: str, pg_template: str, docker_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    """One control plane (`tp serve` on a fresh database, the local backend) for this module's
    local-backend tests, started once: each test has a workspace and experiments of its own
    names, and leaves no job running (each waits for its jobs' end), so none changes what
    another sees, in any order or alone."""
    name = f"tp_test_{uuid.uuid4().hex[:16]}"
    asyncio.run(_admin(pg_server, f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"'))
    url = database_url(pg_server, name)
    state_dir = tmp_path_factory.mktemp("retries-local") / "state"
    state_dir.mkdir()
    try:
        token = asyncio.run(_admin_token(url, docker_host, state_dir))
        servers = start_servers(url, docker_host, state_dir)
        servers.token = token
        try:
            yield servers
        finally:
            stop_servers(servers)
    finally:
        asyncio.run(_admin(pg_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def cli(local_server: Servers, tmp_path: Path) -> Cli:
    """tests/e2e/conftest.py's ``cli`` on the module's one server: logged in, a workspace."""
    c = Cli(tmp_path, tmp_path)
    c("login", "--server", local_server.url, "--token", local_server.token)
    c("init", str(tmp_path / "ws"))
    c.cwd = tmp_path / "ws"
    return c


RETRY = """
[retry]
max_attempts = 2
on = ["failed"]
backoff_seconds = 1
"""


def test_a_failing_command_is_retried_by_its_policy_then_fails_saying_so(cli: Cli) -> None:
    cli("new", "flaky", "--method", "custom/custom")
    toml = cli.cwd / "flaky" / "experiment.toml"
    toml.write_text(toml.read_text() + RETRY)
    cli("validate", "flaky")
    command = "command=echo attempt=$TUNEPLANE_ATTEMPT; exit 3"
    out = cli("submit", "flaky", "--profile", "cpu:0.5", "--set", command, "--yes")
    assert "retry      2 attempts, a new one after failed; backoff 1 s doubling to 600 s" in (
        out.stdout
    ), out.stdout
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job["state"] == "failed" and job["exit_code"] == 3, job
    assert [(a["number"], a["state"], a["end"]) for a in job["attempts"]] == [
        (1, "failed", "failed"),
        (2, "failed", "failed"),
    ], job["attempts"]
    assert job["reason"].startswith("attempt 2 failed (")
    assert job["reason"].endswith("that was the last of its policy's 2 attempts"), job
    assert job["retry"]["max_attempts"] == 2 and job["next_attempt_at"] is None
    status = cli("job", "status", job_id).stdout
    assert "retry      2 attempts" in status and "#2" in status, status
    assert "attempt=2" in cli("job", "logs", job_id).stdout  # the last attempt's member
    stages = cli("job", "events", job_id).stdout
    assert "attempt 1 failed" in stages and "attempt 2 waits for backoff until" in stages, stages


RESUMING = """\
if [ -z "$TUNEPLANE_RESUME_FROM" ]; then
  mkdir -p "$TUNEPLANE_CHECKPOINT_DIR/checkpoint-7"
  echo "state at step 7" > "$TUNEPLANE_CHECKPOINT_DIR/checkpoint-7/state.txt"
  mkdir -p "$TUNEPLANE_CHECKPOINT_DIR/checkpoint-8"   # never marked complete
  echo 7 > "$TUNEPLANE_CHECKPOINT_DIR/checkpoint-7/COMPLETE"
  echo "attempt $TUNEPLANE_ATTEMPT wrote its checkpoint"
  exit 3
fi
state=$(cat "$TUNEPLANE_RESUME_FROM/state.txt")
echo "attempt $TUNEPLANE_ATTEMPT resumed from $TUNEPLANE_RESUME_FROM: $state"
"""


def test_an_attempt_that_failed_hands_its_checkpoint_to_the_next(cli: Cli) -> None:
    """Issue 22 test (b) on the local backend: attempt 1 writes a checkpoint, marks it complete
    and fails; attempt 2 reads it through TUNEPLANE_RESUME_FROM, kept meanwhile in the blob
    store, and succeeds."""
    cli("new", "resumes", "--method", "custom/custom")
    exp = cli.cwd / "resumes"
    (exp / "resume.sh").write_text(RESUMING)
    toml = exp / "experiment.toml"
    toml.write_text(toml.read_text() + RETRY)
    out = cli("submit", "resumes", "--profile", "cpu:0.5", "--set", "command=sh resume.sh",
              "--yes").stdout  # fmt: skip
    job_id = job_id_in(out)
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job["state"] == "succeeded", job
    assert [a["end"] for a in job["attempts"]] == ["failed", ""], job["attempts"]
    log = cli("job", "logs", job_id).stdout
    assert "attempt 2 resumed from /tuneplane/resume/checkpoint-7: state at step 7" in log, log
    said = "attempt 2 resumed from checkpoint-7 (step 7, written by attempt 1)"
    assert [a["resume"] for a in job["attempts"]] == [
        None,
        {"checkpoint": "checkpoint-7", "attempt": 1, "step": 7, "skipped": [], "words": [said]},
    ], job["attempts"]
    why = cli("job", "why", job_id).stdout
    assert said in why, why
    assert said in cli("job", "status", job_id).stdout


def test_retry_on_the_command_line_and_bad_policies_are_refused_naming_the_fix(cli: Cli) -> None:
    cli("new", "short", "--method", "custom/custom")
    preview = cli("submit", "short", "--profile", "cpu:0.5", "--set", "command=true",
                  "--retry", "3", "--preview").stdout  # fmt: skip
    assert "retry      3 attempts, a new one after node-lost, preempted, launch-failed, failed" in (
        preview
    ), preview
    refused = cli("submit", "short", "--profile", "cpu:0.5", "--retry", "0", "--yes", ok=False)
    assert refused.returncode != 0 and "--retry 0" in refused.stderr, refused.stderr
    assert "field: --retry" in refused.stderr
    toml = cli.cwd / "short" / "experiment.toml"
    toml.write_text(toml.read_text() + '\n[retry]\non = ["cancelled"]\n')
    bad = cli("validate", "short", ok=False)
    assert "a user's stop never retries" in bad.stderr and "field: retry.on" in bad.stderr, (
        bad.stderr
    )


async def test_a_fenced_node_ends_the_attempt_node_lost_and_the_next_runs_on_the_others(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(3)
    cli = await cli_for(cluster, tmp_path)
    toml = cli.cwd / "hello" / "experiment.toml"
    toml.write_text(toml.read_text() + "\n[retry]\nmax_attempts = 2\nbackoff_seconds = 1\n")
    # 2 members of 0.5 CPU, one per node
    job_id = submit(cli, "echo attempt=$TUNEPLANE_ATTEMPT; sleep 600", "nodes/cpu:1")
    job = cli.wait_state(job_id, {"running"}, timeout=120)
    first = job["attempts"][0]
    lost = first["members"][0]["node"]
    cluster.kill_daemon(lost)  # its node is gone: unknown, never failed, until fenced
    cli("node", "fence", lost, "--reason", "host powered off")
    job = cli.wait_state(job_id, {"running"}, 120, also=lambda j: len(j["attempts"]) == 2)
    ended, second = job["attempts"]
    assert (ended["state"], ended["end"]) == ("failed", "node-lost"), ended
    assert all(m["state"] in ("failed", "stopped") for m in ended["members"]), ended
    assert lost not in {m["node"] for m in second["members"]}, second
    assert second["created_at"] > ended["updated_at"]  # after every member was known ended
    wait_until(  # the new attempt's member was told its number
        lambda: "attempt=2" in cli("job", "logs", job_id).stdout,
        what="attempt=2 in the job's log",
        every=1.0,
    )
    cli("job", "stop", job_id)
    job = cli.wait_state(job_id, {"cancelled", "failed", "succeeded"}, timeout=120)
    assert job["state"] == "cancelled" and len(job["attempts"]) == 2, job  # a stop: no retry


async def recorded_checkpoints(cluster: NodeCluster, job_id: str) -> list[tuple[int, str, int]]:
    """(attempt, name, step) of the job's kept checkpoints, from the control plane's database."""
    db = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        rows = await db.fetch(
            "SELECT attempt, name, step FROM checkpoints WHERE job_id = $1", job_id
        )
    finally:
        await db.close()
    return sorted((r["attempt"], r["name"], r["step"]) for r in rows)


@pytest.mark.timeout(600)
async def test_a_gang_on_nodes_resumes_on_the_others_from_its_last_checkpoint(
    numpy_runtime: str, node_cluster_factory: Factory, tmp_path: Path
) -> None:
    """Issue 22 test (a): a gang of 2 training the numpy recipe on the node backend; a daemon
    is killed and its node fenced mid-run. The checkpoints the daemons kept through the gateway
    carry the job on the other nodes: attempt 2 resumes from the last one, ends at the
    configured step, and the merged loss curve has no gap. The node lost is member 1's: a lost
    node also takes the metrics its collector had not shipped, and the merged curve is member
    0's (docs/checkpoints.md says what a lost member 0 leaves)."""
    steps = 8000
    cluster = await node_cluster_factory(3)
    cli = await cli_for(cluster, tmp_path)
    cli("new", "mlp", "--method", "numpy/mlp-classification")
    toml = cli.cwd / "mlp" / "experiment.toml"
    toml.write_text(toml.read_text() + '\n[retry]\nmax_attempts = 2\non = ["node-lost"]\n'
                    "backoff_seconds = 1\n")  # fmt: skip
    # batch_size=64 (the default 256): numpy's BLAS then computes each step on one thread, not
    # several spinning on two cores, a tenth of the CPU (8,000 steps: about 4 s of CPU a member,
    # not 43 s); the curve still reaches a kept checkpoint at a few percent of the steps (229 of
    # 8,000 at a load of 8), far from the end
    out = cli("submit", "mlp", "--profile", "nodes/cpu:1", "--set", f"steps={steps}",
              "--set", "batch_size=64", "--yes")  # fmt: skip
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"running"}, timeout=180)
    lost = next(m["node"] for m in job["attempts"][0]["members"] if m["index"] == 1)

    def charted() -> int:
        """The last step of member 0's loss curve in attempt 1, as collected so far: the
        summary `tp job metrics` starts from, asked in this process (polled every 0.2 s, a `tp`
        process each time took a CPU from the training it waits on)."""
        answer = http.get(
            f"{cluster.servers.url}/v1/jobs/{job_id}/metrics",
            headers=cluster.servers.headers,
            timeout=30,
        )
        summary = answer.raise_for_status().json()
        return max((s["last_step"] for s in summary["series"] if s["tag"] == "train/loss"
                    and (s["attempt"], s["member"]) == (1, 0)), default=0)  # fmt: skip

    resumable = None
    while resumable is None:  # a checkpoint kept that the curve has reached
        kept = [s for a, _, s in await recorded_checkpoints(cluster, job_id) if a == 1]
        reached = charted()
        resumable = max((s for s in kept if s <= reached), default=None)
        assert reached < steps, f"{job_id} ended before a checkpoint was kept and charted"
        await asyncio.sleep(0.2)
    cluster.kill_daemon(lost)  # mid-run: its node is gone, unknown until fenced
    cli("node", "fence", lost, "--reason", "host powered off")
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=400)
    log = cli("job", "logs", job_id).stdout
    assert job["state"] == "succeeded", log[-3000:]
    first, second = job["attempts"]
    assert (first["state"], first["end"]) == ("failed", "node-lost"), first
    assert lost not in {m["node"] for m in second["members"]}, second
    resumed = [
        int(s)
        for s in re.findall(r"resumed from /tuneplane/resume/checkpoint-\d+ at step (\d+)", log)
    ]
    assert resumed and min(resumed) >= resumable, (resumed, resumable, log[-3000:])
    said = (
        f"attempt 2 resumed from checkpoint-{resumed[0]} (step {resumed[0]}, written by attempt 1)"
    )
    assert second["resume"]["words"] == [said], second
    assert said in cli("job", "why", job_id).stdout
    assert f"step {steps}: loss" in log and "final: loss" in log

    answer = await asyncio.to_thread(
        httpx.get,
        f"{cluster.servers.url}/v1/jobs/{job_id}/metrics/curve",
        params={"tag": "train/loss", "points": 10000},
        headers=cluster.servers.headers,
        timeout=30,
    )
    curve = answer.json()
    merged = curve["merged"]
    assert merged[0]["first_step"] == 1 and merged[-1]["last_step"] == steps, curve["attempts"]
    gaps = [(a["last_step"], b["first_step"]) for a, b in itertools.pairwise(merged)
            if b["first_step"] > a["last_step"] + 1]  # fmt: skip
    assert not gaps, gaps
    assert {p["attempt"] for p in merged} == {1, 2}
