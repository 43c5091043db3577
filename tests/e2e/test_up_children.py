"""`tp up` keeps its children running (issue 18, defect 6): each of the node gateway, the
telemetry gateway, the local node daemon and the daemon's collector is killed with SIGKILL while
a job writes metrics; each comes back (a new pid, the restart logged with the exit status) and
works again: the job's metrics flow again, the daemon's heartbeats resume, and a job submitted
after all of it runs. The running member is never started twice."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_node_backend import starts
from tests.e2e.test_up import Up
from tests.e2e.test_walkthrough import job_id_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# one point every 0.2 s for up to 5 minutes (the job is stopped at the end)
WRITER = (
    'd="$TUNEPLANE_METRICS_DIR"; test -d "$d" || exit 3; i=0; '
    "while [ $i -lt 1500 ]; do "
    'printf \'{"step": %d, "metrics": {"train/loss": %d}}\\n\' $i $((100000 / (i + 10))) '
    '>> "$d/train.jsonl"; i=$((i + 1)); sleep 0.2; done'
)


def _wait(ok: Callable[[], object], what: str, timeout: float = 90) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := ok():
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _processes(up: Up) -> dict[int, str]:
    """The live (not zombie) `tp` processes of this `tp up` (its state directory in their
    environment): pid → command line, found in /proc as an operator would with ps."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            env = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if "entrypoints.cli.main" in cmd and str(up.state).encode() in env and state != "Z":
            found[int(pid)] = cmd
    return found


def _pid(up: Up, kind: str) -> int | None:
    """The live process of this `tp up` whose command line has ``kind``."""
    return next(
        (pid for pid, cmd in _processes(up).items() if f"entrypoints.cli.main {kind}" in cmd), None
    )


def test_each_child_of_tp_up_killed_comes_back_and_works(
    up: Up, tmp_path: Path, docker_host: str
) -> None:
    printed = up.start()
    cli, token = up.workspace(printed, tmp_path)
    headers = {"Authorization": f"Bearer {token}"}
    api = httpx.Client(base_url=f"http://127.0.0.1:{up.port}", headers=headers, timeout=30)
    since = time.time() - 1
    out = cli("submit", "hello", "--profile", "cpu:1", "--set", f"command={WRITER}", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"running"}, 120)
    attempt = job["attempts"][0]["id"]

    def last_step() -> int:
        curve = api.get(f"/v1/jobs/{job_id}/metrics/curve", params={"tag": "train/loss"})
        merged = curve.json().get("merged") or [] if curve.status_code == 200 else []
        return int(merged[-1]["last_step"]) if merged else -1

    def heartbeat() -> str:
        [link] = [a for a in api.get("/v1/node-links").json() if a["node"] == "local"]
        return str(link["heartbeat_at"])

    def metrics_flow() -> None:
        step = last_step()
        _wait(lambda: last_step() > step + 5, f"metrics past step {step}")

    def heartbeats_resume() -> None:
        beat = heartbeat()
        _wait(lambda: heartbeat() > beat, "a new heartbeat of node local")

    metrics_flow()
    children = {  # the command, the pid file, what shows it works again
        "telemetry gateway": ("gateway telemetry", "telemetry-gateway.pid", metrics_flow),
        "collector": ("collector", "node/collector/collector.pid", metrics_flow),
        "node gateway": ("gateway node", "gateway.pid", heartbeats_resume),
        "local node daemon": ("node run", "node.pid", heartbeats_resume),
    }
    for name, (kind, pid_file, works) in children.items():
        old = _pid(up, kind)
        assert old is not None, name
        os.kill(old, signal.SIGKILL)

        def restarted(k: str = kind, o: int = old) -> object:
            return (p := _pid(up, k)) not in (None, o) and p

        new = _wait(restarted, name)
        works()
        if name != "collector":  # the daemon logs its collector's restarts in node.log
            assert f"the {name} (pid {old}) was killed by SIGKILL" in up.log.read_text(), name
        assert (up.state / pid_file).read_text() == f"{new}\n", name  # restart it by hand
    assert "kill $(cat" in printed  # tp up says how
    collector_log = (up.state / "node" / "collector" / "collector.log").read_text()
    node_log = (up.state / "node.log").read_text()
    assert "the collector (pid" in node_log and "was killed by SIGKILL" in node_log
    assert collector_log  # the restarted collectors kept writing their log

    out = cli("submit", "hello", "--profile", "cpu:1", "--set", "command=echo after", "--yes")
    second = job_id_in(out.stdout)
    assert cli.wait_state(second, {"succeeded", "failed"}, 120)["state"] == "succeeded"
    assert cli.status(job_id)["state"] == "running"
    assert starts(docker_host, attempt, since) == {job["attempts"][0]["members"][0]["id"]: 1}
    cli("job", "stop", job_id, "--wait")
    points = json.loads(cli("job", "metrics", job_id, "--json").stdout)
    merged = points["curves"]["train/loss"]["merged"]
    assert merged and merged[-1]["last_step"] > 0
    api.close()


def _live(up: Up) -> list[str]:
    """Command lines of this `tp up`'s live children and grandchildren."""
    return list(_processes(up).values())


def test_children_die_with_tp_up_killed_9_and_the_next_tp_up_connects(
    up: Up, tmp_path: Path
) -> None:
    """Issue 19 item 7: kill -9 of `tp up` takes its gateways, daemon and collector with it;
    the next `tp up` on the same ports starts cleanly and its local node connects. The killed
    gateway never closed the node's session: the second one refuses the node as a second session
    until its heartbeats are `max(6 × 1 s, floor)` old, a 6 s floor here instead of 30 s."""
    up.env["TUNEPLANE_NODE_SESSION_FLOOR_SECONDS"] = "6"
    printed = up.start()
    _, token = up.workspace(printed, tmp_path)
    assert {"gateway node", "gateway telemetry", "node run", "collector"} <= {
        k
        for c in _live(up)
        for k in ("gateway node", "gateway telemetry", "node run", "collector")
        if k in c
    }
    assert up.proc is not None
    up.proc.kill()
    up.proc.wait()
    _wait(lambda: not _live(up), "every child of the killed tp up to end", 60)

    second = time.time()
    printed = up.start()
    assert f"node gateway: 127.0.0.1:{up.gateway_port} (TLS" in printed
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{up.port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )

    def connected() -> bool:
        links = [a for a in api.get("/v1/node-links").json() if a["node"] == "local"]
        return bool(links) and _epoch(links[0]["heartbeat_at"]) > second

    _wait(connected, "node local to connect to the second tp up")
    gateway_log = (up.state / "gateway.log").read_text()
    assert "address already in use" not in gateway_log.lower()
    api.close()


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("which", ["node", "telemetry"])
def test_a_gateway_port_held_by_another_process_stops_tp_up_with_the_reason(
    up: Up, which: str
) -> None:
    """Issue 19 item 7: `tp up` never reports a listener that did not start."""
    import socket

    port = up.gateway_port if which == "node" else up.telemetry_port
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", port))
        holder.listen()
        with pytest.raises(AssertionError, match="tp up exited") as failed:
            up.start()
    text = str(failed.value)
    assert f"{which} gateway: 127.0.0.1:{port}" not in text
    assert f"{port}" in text and "in use" in text, text
    assert "fix: stop what uses the port" in text, text  # the child's own fix, once
    assert text.count("fix: stop what uses the port") == 1, text
    assert up.proc is not None and up.proc.returncode not in (0, None)
    _wait(lambda: not _live(up), "no child left behind", 60)
