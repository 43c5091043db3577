"""`tp node install --systemd`: the node daemon and its collector as two systemd services
(docs/operations.md#systemd-units).

``units(...)`` renders the two unit files from the daemon's command line (as `tp node run` would
be given it) and ``install(...)`` writes them, both or neither, then enables and starts them
where systemd runs. Everything a unit file would carry is checked first: a value with a control
character (a newline would start a directive of its own) is refused, every argument is quoted
as systemd's ``ExecStart=`` parser reads it (``%`` specifiers and ``$`` expansions escaped), and
paths that go into space-separated path lists must be plain.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from domain.errors import InvalidInput

NODE_UNIT = "tuneplane-node.service"
COLLECTOR_UNIT = "tuneplane-collector.service"
DEFAULT_UNIT_DIR = Path("/etc/systemd/system")
JOIN_TOKEN_FILE = "join-token.env"
SYSTEMD_RUNNING = Path("/run/systemd/system")  # sd_booted(3): systemd is the init system
_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_@+=:,./-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# What the node daemon keeps: members run as root-made accounts, in cgroups it makes at the
# hierarchy's root, in mount namespaces it makes, with GPUs and the engine's socket: so no
# ProtectSystem/PrivateDevices/ProtectKernelTunables/NoNewPrivileges (they would break the
# host-process executor: useradd, cgroup writes, setuid helpers such as nvidia-modprobe) and
# nothing that sets DeviceAllow= (ProtectClock does: GPUs would vanish).
NODE_HARDENING = (
    "ProtectKernelModules=yes",
    "ProtectHostname=yes",
    "RestrictRealtime=yes",
    "LockPersonality=yes",
    "SystemCallArchitectures=native",
    "UMask=0022",
)
# The collector reads files and writes its spool: it gets a read-only system.
COLLECTOR_HARDENING = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "PrivateDevices=yes",
    "NoNewPrivileges=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "SystemCallArchitectures=native",
)


@dataclass(frozen=True)
class Units:
    node: str  # tuneplane-node.service's text
    collector: str | None  # tuneplane-collector.service's, None with --telemetry-gateway off
    join_token: str | None  # the one-time token, for <state>/join-token.env (0600)


def tp_command() -> list[str]:
    """How a unit runs `tp`: the ``tp`` script beside this interpreter, else ``python -m``."""
    script = Path(sys.executable).parent / "tp"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "entrypoints.cli.main"]


def check_value(value: str, flag: str) -> str:
    if _CONTROL.search(value):
        raise InvalidInput(
            f"{flag} holds a control character (a newline, a NUL, ...): {value!r}",
            fix=f"give {flag} without control characters",
            field=flag.removeprefix("--").replace("-", "_"),
        )
    return value


def quote(arg: str) -> str:
    """``arg`` as one word of ``ExecStart=``: specifiers and expansions escaped, quoted unless
    plain (systemd.service(5), "Command lines")."""
    check_value(arg, "an argument")
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _PLAIN.fullmatch(arg):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_state_dir(state_dir: Path | None) -> Path:
    if state_dir is None:
        raise InvalidInput(
            "--state-dir is required with --systemd: the service's state must not depend on "
            "who runs it",
            fix="give an absolute directory, e.g. --state-dir /var/lib/tuneplane/node",
            field="state_dir",
        )
    text = check_value(str(state_dir), "--state-dir")
    if not state_dir.is_absolute():
        raise InvalidInput(
            f"--state-dir {text} is relative: a service starts in /, not here",
            fix=f"give an absolute directory, e.g. --state-dir {Path.cwd() / state_dir}",
            field="state_dir",
        )
    if not _PLAIN_PATH.fullmatch(text):
        raise InvalidInput(
            f"--state-dir {text!r} holds a character systemd's path lists cannot carry "
            "(a space, a quote, a backslash, % or $)",
            fix="give a directory whose path has letters, digits and _ @ + = : , . - / only",
            field="state_dir",
        )
    return Path(os.path.normpath(text))


def _unit(description: str, exec_start: Sequence[str], service: Sequence[str]) -> str:
    lines = [
        "# Written by `tp node install --systemd` (docs/operations.md#systemd-units).",
        "[Unit]",
        f"Description={description}",
        "Wants=network-online.target",
        "After=network-online.target",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(quote(a) for a in exec_start),
        *service,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def units(
    run_args: Sequence[str],
    state_dir: Path,
    *,
    ca: Path,
    telemetry_gateway: str | None,
    join_token: str | None,
) -> Units:
    """The unit files for a daemon started as ``tp node run <run_args>`` (``--state-dir`` and
    ``--separate-collector`` are added here; the join token goes to an environment file, never
    into the unit, which is world-readable)."""
    for arg in run_args:
        check_value(arg, "an option")
    tp = tp_command()
    node_args = [*tp, "node", "run", *run_args, "--state-dir", str(state_dir)]
    collector = None
    if telemetry_gateway != "off":
        node_args.append("--separate-collector")
        feed = state_dir / "collector"
        collector_args = [
            *tp, "collector", "--spool", str(feed / "spool"), "--members", str(feed / "members"),
            "--gateway", str(telemetry_gateway), "--ca", str(ca),
        ]  # fmt: skip
        collector = _unit(
            "TunePlane metrics collector (members' metrics to the telemetry gateway)",
            collector_args,
            [
                "Restart=always",
                "RestartSec=2s",
                f"ReadWritePaths={feed}",
                f"ExecStartPre=+/bin/mkdir -p {feed / 'spool'} {feed / 'members'}",
                *COLLECTOR_HARDENING,
            ],
        )
    node = _unit(
        "TunePlane node daemon",
        node_args,
        [
            f"EnvironmentFile=-{state_dir / JOIN_TOKEN_FILE}",
            "Restart=always",
            "RestartSec=2s",
            # 5: the gateway refused the join token or credential for good (a new token is
            # needed); starting again would only be refused again
            "RestartPreventExitStatus=5",
            # members (host processes) outlive a stop and are re-adopted at the next start
            "KillMode=process",
            "TimeoutStopSec=30s",
            "LimitNOFILE=65536",
            *NODE_HARDENING,
        ],
    )
    return Units(node, collector, join_token)


def check_unit_dir(unit_dir: Path) -> Path:
    text = check_value(str(unit_dir), "--unit-dir")
    if not unit_dir.is_absolute():
        raise InvalidInput(
            f"--unit-dir {text} is relative",
            fix="give an absolute directory (systemd reads /etc/systemd/system)",
            field="unit_dir",
        )
    try:
        is_dir = unit_dir.is_dir()
    except OSError as exc:  # a directory above it this user may not pass
        raise InvalidInput(
            f"--unit-dir {text} cannot be reached: {exc.strerror}",
            fix="run as root (sudo tp node install …), or give a --unit-dir you may write",
            field="unit_dir",
        ) from exc
    if not is_dir:
        raise InvalidInput(
            f"--unit-dir {text} is not a directory",
            fix="give an existing directory systemd reads units from, e.g. /etc/systemd/system",
            field="unit_dir",
        )
    try:
        with tempfile.NamedTemporaryFile(dir=unit_dir, prefix=".tp-probe-"):
            pass
    except OSError as exc:
        raise InvalidInput(
            f"--unit-dir {text} is not writable: {exc.strerror}",
            fix="run as root (sudo tp node install …), or give a --unit-dir you may write",
            field="unit_dir",
        ) from exc
    return unit_dir


def _write(path: Path, text: str, mode: int) -> Path:
    """A temporary file beside ``path`` holding ``text``: renamed into place by the caller."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)
    return Path(tmp)


def write(made: Units, unit_dir: Path, state_dir: Path) -> list[Path]:
    """Write the units (and the join token's file), all or none: each to a temporary file
    first, renamed into place only once all are written."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state_dir, 0o700)
    wanted: list[tuple[Path, str, int]] = [(unit_dir / NODE_UNIT, made.node, 0o644)]
    if made.collector is not None:
        wanted.append((unit_dir / COLLECTOR_UNIT, made.collector, 0o644))
    if made.join_token is not None:
        body = f"TUNEPLANE_JOIN_TOKEN={made.join_token}\n"
        wanted.append((state_dir / JOIN_TOKEN_FILE, body, 0o600))
    temps: list[tuple[Path, Path]] = []
    try:
        for path, text, mode in wanted:
            temps.append((_write(path, text, mode), path))
    except OSError:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in temps:
        os.replace(tmp, path)
    return [path for _, path in temps]


def enable(names: Sequence[str]) -> str | None:
    """``systemctl daemon-reload`` and ``enable --now``; None when done, else why not."""
    systemctl = shutil.which("systemctl")
    if systemctl is None or not SYSTEMD_RUNNING.is_dir():
        return "systemd is not running on this machine (no /run/systemd/system)"
    for argv in ([systemctl, "daemon-reload"], [systemctl, "enable", "--now", *names]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            return f"`{' '.join(argv[1:])}` failed: {(done.stderr or done.stdout).strip()}"
    return None
