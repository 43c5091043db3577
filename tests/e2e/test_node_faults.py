"""Faults on the node backend, with real processes: daemons killed with SIGKILL while members
run, a daemon partitioned from its gateway for longer than every timer, replayed and stale
messages from a node's own credential, and what a workload can see of its node's control
credential, and a second daemon started on a running daemon's state directory.

What must hold: a lost connection, a dead daemon or a damaged journal row never kills, restarts
or duplicates a workload; the reservation stays held while a member's fate is unknown; nothing
a node says out of turn changes the control plane's state.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.client import Channel

from adapters.grpc import node_codec as codec
from adapters.grpc.node_client import load_credential
from adapters.node.journal import SqliteJournal
from adapters.tls import client_context
from domain.node_messages import Heartbeat, Hello, Refused, Vote, Welcome
from domain.node_protocol import MemberRef, MemberReport, NodeCapacity, Phase
from proto.node_control_grpc import NodeControlStub
from tests.e2e.test_node_backend import actions, cli_for, events, starts, submit
from tests.fixtures.nodes import NODE_CPUS, NODE_MEMORY_MB, NodeCluster, shared_node_cluster
from tests.fixtures.server import TP, free_port
from tests.support.node_fault_steps import (
    STATE_TABLES,
    connectivity,
    listeners,
    live_reservations,
    phases,
    restart,
    settled,
    size,
    snapshot,
    tail,
    tell,
    wait_members,
)
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAIR = "nodes/cpu:1"  # above one node's 0.5 CPUs: a gang of two whole nodes
# The timers a partition must outlive, shorter than their defaults (the same code fires them):
# the control plane's limit for a silent session and a gang's link to its gateway is
# max(6 heartbeats, FLOOR) = FLOOR with the fixture's 1 s heartbeat; a daemon gives up a new
# stream without a Welcome after CONNECT_TIMEOUT (30 s by default) and stops waiting between
# attempts at RETRY_MAX; a stream silent for three heartbeats (3 s) is cut off on both sides.
FLOOR = 10
CONNECT_TIMEOUT = 4
RETRY_MAX = 1


@pytest.fixture(scope="module")
def pair(
    module_pg_url: str, docker_host: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeCluster]:
    """Nodes n1 and n2 (heartbeat 1 s), shared by the tests below that leave them as they found
    them: both daemons running and connected straight to the gateway, none of their jobs
    unfinished. Each test submits its own job and looks only at its own attempt, containers
    and the log lines written after it began. (A fenced node is lost for good: that test adds
    two nodes of its own. Credential rotation needs its own settings: its own cluster.)"""
    state = tmp_path_factory.mktemp("pair")
    with shared_node_cluster(
        module_pg_url, docker_host, state, 2, TUNEPLANE_NODE_SESSION_FLOOR_SECONDS=str(FLOOR)
    ) as cluster:
        yield cluster


@pytest.fixture
async def cluster(pair: NodeCluster) -> NodeCluster:
    """The shared pair, both daemons up and connected (restarted if a failed test left one
    dead), so that each test passes alone and in any order."""
    for name, daemon in pair.daemons.items():
        if daemon.proc is None or daemon.proc.poll() is not None:
            pair.start_daemon(name)
    await asyncio.to_thread(pair.wait_connected, list(pair.daemons))
    return pair


async def test_killing_a_daemon_repeatedly_never_kills_or_restarts_its_workload(
    cluster: NodeCluster, docker_host: str, tmp_path: Path
) -> None:
    cli = await cli_for(cluster, tmp_path)
    since = time.time() - 1
    ports = (free_port(), free_port())
    job_id = submit(cli, listeners(ports), PAIR)
    job = await wait_members(cluster, job_id, "running")
    daemon_log, gateway_log = cluster.daemons["n1"].log, cluster.servers.state_dir / "gateway.log"
    begun = size(daemon_log)
    for _ in range(5):  # SIGKILL n1's daemon, restart it a moment later, again and again
        hellos = gateway_log.read_text().count("node n1 connected (session ")
        cluster.kill_daemon("n1", signal.SIGKILL)
        await connectivity(cluster, "n1", "disconnected")  # its gateway saw it gone
        cluster.start_daemon("n1")
        await asyncio.to_thread(cluster.wait_connected, ["n1"])
        deadline = time.monotonic() + 30  # and recorded what its Hello said (the log's line)
        while gateway_log.read_text().count("node n1 connected (session ") == hellos:
            assert time.monotonic() < deadline, tail(gateway_log, 0)[-3000:]
            await asyncio.sleep(0.2)
    job = await asyncio.to_thread(cluster.api, "GET", f"/v1/jobs/{job_id}")
    assert job["state"] == "running", job  # it ran through
    for port in ports:  # then the members end by themselves
        await tell(port, b"go\n")
    job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 120)
    assert job["state"] == "succeeded", job
    [attempt] = job["attempts"]
    ids = {m["id"]: 1 for m in attempt["members"]}
    assert starts(docker_host, attempt["id"], since) == ids  # never started twice
    assert events(docker_host, attempt["id"], since, "kill") == {}  # never killed
    assert events(docker_host, attempt["id"], since, "die") == ids  # each ended once, by itself
    assert "rank 0 done" in cli("job", "logs", job_id).stdout
    recovered = tail(daemon_log, begun)
    assert recovered.count("connecting to") == 5  # five restarts, nothing more


# The longest timer (``FLOOR``, the node gateway's and the control plane's): a partition five
# seconds past it has outlived every timer that could take it for an end, the daemon's connect
# timeout more than twice over.
LONGEST_TIMER = max(FLOOR, CONNECT_TIMEOUT, 3)
PARTITION = LONGEST_TIMER + 5
# n2's daemon behind the proxy: its own timers, the others' stay the defaults
N2_TIMERS = {
    "TUNEPLANE_NODE_CONNECT_TIMEOUT_SECONDS": str(CONNECT_TIMEOUT),
    "TUNEPLANE_NODE_RETRY_MAX_SECONDS": str(RETRY_MAX),
}


async def test_a_partition_past_every_timer_keeps_the_workload_and_its_reservation(
    cluster: NodeCluster, docker_host: str, tmp_path: Path
) -> None:
    proxy = TcpProxy("127.0.0.1", cluster.gateway_port)
    await proxy.start()
    try:
        # n2 reaches its gateway through the proxy
        await restart(cluster, "n2", port=proxy.port, env=N2_TIMERS)
        begun = size(cluster.daemons["n2"].log)
        cli = await cli_for(cluster, tmp_path)
        since = time.time() - 1
        ports = (free_port(), free_port())  # the work outlives the partition and the reconnection
        job_id = await asyncio.to_thread(submit, cli, listeners(ports), PAIR)
        job = await wait_members(cluster, job_id, "running")
        attempt_id = job["attempts"][0]["id"]
        proxy.partition()
        job = await wait_members(cluster, job_id, {"n1": "running", "n2": "unknown"}, 30)
        assert job["state"] == "running"
        nodes = await asyncio.to_thread(cluster.nodes)
        assert nodes["n2"]["connectivity"] == "disconnected"
        await asyncio.sleep(PARTITION)
        # the daemon's timers fired in it: it gave up streams that never got a Welcome
        assert "silent for" in tail(cluster.daemons["n2"].log, begun), tail(
            cluster.daemons["n2"].log, begun
        )[-3000:]
        job = await asyncio.to_thread(cluster.api, "GET", f"/v1/jobs/{job_id}")
        assert job["state"] == "running" and len(job["attempts"]) == 1, job
        assert await live_reservations(cluster, attempt_id) == 1  # unknown is not stopped
        proxy.heal()
        await wait_members(cluster, job_id, {"n1": "running", "n2": "running"}, 60)
        for port in ports:
            await tell(port, b"go\n")
        job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 120)
    finally:
        await proxy.close()
        await restart(cluster, "n2")  # straight to the gateway again, as the other tests expect
    assert job["state"] == "succeeded", job
    [attempt] = job["attempts"]
    ids = {m["id"]: 1 for m in attempt["members"]}
    assert starts(docker_host, attempt["id"], since) == ids
    assert events(docker_host, attempt["id"], since, "kill") == {}
    assert await live_reservations(cluster, attempt["id"]) == 0


async def test_replayed_stale_and_misrouted_messages_are_refused_without_effect(
    cluster: NodeCluster, tmp_path: Path
) -> None:
    """A stream opened with n1's own credential (as a replaying or confused peer would) sends
    10,000 messages that must all be refused: replayed sequence numbers, stale epochs, members of
    another node or attempt. The database is the same before and after, row for row."""
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, "sleep 600", PAIR)
    job = await wait_members(cluster, job_id, "running")
    attempt_id = job["attempts"][-1]["id"]
    cluster.kill_daemon("n1", signal.SIGTERM)  # its member keeps running; the test speaks for it
    await connectivity(cluster, "n1", "disconnected", 30)  # one session per node: until closed
    state_dir = cluster.daemons["n1"].state_dir
    stored = load_credential(state_dir)
    assert stored is not None
    journal = SqliteJournal(state_dir / "journal.sqlite")
    try:
        entries = journal.entries()  # (the shared n1's journal may hold earlier tests' rows)
        [mine] = [e for e in entries if e.order.ref.attempt_id == attempt_id]
        hello = Hello(
            "n1",
            NodeCapacity(0, None, NODE_CPUS, NODE_MEMORY_MB),
            "127.0.0.1",
            "test",
            journal.epoch(),
            tuple(e.report() for e in entries),  # what n1 itself would say
        )
    finally:
        journal.close()
    [theirs] = [m for m in job["attempts"][-1]["members"] if m["node"] == "n2"]
    ref = mine.order.ref
    other = MemberRef(ref.attempt_id, theirs["id"], 1 - ref.index, ref.epoch)
    bad: list[MemberReport | Vote] = [
        MemberReport(ref, Phase.EXITED, 1, "replayed"),  # sent with an old sequence number
        MemberReport(
            MemberRef(ref.attempt_id, ref.member_id, ref.index, ref.epoch - 1),
            Phase.EXITED,
            1,
            "stale epoch",
        ),
        MemberReport(other, Phase.EXITED, 1, "another node's member"),
        Vote(MemberRef("att-nope", ref.member_id, ref.index, ref.epoch), False, "other attempt"),
    ]
    channel = Channel("127.0.0.1", cluster.gateway_port, ssl=client_context(cluster.ca))
    refused = 0
    try:
        stub = NodeControlStub(channel)
        async with stub.Connect.open(
            metadata={"authorization": f"Bearer {stored.credential}"}
        ) as stream:
            await stream.send_message(codec.node_message_to(1, hello))
            first = await stream.recv_message()
            assert first is not None
            _, welcome, _ = codec.gateway_message_from(first)
            assert isinstance(welcome, Welcome)
            await stream.send_message(codec.node_message_to(2, Heartbeat(0)))
            before = await settled(cluster)  # the Hello's reconciliation is done
            seq = 2
            for i in range(10_000):
                body = bad[i % len(bad)]
                if i % len(bad) == 0:
                    await stream.send_message(codec.node_message_to(seq - i % 3, body))
                else:
                    seq += 1
                    await stream.send_message(codec.node_message_to(seq, body))
                if i % 500 == 0:  # stay alive: the gateway drops silent streams
                    seq += 1
                    await stream.send_message(codec.node_message_to(seq, Heartbeat(0)))
            while refused < 10_000:
                message = await asyncio.wait_for(stream.recv_message(), 30)
                assert message is not None
                _, answer, _ = codec.gateway_message_from(message)
                refused += isinstance(answer, Refused)
            after = await snapshot(cluster)
            await stream.cancel()
    finally:
        channel.close()
    assert refused == 10_000
    changed = {
        t: [
            {k: (v, a.get(k)) for k, v in b.items() if a.get(k) != v}
            for b, a in zip(before[t], after[t], strict=False)
            if b != a
        ]
        for t in STATE_TABLES
        if before[t] != after[t]
    }
    assert changed == {}
    cluster.start_daemon("n1")
    await asyncio.to_thread(cluster.wait_connected, ["n1"])
    cli("job", "stop", job_id)
    job = await asyncio.to_thread(cli.wait_state, job_id, {"cancelled", "failed"}, 60)
    assert job["state"] == "cancelled", job


async def test_a_workload_cannot_read_its_nodes_credential(
    cluster: NodeCluster, tmp_path: Path
) -> None:
    cli = await cli_for(cluster, tmp_path)
    jwt = "eyJhbGciOiJFZERTQSIsImtpZCI6"  # how every collector token begins
    # the patterns are put together in the shell: the command itself travels in the Job
    # Capsule (entry.sh, spec.json), which the scan must not take for a secret
    scan = (
        f"a=tpn; a=${{a}}_; b={jwt[:14]}; b=${{b}}{jwt[14:]}; "
        "env; cat /proc/self/mountinfo; "
        'for d in /*; do case $d in /proc|/sys|/dev) ;; *) grep -rlsF -e "$a" -e '
        "\"$b\" $d | sed 's/^/holds a secret: /' ;; esac; done; "
        'grep -lsF -e "$a" -e "$b" /proc/1/environ /proc/self/environ'
        " | sed 's/^/holds a secret: /'; echo scan-done"
    )
    job_id = submit(cli, scan, "nodes/cpu:0.5")
    job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 60)
    out = cli("job", "logs", job_id).stdout
    assert "scan-done" in out, (job, out)
    [member] = job["attempts"][-1]["members"]
    node = member["node"]  # n1 or n2
    stored = load_credential(cluster.daemons[node].state_dir)
    assert stored is not None and stored.credential.startswith("tpn_")
    assert stored.credential not in out
    assert "tpn_" not in out  # no file, variable or mount holds any node credential
    assert jwt not in out  # nor the member's collector token
    assert "holds a secret: " not in out  # no file the workload can read holds either
    # of the node's state directory only the member's own metrics, outputs and its attempt's
    # checkpoint directories are mounted
    state = str(cluster.daemons[node].state_dir)
    mounts = {line.split()[4]: line.split()[3] for line in out.splitlines() if state in line}
    assert sorted(mounts) == [
        "/tuneplane/checkpoints", "/tuneplane/metrics", "/tuneplane/outputs", "/tuneplane/resume"
    ], mounts  # fmt: skip
    assert mounts["/tuneplane/metrics"].startswith(f"{state}/collector/metrics/mem")
    assert mounts["/tuneplane/outputs"].startswith(f"{state}/outputs/{job_id}/")
    assert mounts["/tuneplane/checkpoints"] == f"{state}/checkpoints/{job_id}/1/work"
    assert mounts["/tuneplane/resume"] == f"{state}/checkpoints/{job_id}/1/resume"
    assert "TUNEPLANE_JOIN_TOKEN" not in out


async def test_a_fenced_node_is_lost_for_good_and_forgets_its_members(
    cluster: NodeCluster, docker_host: str, tmp_path: Path
) -> None:
    """The machine of n4 hangs (SIGSTOP); the operator fences it: its member fails, the gang
    ends, the envelope is released. When n4 wakes up and reconnects (welcomed with the raised
    epoch), what it says about the old member changes nothing, it is told to remove the
    member's container, and it stays cordoned.

    A fenced node is lost for good: this test's gang runs on two nodes of their own (n3, n4 in
    the pool ``fence``) beside the shared pair, which it leaves as it found it."""
    cluster.api(
        "POST",
        "/v1/pools",
        {"name": "fence", "backend": "node", "cpus_per_node": NODE_CPUS,
         "memory_mb_per_node": NODE_MEMORY_MB},
    )  # fmt: skip
    for name in ("n3", "n4"):
        cluster.start_daemon(name, pool="fence")
    await asyncio.to_thread(cluster.wait_connected, ["n3", "n4"])
    cli = await cli_for(cluster, tmp_path)
    since = time.time() - 1
    job_id = submit(cli, "sleep 600", "fence/cpu:1")  # a gang of n3 and n4, whole
    job = await wait_members(cluster, job_id, "running")
    [attempt] = job["attempts"]
    [lost] = [m for m in attempt["members"] if m["node"] == "n4"]
    daemon = cluster.daemons["n4"].proc
    assert daemon is not None
    gateway_log = cluster.servers.state_dir / "gateway.log"
    begun = size(gateway_log)
    daemon.send_signal(signal.SIGSTOP)
    try:
        out = cli("node", "fence", "n4", "--reason", "machine hung").stdout
        assert "node n4 fenced; 1 member(s) recorded failed" in out
        job = await asyncio.to_thread(cli.wait_state, job_id, {"failed"}, 60)
        assert await live_reservations(cluster, attempt["id"]) == 0
        deadline = time.monotonic() + 30  # silent for 3 heartbeats: the gateway drops its stream
        while "node n4 disconnected" not in tail(gateway_log, begun):
            assert time.monotonic() < deadline, tail(gateway_log, begun)
            await asyncio.sleep(0.2)
    finally:
        daemon.send_signal(signal.SIGCONT)
    await asyncio.to_thread(cluster.wait_connected, ["n4"])  # it comes back: a new stream

    def removed() -> bool:
        return "destroy" in actions(docker_host, attempt["id"], since).get(lost["id"], [])

    deadline = time.monotonic() + 60
    while not removed():
        assert time.monotonic() < deadline, "the fenced member's container was never removed"
        await asyncio.sleep(0.5)
    job = await asyncio.to_thread(cluster.api, "GET", f"/v1/jobs/{job_id}")
    assert job["state"] == "failed"
    [member] = [m for m in job["attempts"][0]["members"] if m["id"] == lost["id"]]
    assert member["state"] == "failed" and "machine hung" in member["reason"]
    nodes = await asyncio.to_thread(cluster.nodes)
    assert nodes["n4"]["sched"] == "cordoned"  # back in contact, but no new work until uncordoned
    assert not nodes["n4"]["eligible"]
    assert starts(docker_host, attempt["id"], since) == {m["id"]: 1 for m in attempt["members"]}


async def test_a_corrupted_journal_row_of_a_running_member_is_readopted(
    cluster: NodeCluster, docker_host: str, tmp_path: Path
) -> None:
    """Issue 18, defect 1 (a): the journal row of a running gang member is damaged on disk and
    its daemon is killed (-9) and restarted. The daemon quarantines the row and re-adopts the
    member from its container's labels: nothing is stopped, the job runs on with its
    reservation held, and when the member ends its real exit code and final log are kept."""
    cli = await cli_for(cluster, tmp_path)
    since = time.time() - 1
    port = free_port()
    command = (
        f'if [ "$RANK" = 0 ]; then nc -l -p {port}; echo rank 0 last words; exit 3; '
        "else sleep 600; fi"
    )
    job_id = submit(cli, command, PAIR)
    job = await wait_members(cluster, job_id, "running")
    [attempt] = job["attempts"]
    [first] = [m for m in attempt["members"] if m["index"] == 0]
    node = first["node"]
    cluster.kill_daemon(node, signal.SIGKILL)
    journal = sqlite3.connect(cluster.daemons[node].state_dir / "journal.sqlite")
    journal.execute("UPDATE members SET reason = 'a bit flip' WHERE member_id = ?", (first["id"],))
    journal.commit()
    journal.close()
    gateway_log, daemon_log = cluster.servers.state_dir / "gateway.log", cluster.daemons[node].log
    begun, daemon_begun = size(gateway_log), size(daemon_log)
    cluster.start_daemon(node)

    readopted = f"member {first['id']} re-adopted from its container"

    def reconciled() -> bool:  # the gateway recorded what the Hello said, and the daemon,
        # welcomed (recovery waits for the Welcome), re-adopted its member
        connected = f"node {node} connected (session " in tail(gateway_log, begun)
        return connected and readopted in tail(daemon_log, daemon_begun)

    deadline = time.monotonic() + 60
    while not reconciled():
        assert time.monotonic() < deadline, gateway_log.read_text()[-3000:]
        await asyncio.sleep(0.2)
    log = tail(daemon_log, daemon_begun)
    assert "its checksum does not match its contents" in log
    assert await phases(cluster, attempt["id"]) == {0: ("running", False), 1: ("running", False)}
    job = await wait_members(cluster, job_id, "running")
    assert job["state"] == "running" and await live_reservations(cluster, attempt["id"]) == 1
    assert events(docker_host, attempt["id"], since, "kill") == {}
    assert events(docker_host, attempt["id"], since, "die") == {}  # nothing ended, or stopped

    await tell(port, b"go\n")  # member 0 ends by itself, with code 3
    job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 120)
    [ended] = [m for m in job["attempts"][0]["members"] if m["index"] == 0]
    assert (ended["state"], ended["exit_code"]) == ("failed", 3), job
    assert ended["reason"] == "exited with code 3"
    assert "go\nrank 0 last words" in cli("job", "logs", job_id).stdout
    assert starts(docker_host, attempt["id"], since) == {m["id"]: 1 for m in attempt["members"]}
    assert await live_reservations(cluster, attempt["id"]) == 0


def connected_at(cluster: NodeCluster, node: str) -> str:
    [found] = [a for a in cluster.api("GET", "/v1/node-links") if a["node"] == node]
    return str(found["connected_at"])


def start_second(cluster: NodeCluster, state_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """``tp node run`` on ``state_dir``, as an operator would start it by hand."""
    args = [
        TP, "node", "run",
        "--server", f"127.0.0.1:{cluster.gateway_port}",
        "--ca", str(cluster.ca),
        "--state-dir", str(state_dir),
        "--cpus", str(NODE_CPUS),
        "--memory-mb", str(NODE_MEMORY_MB),
        "--telemetry-gateway", "off",
    ]  # fmt: skip
    return subprocess.Popen(args, env=cluster.env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def journal_dump(state_dir: Path) -> str:
    db = sqlite3.connect(f"file:{state_dir / 'journal.sqlite'}?mode=ro", uri=True)
    try:
        return "\n".join(db.iterdump())
    finally:
        db.close()


async def test_a_second_daemon_on_a_state_directory_is_refused_before_it_touches_it(
    cluster: NodeCluster, tmp_path: Path
) -> None:
    """`tp node run` started by hand on the state directory the node's service uses: refused at
    once, naming the running daemon's pid, before it reads the journal, lists the engine or
    opens a stream (before, it was refused a session only, and its recovery at start-up had
    rolled back the running daemon's member being prepared, in their shared journal)."""
    n1 = cluster.daemons["n1"]
    assert n1.proc is not None
    before = await asyncio.to_thread(connected_at, cluster, "n1")
    journal = journal_dump(n1.state_dir)
    credential = (n1.state_dir / "credential").read_bytes()
    log = tmp_path / "second.log"
    second = start_second(cluster, n1.state_dir, log)
    try:
        code = await asyncio.to_thread(second.wait, 60)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(15)
    text = log.read_text()
    assert code == 1, text
    assert f"another node daemon (pid {n1.proc.pid}) is running on the state directory" in text
    assert "fix: " in text and "Traceback" not in text
    assert "connecting to" not in text  # no stream, no scan, no recovery
    assert journal_dump(n1.state_dir) == journal
    assert (n1.state_dir / "credential").read_bytes() == credential
    assert n1.proc.poll() is None  # the running daemon and its session are untouched
    assert await asyncio.to_thread(connected_at, cluster, "n1") == before
