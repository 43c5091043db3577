"""``runtime=/dir,...``: where a runtime's environment is on hosts that run members as host
processes (Slurm nodes, node daemons with ``--executor process``): the directory put first on
the members' ``PATH``, as an image's environment is in a container."""

from __future__ import annotations

from pathlib import Path

from domain.errors import InvalidInput


def runtime_dirs(raw: str, where: str) -> dict[str, str]:
    """``runtime=/dir,runtime2=/dir2`` → {runtime: directory}; InvalidInput naming ``where``."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        name, eq, directory = (part.strip() for part in item.partition("="))
        if not eq or not name or not directory:
            raise InvalidInput(
                f"{where} item {item!r} is not RUNTIME=DIRECTORY",
                fix="write it as pytorch-trl=/opt/envs/trl/bin,verl=/opt/envs/verl/bin",
                field=where,
            )
        if not directory.startswith("/") or any(ch in directory for ch in ":\n\0"):
            raise InvalidInput(
                f"{where} gives runtime {name} the directory {directory!r},"
                " which is not an absolute directory that can go on PATH (no ':')",
                fix=f"give the absolute directory holding {name}'s python3 on the hosts,"
                " e.g. /opt/envs/trl/bin",
                field=where,
            )
        if name in out:
            raise InvalidInput(
                f"{where} names runtime {name} twice",
                fix="give each runtime one directory",
                field=where,
            )
        out[name] = directory
    return out


def seen_by_host_members(dirs: dict[str, str], state_dir: Path, where: str) -> None:
    """Refuse a runtime directory a host-process member cannot see: its own ``/tmp`` is
    private and the node's state directory is covered (docs/node-backend.md), so a runtime
    there would silently leave ``python3`` to whatever else is on ``PATH``."""
    hidden = {
        state_dir.resolve(): "it is the node's state directory, which members never see",
        Path("/tmp"): "members get a private /tmp",
    }
    for name, directory in dirs.items():
        path = Path(directory).resolve()
        for root, why in hidden.items():
            if path == root or root in path.parents:
                raise InvalidInput(
                    f"{where} gives runtime {name} the directory {directory}, under {root}: "
                    f"{why}, so its members would not find it",
                    fix=f"install {name}'s environment elsewhere (e.g. /opt/envs/{name}) "
                    "and name its bin/ directory",
                    field=where,
                )
