"""`tp node …` and `tp gateway node`: enrolling and running node daemons, fencing nodes, and
the node control gateway process."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.client import connect, seg
from entrypoints.cli.lazy import lazy

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")]
node_app = App(name="node", help="Node daemons: join tokens, running a daemon, fencing.")
token_app = App(name="token", help="One-time join tokens for new node daemons.")
gateway_app = App(name="gateway", help="The gateway processes (node control, telemetry).")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, flag: str) -> int:
    """ "15m" → 900 (seconds); units s, m, h, d."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd]?)\s*", text)
    if not m:
        raise InvalidInput(
            f"{text!r} is not a duration", fix="write e.g. 90s, 15m, 2h or 1d", field=flag
        )
    return int(m.group(1)) * _UNITS[m.group(2) or "s"]


@token_app.command(name="create")
def token_create(
    *,
    pool: Annotated[str, Parameter(help="the node pool the node joins (backend node)")],
    name: Annotated[
        str | None, Parameter(help="the node's name (default: it names itself)")
    ] = None,
    ttl: Annotated[str, Parameter(help="how long the token may be used (1m to 7d)")] = "15m",
    json: JsonFlag = False,
) -> int:
    """Create a one-time join token (operators). It is shown once; give it to the machine's
    daemon: `tp node run --server HOST:PORT --ca ca.pem --join-token TOKEN`."""
    body: dict[str, Any] = {"pool": pool, "ttl_seconds": parse_duration(ttl, "--ttl")}
    if name:
        body["node"] = name
    with connect() as api:
        _, answer = api.post("/v1/node-tokens", body)
    if json:
        output.print_json(answer)
        return 0
    who = f"node {answer['node']}" if answer.get("node") else "one node"
    output.out.print(
        f"join token for {who} of pool {answer['pool']} (one use, until {answer['expires_at']}):\n"
        f"  {answer['token']}\n"
        "on the machine, run:\n"
        f"  tp node run --server GATEWAY:8471 --ca ca.pem --join-token {answer['token']}"
        + (f" --name {answer['node']}" if answer.get("node") else " --name NAME"),
        markup=False,
    )
    return 0


@node_app.command(name="fence")
def fence(
    name: str, /, *, reason: Annotated[str, Parameter(help="why (kept with the members' end)")]
) -> int:
    """Declare a node lost (operators): raise its fencing epoch, so its daemon's late messages
    are refused and it forgets its members when it reconnects, and record its unfinished members
    failed. Reservations are released once every member is known stopped.

    Parameters
    ----------
    name
        The node (see `tp fleet ls`).
    """
    with connect() as api:
        _, answer = api.post(f"/v1/nodes/{seg(name)}/lost", {"reason": reason})
    output.out.print(
        f"node {name} fenced; {answer.get('members_failed', 0)} member(s) recorded failed",
        markup=False,
    )
    return 0


@node_app.command(name="ls")
def links(*, json: JsonFlag = False) -> int:
    """Node daemons' control links: gateway, address, last heartbeat, reported capacity, epoch,
    daemon version, and the GPUs the daemon detected (docs/fleet.md#gpu-inventory)."""
    from entrypoints.cli.fleet import gpu_inventory_text  # not for every `tp node`/`tp gateway`

    with connect() as api:
        answer = api.get("/v1/node-links")
    if json:
        output.print_json(answer)
        return 0
    rows = [
        [
            a["node"],
            a["gateway"],
            a["address"],
            output.short_time(a["heartbeat_at"]),
            f"{a['gpus']}× {a['gpu_model']}" if a["gpus"] else "-",
            f"{a['cpus']:g}",
            str(a["memory_mb"]),
            str(a["epoch"]),
            a["daemon_version"],
            gpu_inventory_text(a.get("gpu_inventory")),
        ]
        for a in answer
    ]
    columns = ["NODE", "GATEWAY", "ADDRESS", "HEARTBEAT", "GPUS", "CPUS", "MEMORY MB", "EPOCH"]
    output.table([*columns, "VERSION", "DETECTED GPUS"], rows)
    if not rows:
        output.info("no node daemon has connected yet (`tp node token create --pool POOL`)")
    return 0


@node_app.command(name="events")
def node_events(
    name: str,
    /,
    *,
    limit: Annotated[int, Parameter(help="at most this many, most recent first")] = 100,
    json: JsonFlag = False,
) -> int:
    """A node's security events (operators): a second control session refused while the node's
    session was alive (a copied credential, or a second daemon), coalesced per source.

    Parameters
    ----------
    name
        The node (see `tp fleet ls`).
    """
    with connect() as api:
        answer = api.get(f"/v1/nodes/{seg(name)}/events", params={"limit": limit})
    if json:
        output.print_json(answer)
        return 0
    rows = [
        [e["last_at"], e["first_at"], str(e["count"]), e["kind"], e["source"] or "-", e["message"]]
        for e in answer
    ]
    output.table(["LAST SEEN", "FIRST SEEN", "COUNT", "KIND", "FROM", "WHAT"], rows)
    if not answer:
        output.out.print(f"no security events for node {name}", markup=False)
    return 0


@node_app.command(name="run")
def run(
    *,
    server: Annotated[str, Parameter(help="the node gateway, HOST:PORT")],
    ca: Annotated[Path, Parameter(help="CA certificate that signed the gateway's certificate")],
    state_dir: Annotated[
        Path | None, Parameter(help="daemon state: journal, credential (default per user)")
    ] = None,
    name: Annotated[str | None, Parameter(help="node name (default: the host name)")] = None,
    join_token: Annotated[str | None, Parameter(help="enroll with this one-time token")] = None,
    advertise_address: Annotated[
        str | None, Parameter(help="address peers use to reach this node")
    ] = None,
    gpus: Annotated[int | None, Parameter(help="GPUs (default: nvidia-smi)")] = None,
    gpu_model: Annotated[str | None, Parameter(help="GPU model, e.g. h200")] = None,
    cpus: Annotated[float | None, Parameter(help="CPUs offered (default: all)")] = None,
    memory_mb: Annotated[int | None, Parameter(help="memory offered in MiB")] = None,
    docker_host: Annotated[str | None, Parameter(help="container engine (DOCKER_HOST)")] = None,
    shared_dir: Annotated[
        Path | None, Parameter(help="shared storage on this host, mounted at /shared in members")
    ] = None,
    outputs_dir: Annotated[
        Path | None,
        Parameter(
            help="where members' outputs are kept on this host, one directory each mounted at "
            "/tuneplane/outputs (default: outputs/ in the state directory)"
        ),
    ] = None,
    telemetry_gateway: Annotated[
        str | None,
        Parameter(
            help="telemetry gateway HOST:PORT for this node's collector (default: the --server "
            "host, port 8472; off: collect no metrics)"
        ),
    ] = None,
    executor: Annotated[
        str | None,
        Parameter(
            help="how members run: container (the engine; the default) or process (host "
            "processes, no engine; TUNEPLANE_NODE_EXECUTOR)"
        ),
    ] = None,
    runtime_dir: Annotated[
        tuple[str, ...],
        Parameter(
            help="with --executor process: RUNTIME=DIR puts DIR first on the PATH of members of "
            "jobs on that runtime (repeatable; TUNEPLANE_NODE_RUNTIMES)"
        ),
    ] = (),
    member_user: Annotated[
        str | None,
        Parameter(
            help="with --executor process as root: the account members run as "
            "(default tuneplane-member, made if missing)"
        ),
    ] = None,
    separate_collector: Annotated[
        bool,
        Parameter(
            negative="",
            help="the collector runs as a service of its own (`tp node install --systemd`): "
            "write members' metrics files for it, start no collector child",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        Parameter(
            help="serve /metrics on this port (TUNEPLANE_NODE_METRICS_PORT; address "
            "TUNEPLANE_METRICS_HOST, default 127.0.0.1; default: no metrics listener)"
        ),
    ] = None,
) -> int:
    """Run a node daemon: connects outbound to the gateway over TLS, runs members as
    containers (or host processes), keeps a journal. The first start needs --join-token
    (`tp node token create`)."""
    from entrypoints.node_daemon import DaemonOptions, run_daemon

    options = DaemonOptions(
        server=server,
        ca=ca,
        state_dir=state_dir,
        name=name,
        join_token=join_token,
        advertise_address=advertise_address,
        gpus=gpus,
        gpu_model=gpu_model,
        cpus=cpus,
        memory_mb=memory_mb,
        docker_host=docker_host,
        shared_dir=shared_dir,
        outputs_dir=outputs_dir,
        telemetry_gateway=telemetry_gateway,
        executor=executor,
        runtime_dirs=runtime_dir,
        member_user=member_user,
        separate_collector=separate_collector,
        metrics_port=metrics_port,
    )
    return run_daemon(options)


@gateway_app.command(name="node")
def gateway_node(
    *,
    host: Annotated[str | None, Parameter(help="listen address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, Parameter(help="listen port (default 8471)")] = None,
    metrics_port: Annotated[
        int | None,
        Parameter(
            help="serve /metrics on this port (TUNEPLANE_NODE_GATEWAY_METRICS_PORT; address "
            "TUNEPLANE_METRICS_HOST, default 127.0.0.1; default: no metrics listener)"
        ),
    ] = None,
) -> int:
    """Run the node control gateway (gRPC over TLS only) against TUNEPLANE_DATABASE_URL.
    Certificates: TUNEPLANE_GATEWAY_CERT and TUNEPLANE_GATEWAY_KEY, else a dev CA in the state
    directory (docs/tls.md)."""
    from entrypoints.gateway_run import run_gateway

    return run_gateway("node", host, port, metrics_port)


@gateway_app.command(name="telemetry")
def gateway_telemetry(
    *,
    host: Annotated[str | None, Parameter(help="listen address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, Parameter(help="listen port (default 8472)")] = None,
    metrics_port: Annotated[
        int | None,
        Parameter(
            help="serve /metrics on this port (TUNEPLANE_TELEMETRY_GATEWAY_METRICS_PORT; address "
            "TUNEPLANE_METRICS_HOST, default 127.0.0.1; default: no metrics listener)"
        ),
    ] = None,
) -> int:
    """Run the telemetry gateway (gRPC over TLS only) against TUNEPLANE_DATABASE_URL: collectors
    ship members' metrics to it with collector tokens. Its own process, independent of node
    control; certificates as for `tp gateway node` (docs/telemetry.md)."""
    from entrypoints.gateway_run import run_gateway

    return run_gateway("telemetry", host, port, metrics_port)


node_app.command(token_app)
lazy(
    node_app,
    "install",
    "node_install:install",
    "Install this machine's node daemon and its metrics collector as systemd services.",
)
