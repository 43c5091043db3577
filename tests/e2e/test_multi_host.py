"""TunePlane deployed across hosts (issue 24, item 6): every process on a "host" of its own, a
network namespace with its own address and name, a firewall that lets through only the flows
docs/operations.md's traffic table names, TLS verified against the hosts' real names.

    api  (10.213.X.2)  `tp serve` (8470), the leader
    tel  (10.213.X.3)  `tp gateway telemetry` (8472)
    db   (10.213.X.4)  PostgreSQL (5432)
    n1, n2             `tp node run --executor process`, each with its collector
    api2 (10.213.X.7)  a second `tp serve` (8470) and `tp gateway node` (8471)
    the test process   the operator's machine (10.213.X.254): `tp` and HTTP to the APIs

A 2-member gang runs to success across n1 and n2, its metrics arrive through the telemetry
gateway, a flow the table does not name is refused. Then host api, whose API leads, is cut off
as by a pulled cable (no reset, no FIN: its processes run on, unreachable): PostgreSQL ends its
sessions after TUNEPLANE_DB_KEEPALIVE_SECONDS, the API on api2 takes the lease, and a second
job runs, submitted through api2. When api is plugged back in, its API follows and serves.
(Each API on a host of its own: cutting a host that held both would leave none to take over.)
The lab (tests/support/netlab.py) is removed whatever happens, and leftovers of a killed run
are swept at the start."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.postgres.embedded_os import find_bin_dir, server_user
from adapters.tls import generate_ca, issue_server_cert
from entrypoints.settings_loader import load
from entrypoints.settings_sections import PostgresSettings
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.server import TP
from tests.support import http, netlab
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NO_ENGINE = "unix:///nonexistent/no-container-engine-here.sock"
ROLES = ("api", "tel", "db", "n1", "n2", "api2")
API_HOSTS = ("api", "api2")
API_PORT, NODE_GATEWAY, TELEMETRY_GATEWAY, POSTGRES = 8470, 8471, 8472, 5432
KEEPALIVE = 6  # TUNEPLANE_DB_KEEPALIVE_SECONDS: how soon PostgreSQL drops a cut-off host
RENDEZVOUS = "29500-29999"
# docs/operations.md#traffic-between-hosts: who may open a connection to whom, on which port
FLOWS: dict[str, list[tuple[str, str]]] = {
    "api": [("operator", str(API_PORT))],
    "api2": [("operator", str(API_PORT)), ("n1", str(NODE_GATEWAY)), ("n2", str(NODE_GATEWAY))],
    "tel": [("n1", str(TELEMETRY_GATEWAY)), ("n2", str(TELEMETRY_GATEWAY))],
    "db": [("api", str(POSTGRES)), ("api2", str(POSTGRES)), ("tel", str(POSTGRES))],
    "n1": [("n2", RENDEZVOUS)],
    "n2": [("n1", RENDEZVOUS)],
}


@dataclass
class Deployment:
    lab: netlab.Lab
    root: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    token: str = ""

    def start(self, key: str, role: str, argv: list[str], **env: str) -> None:
        log = self.root / f"{key}.log"
        self.procs[key] = subprocess.Popen(
            self.lab.argv(role, argv),
            env=dict(self.env, **env),
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self, key: str) -> str:
        path = self.root / f"{key}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_log(self, key: str, text: str) -> None:
        def seen() -> bool:
            proc = self.procs[key]
            assert proc.poll() is None, f"{key} exited {proc.returncode}:\n{self.log(key)[-3000:]}"
            return text in self.log(key)

        wait_until(seen, what=f"{key!r} to log {text!r}")

    def wait_ready(self, index: int) -> None:
        key = f"api-{index}"

        def ready() -> bool:
            proc = self.procs[key]
            assert proc.poll() is None, f"{key} exited {proc.returncode}:\n{self.log(key)[-3000:]}"
            try:
                return http.get(self.url(index) + "/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, what=f"{key} to answer /readyz")

    def url(self, index: int) -> str:
        return f"http://{self.lab.hosts[API_HOSTS[index]].address}:{API_PORT}"

    def api(self, method: str, path: str, body: Any = None, index: int = 0) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        resp = http.request(method, self.url(index) + path, json=body, headers=headers, timeout=30)
        assert resp.status_code < 400, f"{method} {path}: {resp.status_code} {resp.text}"
        return resp.json() if resp.content else None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3  # then the lab's close kills what is left
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(deadline - time.monotonic(), 0.01))


def start_postgres(lab: netlab.Lab, data: Path) -> str:
    """PostgreSQL on host db, listening on its address only, logins from the lab's subnet by
    password (scram-sha-256); returns the URL the other hosts use (by host name)."""
    settings = load(PostgresSettings)
    user = server_user(settings.user)
    assert user is not None, "the multi-host test runs as root (network namespaces)"
    bin_dir = find_bin_dir(None, settings.bin_dir)
    user.make_reachable(bin_dir.parent)
    run = data / "run"
    run.mkdir(parents=True, mode=0o700)
    password = secrets.token_urlsafe(18)
    (data / "pw").write_text(password)
    user.own(data)
    user.own(run)
    as_user = user.popen_kwargs()
    initdb = [str(bin_dir / "initdb"), "-D", str(data / "pgdata"), "-U", "postgres",
              f"--pwfile={data / 'pw'}", "--auth-host=scram-sha-256", "--auth-local=trust",
              "--no-locale", "-EUTF8", "--no-sync"]  # fmt: skip
    subprocess.run(initdb, check=True, capture_output=True, timeout=120, **as_user)
    with (data / "pgdata" / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {lab.subnet}.0/24 scram-sha-256\n")
    db = lab.hosts["db"]
    setpriv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]
    options = f"-h {db.address} -p {POSTGRES} -k {run} -c fsync=off -c synchronous_commit=off"
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data / "pgdata"), "-l", str(data / "log"),
              "-w", "-t", "60", "-o", options, "start"]  # fmt: skip
    subprocess.run(
        lab.argv("db", [*setpriv, *pg_ctl]), check=True, capture_output=True, timeout=90,
        env=as_user["env"], cwd=data,
    )  # fmt: skip
    psql = [str(bin_dir / "psql"), "-h", str(run), "-U", "postgres", "-d", "postgres"]
    subprocess.run(
        lab.argv("db", [*setpriv, *psql, "-c", "CREATE DATABASE tuneplane"]),
        check=True, capture_output=True, timeout=30, env=as_user["env"],
    )  # fmt: skip
    return f"postgresql+asyncpg://postgres:{password}@{db.name}:{POSTGRES}/tuneplane"


def leader_host(dep: Deployment, db_url: str) -> str | None:
    """The host whose API process holds the leader lease (its lease session's client address,
    from pg_stat_activity, asked from api2), or None while no session holds it."""
    query = (
        "import asyncio, asyncpg, sys\n"
        "async def main():\n"
        "    c = await asyncpg.connect(sys.argv[1])\n"
        '    print(await c.fetchval("SELECT host(a.client_addr) FROM pg_locks l JOIN'
        " pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND l.granted"
        " AND a.application_name = 'tuneplane-leader'\"))\n"
        "asyncio.run(main())\n"
    )
    plain = db_url.replace("postgresql+asyncpg://", "postgresql://")
    argv = dep.lab.argv("api2", [sys.executable, "-c", query, plain])
    address = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
    by_address = {h.address: role for role, h in dep.lab.hosts.items()}
    return by_address.get(address.strip())


def submit(cli: Cli, command: str) -> str:
    out = cli("submit", "hello", "--profile", "nodes/cpu:2", "--set", f"command={command}", "--yes")
    return job_id_in(out.stdout)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[Deployment, str]]:
    if os.geteuid() != 0 or shutil.which("nft") is None:
        pytest.fail("the multi-host test needs root and nftables (deploy/dev/setup.sh)")
    netlab.sweep()
    lab = netlab.Lab(ROLES)
    data = netlab.scratch("pg")  # a short path for its socket
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        DOCKER_HOST=NO_ENGINE,
        PYTHONUNBUFFERED="1",
        TUNEPLANE_HEARTBEAT_SECONDS="1",
        TUNEPLANE_RENDEZVOUS_PORTS=os.environ.get("TUNEPLANE_RENDEZVOUS_PORTS", RENDEZVOUS),
    )
    dep = Deployment(lab, tmp_path, env)
    try:
        lab.up()
        for role, flows in FLOWS.items():
            lab.firewall(role, [(lab.operator if s == "operator" else s, p) for s, p in flows])
        yield dep, start_postgres(lab, data)
    finally:
        try:
            dep.stop()
        finally:
            lab.close()
            shutil.rmtree(data, ignore_errors=True)


def test_a_deployment_across_hosts_runs_a_gang_and_survives_its_leader_host_cut_off(
    deployment: tuple[Deployment, str], tmp_path: Path
) -> None:
    dep, db_url = deployment
    lab, hosts = dep.lab, dep.lab.hosts
    pki = tmp_path / "pki"
    ca = generate_ca(pki).cert
    control = issue_server_cert(pki, pki / "api2", [hosts["api2"].name, hosts["api2"].address])
    telemetry = issue_server_cert(pki, pki / "tel", [hosts["tel"].name, hosts["tel"].address])
    migrate = [sys.executable, "-m", "adapters.postgres.migrate", "upgrade", "--url", db_url]
    subprocess.run(lab.argv("api", migrate), env=dep.env, check=True, timeout=120)
    control_plane = {
        "TUNEPLANE_DATABASE_URL": db_url,
        "TUNEPLANE_STATE_DIR": str(tmp_path / "cp"),
        "TUNEPLANE_NODE_EXECUTOR": "process",  # nodes run host processes: pin no image
        "TUNEPLANE_DB_KEEPALIVE_SECONDS": str(KEEPALIVE),
    }

    def serve(index: int) -> None:
        host = API_HOSTS[index]
        argv = [TP, "serve", "--host", hosts[host].address, "--port", str(API_PORT)]
        dep.start(f"api-{index}", host, argv, **control_plane)

    serve(0)
    dep.wait_ready(0)
    wait_until(lambda: leader_host(dep, db_url) == "api", what="the API on host api to lead")
    serve(1)
    gateway_tls = {"TUNEPLANE_GATEWAY_CERT": str(control.cert),
                   "TUNEPLANE_GATEWAY_KEY": str(control.key)}  # fmt: skip
    gateway = [TP, "gateway", "node", "--host", hosts["api2"].address, "--port", str(NODE_GATEWAY)]
    dep.start("node-gateway", "api2", gateway, **control_plane, **gateway_tls)
    telemetry_tls = {"TUNEPLANE_GATEWAY_CERT": str(telemetry.cert),
                     "TUNEPLANE_GATEWAY_KEY": str(telemetry.key)}  # fmt: skip
    tel = [TP, "gateway", "telemetry", "--host", hosts["tel"].address,
           "--port", str(TELEMETRY_GATEWAY)]  # fmt: skip
    dep.start("telemetry-gateway", "tel", tel, TUNEPLANE_DATABASE_URL=db_url,
              TUNEPLANE_STATE_DIR=str(tmp_path / "tel"), **telemetry_tls)  # fmt: skip
    dep.token = (tmp_path / "cp" / "admin-token").read_text().strip()
    dep.wait_ready(1)
    dep.wait_log("node-gateway", "node gateway on")
    dep.wait_log("telemetry-gateway", "telemetry gateway on")

    pool = {"name": "nodes", "backend": "node", "cpus_per_node": 1, "memory_mb_per_node": 512}
    dep.api("POST", "/v1/pools", pool)
    for node in ("n1", "n2"):
        token = dep.api("POST", "/v1/node-tokens", {"pool": "nodes", "node": node})["token"]
        dep.start(node, node, [
            TP, "node", "run", "--server", f"{hosts['api2'].name}:{NODE_GATEWAY}",
            "--ca", str(ca), "--state-dir", str(tmp_path / node), "--name", node,
            "--advertise-address", hosts[node].address, "--cpus", "1", "--memory-mb", "512",
            "--telemetry-gateway", f"{hosts['tel'].name}:{TELEMETRY_GATEWAY}",
            "--executor", "process", "--join-token", token,
        ])  # fmt: skip

    def connected() -> bool:
        fleet = dep.api("GET", "/v1/fleet")
        states = {n["name"]: n["connectivity"] for p in fleet["pools"] for n in p["nodes"]}
        return states.get("n1") == states.get("n2") == "connected"

    wait_until(connected, what="n1 and n2 to connect through the node gateway", within=90)

    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", dep.url(0), "--token", dep.token)
    cli("init", str(tmp_path / "ws"))
    cli.cwd = tmp_path / "ws"
    cli("new", "hello", "--method", "custom/custom")
    metric = '{\\"step\\": 1, \\"metrics\\": {\\"hosts/rank\\": $RANK}}'
    first = submit(cli, f'echo rank=$RANK master=$MASTER_ADDR; echo "{metric}" > '
                        '"$TUNEPLANE_METRICS_DIR/m.jsonl"')  # fmt: skip
    job = cli.wait_state(first, {"succeeded", "failed", "cancelled"}, timeout=90)
    assert job["state"] == "succeeded", (job, cli("job", "logs", first, ok=False).stdout)
    members = job["attempts"][0]["members"]
    assert sorted(m["node"] for m in members) == ["n1", "n2"], members
    logs = cli("job", "logs", first).stdout
    zero = next(m["node"] for m in members if m["index"] == 0)
    assert f"rank=0 master={hosts[zero].address}" in logs, logs  # its advertised address

    def arrived() -> dict[str, Any] | None:
        summary = dep.api("GET", f"/v1/jobs/{first}/metrics")
        points = sum(s["count"] for s in summary["series"] if s["tag"] == "hosts/rank")
        return summary if points == 2 else None

    found = wait_until(arrived, what="both members' metrics through the telemetry gateway")
    assert found is not None  # wait_until returns a truthy answer
    ranks = {(x["member"], x["last_value"]) for x in found["series"] if x["tag"] == "hosts/rank"}
    assert ranks == {(0, 0.0), (1, 1.0)}  # each member's own point (system series aside)
    assert all(c["corrupt_records"] == 0 for c in found["collectors"]), found

    # the firewall holds: only the flows of the table open
    assert lab.can_connect("api", hosts["db"].address, POSTGRES)
    assert not lab.can_connect("n1", hosts["db"].address, POSTGRES)
    assert not lab.can_connect("n1", hosts["tel"].address, NODE_GATEWAY)

    # host api, whose API leads, is cut off: api2's API takes over once PostgreSQL has ended
    # the cut-off sessions, and runs the next job
    assert leader_host(dep, db_url) == "api"
    lab.cut("api")
    cut_at = time.monotonic()
    wait_until(lambda: leader_host(dep, db_url) == "api2", what="api2's API to take the lease",
               within=KEEPALIVE + 60)  # fmt: skip
    took_over = time.monotonic() - cut_at
    assert dep.procs["api-0"].poll() is None  # the cut-off API runs on, unreachable
    cli("login", "--server", dep.url(1), "--token", dep.token)
    second = submit(cli, "echo second")
    job = cli.wait_state(second, {"succeeded", "failed", "cancelled"}, timeout=90)
    assert job["state"] == "succeeded", (job, dep.log("api-1")[-3000:])

    # plugged back in, api's API follows: it serves, and the lease stays where it went
    lab.heal("api")
    dep.wait_ready(0)
    # it knows it no longer leads: at its next tick if the cut found it between two, else once
    # the query it had in flight fails (the server ended that session)
    dep.wait_log("api-0", "leadership lost")
    assert dep.api("GET", f"/v1/jobs/{second}", index=0)["state"] == "succeeded"
    assert leader_host(dep, db_url) == "api2", f"took over after {took_over:.1f} s"
    assert json.loads(cli("job", "status", second, "--json").stdout)["state"] == "succeeded"
