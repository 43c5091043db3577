"""`tp fleet …`: pools, nodes and their states, and whole-file configuration (docs/fleet.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
from cyclopts import App, Parameter

from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.admin import JsonFlag, send
from entrypoints.cli.client import connect, seg
from entrypoints.cli.lazy import lazy

fleet_app = App(name="fleet", help="Pools, nodes and their states; `tp fleet apply FILE`.")
pool_app = App(name="pool", help="Pools: homogeneous nodes of one backend.")
node_app = App(
    name="node", help="Nodes: add, set (move to another pool), cordon, drain, uncordon, rm."
)

Backend = Annotated[str, Parameter(name="--backend", help="local, node, kubernetes or slurm")]


def _num(x: Any) -> str:
    f = float(x or 0)
    return str(int(f)) if f.is_integer() else f"{f:g}"


def _gib(mb: Any) -> str:
    return f"{float(mb or 0) / 1024:.1f}"


def gpu_inventory_text(inv: dict[str, Any] | None) -> str:
    """What a node's daemon detected, in one cell: "8× NVIDIA H200 140.4 GiB, driver
    580.159.03, CUDA 13.0, NVLink" (a mixed host lists each model; MIG and NVLink where on;
    "(recorded)" for a fake); "" when it reported none."""
    if not inv or not inv.get("devices"):
        return ""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for d in inv["devices"]:
        groups.setdefault((d["name"], d["memory_mb"]), []).append(d)
    parts = []
    for (name, memory_mb), ds in groups.items():
        mig = sum(d["mig"] for d in ds)
        flags = [
            ("MIG" if mig == len(ds) else f"MIG on {mig}") if mig else "",
            "NVLink" if any(d["nvlink"] for d in ds) else "",
        ]
        part = f"{len(ds)}× {name} {_gib(memory_mb)} GiB"
        parts.append(" ".join([part, *(f for f in flags if f)]))
    versions = [f"driver {inv['driver']}" if inv.get("driver") else ""]
    versions.append(f"CUDA {inv['cuda']}" if inv.get("cuda") else "")
    text = ", ".join([*parts, *(v for v in versions if v)])
    return text + (" (recorded)" if inv.get("source") == "recorded" else "")


def _node_row(p: dict[str, Any], n: dict[str, Any]) -> tuple[Any, ...]:
    gpus = f"{n['gpus_used']}/{n['gpus_total']}" if p.get("gpus_per_node") else "-"
    return (
        p.get("fleet"),
        p.get("name"),
        n.get("name"),
        n.get("sched"),
        n.get("connectivity"),
        n.get("validation", "unchecked"),
        gpus + (f" {p['gpu_model']}" if p.get("gpu_model") else ""),
        f"{_num(n.get('cpus_used'))}/{_num(n.get('cpus_total'))}",
        f"{_gib(n.get('memory_mb_used'))}/{_gib(n.get('memory_mb_total'))} GiB",
        gpu_inventory_text(n.get("gpu_inventory")),
    )


@fleet_app.command(name="ls")
def ls(*, json: JsonFlag = False) -> int:
    """List pools and nodes: scheduling state (schedulable, cordoned, draining), control
    connectivity (connected, disconnected, lost) and the last pool check (unchecked, passed,
    failed) apart, GPUs, CPUs and memory reserved out of each node's capacity, and the GPUs its
    daemon detected (model × count, memory each, driver and CUDA versions, MIG, NVLink); then why a
    pool takes no new work (its backend does not report it, e.g. a Slurm partition that does
    not exist) and each node pool's last check (`tp fleet check POOL --last` shows it whole)."""
    with connect() as api:
        data = api.get("/v1/fleet")
    if json:
        output.print_json(data)
        return 0
    rows: list[tuple[Any, ...]] = []
    for p in data.get("pools") or []:
        nodes = p.get("nodes") or []
        if not nodes:
            rows.append((p.get("fleet"), p.get("name"), "(no nodes)", *[""] * 7))
        rows.extend(_node_row(p, n) for n in nodes)
    output.table(
        [
            "FLEET",
            "POOL",
            "NODE",
            "SCHED",
            "CONNECTIVITY",
            "CHECK",
            "GPUS USED",
            "CPUS USED",
            "MEMORY USED",
            "DETECTED GPUS",
        ],
        rows,
    )
    for p in data.get("pools") or []:
        if p.get("unavailable"):
            output.out.print(
                f"pool {p['name']} takes no new work: {p['unavailable']}", markup=False
            )
        if p.get("last_check"):
            output.out.print(f"pool {p['name']}: {check_summary(p['last_check'])}", markup=False)
    return 0


def check_summary(c: dict[str, Any]) -> str:
    """One line about a pool check: running, or its verdict, time and failed nodes."""
    if c.get("finished_at") is None:
        return f"check {c['id']} running since {c['started_at']}"
    if c.get("ok"):
        return f"check {c['id']} passed at {c['finished_at']}"
    failed = [r["node"] for r in c.get("results") or [] if not r["ok"]]
    if not failed:  # stopped, or never ran: it marked nothing
        return f"check {c['id']} ended at {c['finished_at']}: {c.get('note', '')}"
    return f"check {c['id']} FAILED at {c['finished_at']}: {', '.join(failed)}"


@fleet_app.command(name="apply")
def apply(file: Path, /) -> int:
    """Create or update the fleets, pools, nodes, profiles, teams and queues a TOML file
    declares (docs/fleet.md), all or nothing (admins and operators). Nothing the file does not
    name is removed; nodes keep their states.

    Parameters
    ----------
    file
        The fleet file (TOML).
    """
    from entrypoints import fleet_config  # here: it loads the application layer (0.2 s a start)

    doc = fleet_config.load(file)  # errors name the entry (pools[1].gpus_per_node) before sending
    with connect() as api:
        _, result = api.post("/v1/fleet/apply", msgspec.to_builtins(doc))
    for what in result.get("created") or []:
        output.out.print(f"created {what}", markup=False)
    for what in result.get("changed") or []:
        output.out.print(f"changed {what}", markup=False)
    output.info(
        f"{file}: {len(result.get('created') or [])} created, "
        f"{len(result.get('changed') or [])} changed, {result.get('unchanged', 0)} unchanged"
    )
    return 0


def _pool_line(p: dict[str, Any]) -> str:
    shape = (
        f"{p['gpus_per_node']}× {p['gpu_model']}, " if p.get("gpus_per_node") else "CPU pool, "
    ) + f"{_num(p.get('cpus_per_node'))} CPUs, {p.get('memory_mb_per_node')} MiB per node"
    return f"pool {p.get('name')} (fleet {p.get('fleet')}, backend {p.get('backend')}): {shape}"


@pool_app.command(name="add")
def pool_add(
    name: str,
    /,
    *,
    backend: Backend,
    cpus: Annotated[float, Parameter(name="--cpus")],
    memory_mb: Annotated[int, Parameter(name="--memory-mb")],
    gpus: Annotated[int, Parameter(name="--gpus")] = 0,
    gpu_model: Annotated[str | None, Parameter(name="--gpu-model")] = None,
    fleet: Annotated[str, Parameter(name="--fleet")] = "default",
    description: Annotated[str, Parameter(name="--description")] = "",
) -> int:
    """Create a pool (admins and operators): every node of it has the same shape.

    Parameters
    ----------
    name
        The pool's name.
    cpus
        CPUs of one node.
    memory_mb
        Memory of one node, MiB.
    gpus
        GPUs of one node (0: a CPU pool).
    gpu_model
        The GPUs' model, e.g. h200 (what `--profile h200:8` names); required with --gpus.
    fleet
        The fleet the pool belongs to (a name that groups pools).
    description
        A line of text for `tp fleet ls --json`.
    """
    body = {"name": name, "fleet": fleet, "backend": backend, "gpu_model": gpu_model,
            "gpus_per_node": gpus, "cpus_per_node": cpus, "memory_mb_per_node": memory_mb,
            "description": description}  # fmt: skip
    with connect() as api:
        _, pool = api.post("/v1/pools", body)
    output.out.print("created " + _pool_line(pool), markup=False)
    output.info(f"next: tp fleet node add NODE --pool {name}")
    return 0


@pool_app.command(name="set")
def pool_set(
    name: str,
    /,
    *,
    backend: Annotated[str | None, Parameter(name="--backend")] = None,
    cpus: Annotated[float | None, Parameter(name="--cpus")] = None,
    memory_mb: Annotated[int | None, Parameter(name="--memory-mb")] = None,
    gpus: Annotated[int | None, Parameter(name="--gpus")] = None,
    gpu_model: Annotated[str | None, Parameter(name="--gpu-model")] = None,
    cpu_only: Annotated[bool, Parameter(name="--cpu-only")] = False,
    fleet: Annotated[str | None, Parameter(name="--fleet")] = None,
    description: Annotated[str | None, Parameter(name="--description")] = None,
) -> int:
    """Change some fields of a pool (admins and operators). The node shape and backend of a
    pool with live reservations cannot change.

    Parameters
    ----------
    cpu_only
        Make it a CPU pool: no GPUs, no GPU model.
    """
    body: dict[str, Any] = {
        k: v
        for k, v in {
            "backend": backend, "cpus_per_node": cpus, "memory_mb_per_node": memory_mb,
            "gpus_per_node": gpus, "gpu_model": gpu_model, "fleet": fleet,
            "description": description,
        }.items()
        if v is not None
    }  # fmt: skip
    if cpu_only:
        if gpus or gpu_model:
            raise InvalidInput(
                "--cpu-only contradicts --gpus/--gpu-model", fix="give one", field="--cpu-only"
            )
        body.update(gpus_per_node=0, gpu_model=None)
    if not body:
        raise InvalidInput("nothing to change", fix="give at least one option (see --help)")
    with connect() as api:
        pool = send(api, "PATCH", f"/v1/pools/{seg(name)}", body)
    output.out.print(_pool_line(pool), markup=False)
    return 0


@pool_app.command(name="rm")
def pool_rm(name: str, /) -> int:
    """Remove a pool (admins and operators): it must have no nodes, and no named profile may
    depend on it alone. Its checks and join tokens go with it."""
    with connect() as api:
        pool = send(api, "DELETE", f"/v1/pools/{seg(name)}")
    output.out.print("removed " + _pool_line(pool), markup=False)
    return 0


def _node_line(n: dict[str, Any]) -> str:
    return f"node {n.get('name')} in pool {n.get('pool')}: {n.get('sched')}, " + str(
        n.get("connectivity")
    )


@node_app.command(name="add")
def node_add(name: str, /, *, pool: Annotated[str, Parameter(name="--pool")]) -> int:
    """Add a node to a pool (admins and operators); it is schedulable at once.

    Parameters
    ----------
    name
        The node's name (for node backends, the name its daemon enrolls with).
    pool
        The pool; the node has the pool's shape.
    """
    with connect() as api:
        _, node = api.post("/v1/nodes", {"name": name, "pool": pool})
    output.out.print("added " + _node_line(node), markup=False)
    return 0


@node_app.command(name="set")
def node_set(name: str, /, *, pool: Annotated[str, Parameter(name="--pool")]) -> int:
    """Move a node to another pool, or create it there (admins and operators). Its states are
    kept; a node with live reservations cannot move.

    Parameters
    ----------
    pool
        The pool it belongs to from now on.
    """
    with connect() as api:
        node = send(api, "PUT", f"/v1/nodes/{seg(name)}", {"pool": pool})
    output.out.print(_node_line(node), markup=False)
    return 0


@node_app.command(name="rm")
def node_rm(name: str, /) -> int:
    """Remove a node (admins and operators): nothing may run there (drain it and wait) and
    its daemon must be stopped. Its credentials go with it; its jobs' records keep its name."""
    with connect() as api:
        node = send(api, "DELETE", f"/v1/nodes/{seg(name)}")
    output.out.print("removed " + _node_line(node), markup=False)
    return 0


def _set_state(name: str, action: str) -> int:
    with connect() as api:
        _, node = api.post(f"/v1/nodes/{seg(name)}/{action}")
    output.out.print(_node_line(node), markup=False)
    return 0


@node_app.command(name="cordon")
def cordon(name: str, /) -> int:
    """Take no new work on a node; what runs there stays (admins and operators)."""
    return _set_state(name, "cordon")


@node_app.command(name="drain")
def drain(name: str, /) -> int:
    """Take no new work on a node and mark it to be emptied (admins and operators). Running
    jobs are not stopped; `tp fleet ls` shows when it is empty."""
    return _set_state(name, "drain")


@node_app.command(name="uncordon")
def uncordon(name: str, /) -> int:
    """Let a cordoned or draining node take new work again (admins and operators). A node
    declared lost stays lost."""
    return _set_state(name, "uncordon")


fleet_app.command(pool_app)
fleet_app.command(node_app)
lazy(
    fleet_app,
    "check",
    "fleet_check:check",
    "Check a node pool (operators): a small member on each node, reaching every other.",
)
