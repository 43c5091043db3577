"""Metrics on Slurm without a cluster: the member wrapper (`member.sh`, adapters/slurm/script.py
and collector.py) run by bash as one Slurm task would (``SLURM_PROCID`` set), with a stand-in
collector that behaves as `tp collector` does with its members directory; and the control
plane's side (the member file with its member-scoped token). The real cluster, collector and
gateway: tests/e2e/test_slurm_metrics.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters.collector_tokens import CollectorTokens
from adapters.docker.runtimes import BUSYBOX
from adapters.slurm.collector import SlurmCollector, member_file
from adapters.slurm.collector_files import CollectorFiles
from adapters.slurm.script import member_script
from domain.errors import Unavailable
from domain.ports import LaunchRequest
from domain.runtimes import pin_of
from domain.telemetry import MemberScope
from tests.fixtures.docker import make_request
from tests.support.context import FakeClock
from tests.support.signing import OneKey

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)

# A stand-in for `tp collector` (same flags, same members-directory protocol): it records its
# pid and the modes it found, and writes `<member>.drained` once a member file says ended (mode
# "drain"), or never (mode "stuck"). With --ignore-term only SIGINT ends it, as the real one.
FAKE = r"""
import json, os, pathlib, signal, sys, time
argv = [a for a in sys.argv[1:] if a not in ("collector", "--ignore-term")]
args = dict(zip(argv[::2], argv[1::2]))
mode = os.environ.get("FAKE_MODE", "drain")
spool, members = pathlib.Path(args["--spool"]), pathlib.Path(args["--members"])
(spool / "spool.sqlite").write_text("x")
out = pathlib.Path(os.environ["FAKE_OUT"])
out.write_text(json.dumps({"pid": os.getpid(), "spool_mode": spool.stat().st_mode & 0o777,
                           "members_mode": members.stat().st_mode & 0o777, "args": sys.argv[1:]}))
print("fake collector started", flush=True)
if "--ignore-term" in sys.argv:  # as `tp collector --ignore-term`: SIGINT stops it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))  # bash started it ignoring SIGINT
seen = pathlib.Path(str(out) + ".seen")
while True:
    for f in members.glob("*.json"):
        body = json.loads(f.read_text())
        if not seen.exists():
            seen.write_text(json.dumps(body["ended"]))
        if body["ended"] and mode == "drain":
            (members / (f.stem + ".drained")).write_text("")
    time.sleep(0.05)
"""


def request(command: str, index: int = 0) -> LaunchRequest:
    pin = pin_of(BUSYBOX, "sha256:" + "ab" * 32)
    return make_request("job-0123456789ab", pin, ("/bin/sh", "-c", command), member_index=index)


def collector(tmp_path: Path, drain: int = 30, command: str | None = None) -> SlurmCollector:
    fake = tmp_path / "fake_collector.py"
    fake.write_text(FAKE)
    return SlurmCollector(
        gateway="telemetry.example:8472",
        ca=str(tmp_path / "ca.pem"),
        command=command or f"{sys.executable} {fake}",
        spool_root=str(tmp_path / "local"),
        drain_seconds=drain,
    )


def run_member(
    tmp_path: Path,
    req: LaunchRequest,
    c: SlurmCollector | None,
    runtime_dir: str | None = None,
    outputs_root: str | None = None,
    **env: str,
) -> tuple[int, str, Path]:
    """Run member.sh as Slurm's task of rank ``req.member_index``: (exit code, log, dir)."""
    d = tmp_path / "shared" / req.attempt_id
    d.mkdir(parents=True, exist_ok=True)
    script = d / "member.sh"
    script.write_text(
        member_script(req, str(d), 29500, c, runtime_dir=runtime_dir, outputs_root=outputs_root)
    )
    full = dict(
        os.environ,
        SLURM_PROCID=str(req.member_index),
        SLURM_JOB_ID="7",
        FAKE_OUT=str(tmp_path / "fake.json"),
        **env,
    )
    proc = subprocess.run(["bash", str(script)], env=full, timeout=60)
    log = (d / f"member-{req.member_index}.log").read_text()
    return proc.returncode, log, d


def put_member_file(d: Path, req: LaunchRequest) -> Path:
    """What the control plane writes at the member's launch (CollectorFiles.write)."""
    folder = d / f"collector-{req.member_index}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{req.member_id}.json"
    metrics = str(d / f"metrics-{req.member_index}")
    path.write_text(
        member_file(req.job_id, req.attempt_id, req.member_id, req.member_index, "tok", metrics)
    )
    path.chmod(0o600)
    return path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0]
    return status != "Z"


def test_every_member_gets_a_metrics_directory_without_a_collector(tmp_path: Path) -> None:
    """The documented `SummaryWriter(os.environ["TUNEPLANE_METRICS_DIR"])` raised KeyError."""
    req = request('python3 -c \'import os; print("dir=" + os.environ["TUNEPLANE_METRICS_DIR"])\'')
    rc, log, d = run_member(tmp_path, req, None)
    assert rc == 0, log
    assert f"dir={d}/metrics-0" in log
    assert (d / "metrics-0").is_dir()


def test_the_collector_runs_with_the_member_drains_and_is_gone(tmp_path: Path) -> None:
    req = request('echo "{\\"step\\": 1}" > "$TUNEPLANE_METRICS_DIR/m.jsonl"; exit 3', index=1)
    c = collector(tmp_path)
    d = tmp_path / "shared" / req.attempt_id
    d.mkdir(parents=True)
    member = put_member_file(d, req)
    rc, log, _ = run_member(tmp_path, req, c)
    assert rc == 3, log
    assert (d / "member-1.exit").read_text().strip() == "3"
    assert "did not ship" not in log, log
    body = json.loads(member.read_text())
    assert body["ended"] is True and body["token"] == "tok"  # marked ended, nothing else
    assert stat.S_IMODE(member.stat().st_mode) == 0o600
    assert (member.parent / f"{req.member_id}.drained").exists()
    seen = json.loads((tmp_path / "fake.json").read_text())
    assert not alive(seen["pid"])  # stopped by the wrapper: no collector outlives its member
    assert seen["spool_mode"] == 0o700 and seen["members_mode"] == 0o700
    assert seen["args"][:7] == [
        "collector", "--ignore-term", "--gateway", "telemetry.example:8472", "--ca",
        f"{d}/collector-ca.pem", "--spool",
    ]  # fmt: skip
    assert seen["args"][7] == f"{tmp_path}/local/tp-{req.attempt_id}-1"
    assert not Path(seen["args"][7]).exists()  # the node-local spool is removed
    assert (d / "metrics-1" / "m.jsonl").read_text() == '{"step": 1}\n'
    assert "fake collector started" in (d / "collector-1.log").read_text()


def test_a_training_killed_by_sigkill_still_gets_its_metrics_shipped(tmp_path: Path) -> None:
    req = request('echo 1 > "$TUNEPLANE_METRICS_DIR/a.jsonl"; kill -9 $$')
    d = tmp_path / "shared" / req.attempt_id
    d.mkdir(parents=True)
    member = put_member_file(d, req)
    rc, log, _ = run_member(tmp_path, req, collector(tmp_path))
    assert rc == 137, log
    assert (member.parent / f"{req.member_id}.drained").exists()
    assert not alive(json.loads((tmp_path / "fake.json").read_text())["pid"])


def test_a_collector_that_cannot_ship_holds_the_member_for_the_bound_only(tmp_path: Path) -> None:
    req = request("echo trained")
    d = tmp_path / "shared" / req.attempt_id
    d.mkdir(parents=True)
    put_member_file(d, req)
    rc, log, _ = run_member(tmp_path, req, collector(tmp_path, drain=1), FAKE_MODE="stuck")
    assert rc == 0 and "trained" in log
    assert "the metrics collector of member 0 did not ship everything within 1 s" in log
    assert "fake collector started" in log  # the end of its log, where the user sees it
    seen = json.loads((tmp_path / "fake.json").read_text())
    assert not alive(seen["pid"]) and not Path(seen["args"][7]).exists()


def test_a_collector_that_does_not_start_never_stops_the_training(tmp_path: Path) -> None:
    req = request("echo trained; exit 4")
    d = tmp_path / "shared" / req.attempt_id
    d.mkdir(parents=True)
    put_member_file(d, req)
    c = collector(tmp_path, command="/nonexistent/tp")
    rc, log, _ = run_member(tmp_path, req, c)
    assert rc == 4 and "trained" in log, log
    assert "stopped before it shipped everything" in log and "/nonexistent/tp" in log


async def test_each_member_file_carries_a_token_for_that_member_only(tmp_path: Path) -> None:
    tokens = CollectorTokens(OneKey())
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    c = collector(tmp_path)
    files = CollectorFiles(c, tokens, FakeClock(NOW), 3600)
    d = tmp_path / "shared" / "att"
    d.mkdir(parents=True)
    scopes = []
    for index in (0, 1):
        req = request("true", index)
        await files.write(d, req)
        path = d / f"collector-{index}" / f"{req.member_id}.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        body = json.loads(path.read_text())
        assert body["metrics_dir"] == f"{d}/metrics-{index}" and body["ended"] is False
        claims = await tokens.verify(body["token"], NOW)
        assert claims.scope == MemberScope(req.job_id, req.attempt_id, req.member_id, index)
        scopes.append(claims.scope)
        # a repeated launch keeps the file (the member may have marked it ended)
        path.write_text(path.read_text().replace('"ended": false', '"ended": true'))
        await files.write(d, req)
        assert json.loads(path.read_text())["ended"] is True
    assert scopes[0] != scopes[1]
    assert (d / "collector-ca.pem").read_text() == ca.read_text()
    ca.unlink()
    with pytest.raises(Unavailable, match=r"CA .* cannot be read") as caught:
        await files.write(d, request("true", 2))
    assert "TUNEPLANE_SLURM_TELEMETRY_CA" in (caught.value.fix or "")
    assert not (d / "collector-2").exists() or not any((d / "collector-2").iterdir())


def test_a_requeued_member_is_collected_again(tmp_path: Path) -> None:
    # the training ends once the collector has looked at the member file
    req = request(
        'echo 1 >> "$TUNEPLANE_METRICS_DIR/a.jsonl"; until [ -e "$FAKE_OUT.seen" ];'
        " do sleep 0.05; done"
    )
    d = tmp_path / "shared" / req.attempt_id
    d.mkdir(parents=True)
    member = put_member_file(d, req)
    drained = member.parent / f"{req.member_id}.drained"
    for _ in range(2):  # Slurm requeued the job: the same attempt runs again
        seen = tmp_path / "fake.json.seen"
        seen.unlink(missing_ok=True)
        rc, log, _ = run_member(tmp_path, req, collector(tmp_path))
        assert rc == 0 and "did not ship" not in log, log
        assert json.loads(seen.read_text()) is False  # the collector tails it afresh
        assert drained.exists() and json.loads(member.read_text())["ended"] is True


def test_a_killed_wrapper_takes_its_collector_with_it(tmp_path: Path) -> None:
    """Slurm kills the whole step; should the wrapper alone die (kill -9), its collector gets
    the parent-death signal (setpriv --pdeathsig) instead of running on, orphaned."""
    req = request("sleep 30")
    d = tmp_path / "shared" / req.attempt_id
    d.mkdir(parents=True)
    put_member_file(d, req)
    (d / "member.sh").write_text(member_script(req, str(d), 29500, collector(tmp_path)))
    out = tmp_path / "fake.json"
    env = dict(os.environ, SLURM_PROCID="0", FAKE_OUT=str(out))
    wrapper = subprocess.Popen(["bash", str(d / "member.sh")], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not out.exists() or not out.read_text():
            assert time.monotonic() < deadline and wrapper.poll() is None
            time.sleep(0.05)
        pid = json.loads(out.read_text())["pid"]
        wrapper.kill()
        wrapper.wait()
        while alive(pid):
            assert time.monotonic() < deadline, "the collector outlived its wrapper"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(wrapper.pid, signal.SIGKILL)  # the orphaned `sleep` (Slurm's job here)


def test_the_real_collector_with_ignore_term_ships_on_until_sigint(tmp_path: Path) -> None:
    """Slurm sends SIGTERM to every process of a stopped job: a member's `tp collector
    --ignore-term` runs on (here: it still takes up a new member file), and the SIGINT its
    wrapper sends when done stops it cleanly, even started in the background by bash (which
    starts background commands with SIGINT ignored)."""
    from adapters.tls import ensure_dev_pki
    from tests.fixtures.server import TP, free_port

    pki = ensure_dev_pki(tmp_path / "state", ["127.0.0.1"])
    members = tmp_path / "members"
    members.mkdir()
    log = tmp_path / "collector.log"
    pidfile = tmp_path / "pid"
    line = (
        f"{TP} collector --ignore-term --spool {tmp_path / 'spool'} --members {members}"
        f" --gateway 127.0.0.1:{free_port()} --ca {pki.ca.cert} >{log} 2>&1 &"
        f" echo $! >{pidfile}; wait $!; echo exit=$? >>{log}"
    )
    wrapper = subprocess.Popen(["bash", "-c", line])

    def wait_log(text: str) -> None:
        deadline = time.monotonic() + 60
        while text not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text() if log.exists() else ""
            time.sleep(0.05)

    try:
        wait_log("collecting members of")
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
        req = request("true")
        (members / f"{req.member_id}.json").write_text(
            member_file(req.job_id, req.attempt_id, req.member_id, 0, "t", str(tmp_path))
        )
        wait_log(f"member {req.member_id}: collecting")  # alive after SIGTERM
        os.kill(pid, signal.SIGINT)
        assert wrapper.wait(60) == 0
        assert "exit=0" in log.read_text()
    finally:
        if wrapper.poll() is None:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            wrapper.kill()
