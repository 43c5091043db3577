"""`tp node install --systemd`: the node daemon and its collector as systemd services
(docs/operations.md#systemd-units)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.errors import UNAVAILABLE


def _absolute(path: Path, flag: str, *, exists: str | None = None) -> Path:
    from entrypoints.systemd_units import check_value

    check_value(str(path), flag)
    full = path.expanduser().absolute()
    if exists == "file" and not full.is_file():
        raise InvalidInput(
            f"{flag} {path} is not a file", fix=f"give the path of the {flag} file on this host",
            field=flag.removeprefix("--").replace("-", "_"),
        )  # fmt: skip
    if exists == "dir" and not full.is_dir():
        raise InvalidInput(
            f"{flag} {path} is not a directory", fix=f"give an existing directory for {flag}",
            field=flag.removeprefix("--").replace("-", "_"),
        )  # fmt: skip
    return full


def install(
    *,
    systemd: Annotated[
        bool, Parameter(negative="", help="install as systemd services (the one kind for now)")
    ] = False,
    server: Annotated[str, Parameter(help="the node gateway, HOST:PORT")],
    ca: Annotated[Path, Parameter(help="CA certificate that signed the gateways' certificates")],
    state_dir: Annotated[
        Path | None, Parameter(help="the daemon's state directory, absolute (required)")
    ] = None,
    unit_dir: Annotated[Path, Parameter(help="where the unit files go")] = Path(
        "/etc/systemd/system"
    ),
    no_enable: Annotated[
        bool, Parameter(negative="", help="write the units only; enable nothing")
    ] = False,
    name: Annotated[str | None, Parameter(help="node name (default: the host name)")] = None,
    join_token: Annotated[
        str | None,
        Parameter(help="the one-time join token: kept in STATE/join-token.env (0600)"),
    ] = None,
    advertise_address: Annotated[
        str | None, Parameter(help="address peers use to reach this node")
    ] = None,
    gpus: Annotated[int | None, Parameter(help="GPUs (default: detected)")] = None,
    gpu_model: Annotated[str | None, Parameter(help="GPU model, e.g. h200")] = None,
    cpus: Annotated[float | None, Parameter(help="CPUs offered (default: all)")] = None,
    memory_mb: Annotated[int | None, Parameter(help="memory offered in MiB")] = None,
    docker_host: Annotated[str | None, Parameter(help="container engine (DOCKER_HOST)")] = None,
    shared_dir: Annotated[Path | None, Parameter(help="shared storage, /shared in members")] = None,
    outputs_dir: Annotated[Path | None, Parameter(help="where members' outputs are kept")] = None,
    telemetry_gateway: Annotated[
        str | None,
        Parameter(help="telemetry gateway HOST:PORT (default: the --server host, port 8472; off)"),
    ] = None,
    executor: Annotated[str | None, Parameter(help="container or process")] = None,
    runtime_dir: Annotated[
        tuple[str, ...], Parameter(help="with --executor process: RUNTIME=DIR (repeatable)")
    ] = (),
    member_user: Annotated[
        str | None, Parameter(help="with --executor process: the members' account")
    ] = None,
) -> int:
    """Install this machine's node daemon and its metrics collector as systemd services
    (tuneplane-node.service, tuneplane-collector.service) running `tp node run` with these
    options, restarted when they exit, then enable and start them. Where systemd does not run
    (a container), the units are written and the command exits 6, saying so; --no-enable
    writes them only and exits 0."""
    from entrypoints import systemd_units as su
    from entrypoints.process import TELEMETRY_PORT, split_server

    if not systemd:
        raise InvalidInput(
            "say how to install: --systemd", fix="add --systemd (the only kind for now)",
            field="systemd",
        )  # fmt: skip
    state = su.check_state_dir(state_dir)
    units_at = su.check_unit_dir(unit_dir)
    host, _ = split_server(su.check_value(server, "--server"))
    args: list[str] = ["--server", server, "--ca", str(_absolute(ca, "--ca", exists="file"))]
    for flag, value in (
        ("--name", name), ("--advertise-address", advertise_address), ("--gpus", gpus),
        ("--gpu-model", gpu_model), ("--cpus", cpus), ("--memory-mb", memory_mb),
        ("--docker-host", docker_host), ("--executor", executor), ("--member-user", member_user),
    ):  # fmt: skip
        if value is not None:
            args += [flag, su.check_value(str(value), flag)]
    for flag, path in (("--shared-dir", shared_dir), ("--outputs-dir", outputs_dir)):
        if path is not None:
            kind = "dir" if flag == "--shared-dir" else None
            args += [flag, str(_absolute(path, flag, exists=kind))]
    for given in runtime_dir:
        args += ["--runtime-dir", su.check_value(given, "--runtime-dir")]
    telemetry = telemetry_gateway or f"{host}:{TELEMETRY_PORT}"
    if telemetry != "off":
        split_server(telemetry, "--telemetry-gateway", "the telemetry gateway", TELEMETRY_PORT)
    args += ["--telemetry-gateway", telemetry]
    token = su.check_value(join_token, "--join-token") if join_token else None
    made = su.units(
        args, state, ca=_absolute(ca, "--ca"), telemetry_gateway=telemetry, join_token=token
    )
    if made.collector is not None:  # ReadWritePaths= needs them to exist
        for sub in ("spool", "members"):
            (state / "collector" / sub).mkdir(parents=True, exist_ok=True)
    written = su.write(made, units_at, state)
    for path in written:
        output.out.print(f"wrote {path}", markup=False)
    names = [su.NODE_UNIT] + ([su.COLLECTOR_UNIT] if made.collector is not None else [])
    later = f"systemctl daemon-reload && systemctl enable --now {' '.join(names)}"
    if no_enable:
        output.out.print(f"not enabled (--no-enable); to start them: {later}", markup=False)
        return 0
    why = su.enable(names)
    if why is not None:
        output.err.print(
            f"error: the units are written but not enabled: {why}\n"
            f"fix: on a host that runs systemd, run: {later}",
            markup=False,
        )
        return UNAVAILABLE
    output.out.print(f"enabled and started {', '.join(names)}", markup=False)
    return 0
