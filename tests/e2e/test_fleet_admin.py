"""Fleet and policy end to end: the real `tp` CLI against a real API process, PostgreSQL and a
container engine. The empty system's local pool and default queue; an admin makes a team, a
queue, a user and its token; the user submits to the team's queue; a cordoned node holds the job
back until it is uncordoned; a disabled user is refused."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.test_walkthrough import Cli, job_id_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_admin_makes_a_team_queue_and_user_who_submits(cli: Cli) -> None:
    fleet = json.loads(cli("fleet", "ls", "--json").stdout)
    [local] = fleet["pools"]
    assert (local["name"], local["backend"], local["gpus_per_node"]) == ("local", "local", 0)
    [node] = local["nodes"]
    assert (node["name"], node["sched"], node["connectivity"]) == (
        "local", "schedulable", "connected",
    )  # fmt: skip
    assert "cpu:N" in cli("profiles").stdout

    cli("admin", "team", "add", "research")
    cli("queue", "add", "research", "--team", "research", "--priority", "5", "--job-quota", "2")
    cli("admin", "user", "add", "carol", "--team", "research")
    token = cli("admin", "token", "create", "carol").stdout.strip()
    assert token.startswith("tp_")

    carol = Cli(cli.cwd.parent / "carol", cli.cwd)
    server = json.loads((cli.cwd.parent / "config" / "credentials.json").read_text())["server"]
    carol("login", "--server", server, "--token", token)
    assert "carol (member)" in carol("whoami").stdout
    queues = carol("queue", "ls").stdout
    assert "research" in queues and "default" in queues
    refused = carol("fleet", "node", "cordon", "local", ok=False)
    assert refused.returncode == 5 and "ask an admin or an operator" in refused.stderr

    cli("fleet", "node", "cordon", "local")
    carol("new", "hello", "--method", "custom/custom")
    out = carol("submit", "hello", "--profile", "cpu:1", "--yes").stdout
    job_id = job_id_in(out)
    job = carol.status(job_id)
    assert job["state"] == "pending" and job["spec"]["queue"] == "research"  # her only queue
    assert "cordoned" in carol("job", "why", job_id).stdout
    cli("fleet", "node", "uncordon", "local")
    assert carol.wait_state(job_id, {"succeeded", "failed"})["state"] == "succeeded"

    cli("admin", "user", "set", "carol", "--disable")
    deadline = time.monotonic() + 15  # each API process caches a token for a few seconds
    while (whoami := carol("whoami", ok=False)).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert whoami.returncode == 5 and "disabled" in whoami.stderr
