"""How the members of a gang find each other: the environment each member gets, and the
command wrapper of Ray gangs. Pure: the gateway builds each member's Prepare order with these.

Every member of a gang runs one container on its own node (host network), so the world is one
process group member per container: ``WORLD_SIZE`` = ``NNODES`` = the gang size, and ``RANK`` =
``NODE_RANK`` = the member's index. ``NPROC_PER_NODE`` tells a launcher such as ``torchrun``
how many processes to start inside the container (one per GPU, at least one).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

RAY = "ray"


def _check(members: int, index: int, master_port: int) -> None:
    if members < 1:
        raise ValueError(f"a gang has at least one member, not {members}")
    if not 0 <= index < members:
        raise ValueError(f"member index {index} is outside a gang of {members}")
    if not 0 < master_port < 65536:
        raise ValueError(f"rendezvous port {master_port} is not a TCP port")


def rendezvous_env(
    *,
    members: int,
    index: int,
    master_addr: str,
    master_port: int,
    gpus_per_member: int,
    process_model: str,
    peers: tuple[str, ...] = (),
) -> dict[str, str]:
    """The rendezvous variables of member ``index`` of a gang of ``members`` whose member 0
    listens on ``master_addr:master_port``. Ray gangs also get ``RAY_ADDRESS`` (workers) or
    ``TUNEPLANE_RAY_HEAD=1`` (member 0, which runs the head)."""
    _check(members, index, master_port)
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(members),
        "RANK": str(index),
        "NODE_RANK": str(index),
        "LOCAL_RANK": "0",
        "NNODES": str(members),
        "NPROC_PER_NODE": str(max(gpus_per_member, 1)),
        "TUNEPLANE_RENDEZVOUS": f"{master_addr}:{master_port}",
    }
    if peers:  # every member's node address by rank (hostfiles, all-to-all checks)
        env["TUNEPLANE_PEERS"] = ",".join(peers)
    if process_model == RAY:
        if index == 0:
            env["TUNEPLANE_RAY_HEAD"] = "1"
        else:
            env["RAY_ADDRESS"] = f"{master_addr}:{master_port}"
    return env


def ray_wrap(command: Sequence[str], index: int, master_addr: str, port: int) -> list[str]:
    """The command of member ``index`` of a Ray gang. Member 0 starts the head on ``port``
    (``ray start`` returns once it is up) and then runs ``command`` (the driver); every other
    member joins the head at ``master_addr:port`` and blocks, serving as a worker, until the
    head goes away. ``command`` is passed as arguments, never re-parsed by the shell."""
    if not 0 < port < 65536:
        raise ValueError(f"rendezvous port {port} is not a TCP port")
    if index < 0:
        raise ValueError(f"member index {index} is negative")
    if index == 0:
        script = f'ray start --head --port={port} && exec "$@"'
        return ["sh", "-c", script, "ray-head", *command]
    address = shlex.quote(f"{master_addr}:{port}")
    return ["sh", "-c", f"exec ray start --address={address} --block"]
