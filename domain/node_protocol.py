"""The node control protocol as pure data, and the rules both ends of it follow.

A node holds members in a *phase* (what its journal says); the control plane holds, for each
member placed on a node, the launch *decision* of its attempt and whether the member is recorded
final, asked to stop, or released. :func:`command_for` turns the two views into the one command
the member needs next, so the gateway, the simulator and the tests share a single rule.
:func:`refusal` says why a message about a member must be refused (fencing and placement), and
:func:`accepts_phase` keeps recorded phases monotonic so a replayed report changes nothing.
See docs/node-backend.md for the drawings.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from domain.artifacts import Manifest
from domain.gpus import GpuInventory


class Phase(StrEnum):
    """A member's phase on its node (the journal's word for it)."""

    PREPARING = "preparing"  # image, source and GPUs being made ready
    PREPARED = "prepared"  # voted yes: container created, not started
    REFUSED = "refused"  # voted no: nothing kept
    ABORTED = "aborted"  # rolled back after an Abort: nothing kept
    STARTING = "starting"  # committed: start requested
    RUNNING = "running"
    EXITED = "exited"
    MISSING = "missing"  # the journal knew it but the engine no longer does


# Where a phase stands; a report may only move a member forward (or repeat its phase).
_RANK = {
    Phase.PREPARING: 1,
    Phase.PREPARED: 2,
    Phase.STARTING: 3,
    Phase.RUNNING: 4,
    Phase.EXITED: 5,
    Phase.MISSING: 5,
    Phase.REFUSED: 5,
    Phase.ABORTED: 5,
}
STOPPED_PHASES = frozenset({Phase.REFUSED, Phase.ABORTED, Phase.EXITED, Phase.MISSING})
LIVE_PHASES = frozenset({Phase.STARTING, Phase.RUNNING})  # a workload may be running


def accepts_phase(recorded: Phase | None, reported: Phase) -> bool:
    """May ``reported`` replace ``recorded``? Only forward moves: a replayed or late report of
    an earlier phase changes nothing, and a final phase is never rewritten."""
    if recorded is None:
        return True
    if recorded in STOPPED_PHASES:
        return False
    return _RANK[reported] > _RANK[recorded]


class Decision(StrEnum):
    COMMIT = "commit"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class MemberRef:
    """Names a member in every protocol message. ``epoch`` is its node's fencing epoch when the
    member was placed; a node declared lost gets a higher epoch, which fences older members."""

    attempt_id: str
    member_id: str
    index: int
    epoch: int


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    gpus: int
    gpu_model: str | None
    cpus: float
    memory_mb: int
    # the GPUs the daemon detected (NVML, nvidia-smi, or a recording): None where it found none
    # or is older than issue 23 (unknown); the count and model above are what it offers
    gpu_inventory: GpuInventory | None = None


@dataclass(frozen=True, slots=True)
class MemberReport:
    """A node's report of one member's phase (a status message or a journal entry)."""

    ref: MemberRef
    phase: Phase
    exit_code: int | None = None
    reason: str = ""
    at: datetime | None = None
    # EXITED with code 0: what the member's output directory held (None: not scanned)
    outputs: Manifest | None = None
    token_expires_at: datetime | None = None  # when the collector token the node holds expires
    # EXITED: its final log has not gone whole over this stream yet; the node sends it, then
    # says the exit again (the gateway records the exit only then: docs/node-backend.md#logs)
    log_pending: bool = False


@dataclass(frozen=True, slots=True)
class EngineScan:
    """What a node daemon found when it listed its container engine in full: every container
    labelled with its node and installation, each one its journal lacked re-adopted (its row
    rebuilt from the container's labels and state). With the journal of the same Hello (or
    Inventory) it is the whole truth of one engine, or says why it is not."""

    engine: str  # the engine's identity (Docker's /info ID); "" when it could not be read
    complete: bool  # every labelled container was listed and is in the journal
    reason: str = ""  # why not complete
    # members with a container whose journal row is lost and could not be rebuilt from labels
    unadopted: tuple[str, ...] = ()


def not_proof(node: str, why: str) -> str:
    return (
        f"node {node} does not account for it, and that proves nothing: {why}; if the machine "
        f"that ran it is gone for good, fence the node (`tp node fence {node} --reason …`)"
    )


def absence_unproven(
    scan: EngineScan | None, prepared_on: str, member_id: str, node: str
) -> str | None:
    """Why a committed member that ``node`` does not hold may still run, or None when its
    absence is proof that it ended: the node's daemon listed in full the very engine the
    member was prepared on (``prepared_on``, recorded with its vote) and found no container of
    it. Anything less (no scan, a partial one, another engine — a copied credential, a
    reinstalled engine) proves nothing: the member is ``unknown`` until the right engine
    accounts for it or an operator fences the node."""
    if scan is None:
        why = "its daemon did not list its container engine (a daemon older than the gateway)"
    elif member_id in scan.unadopted:
        why = "its container is there, but its journal row is lost and its labels are incomplete"
    elif not scan.complete:
        why = f"its daemon could not list its container engine ({scan.reason})"
    else:
        why = _other_engine(scan, prepared_on) or ""
        if not why:
            return None
    return not_proof(node, why)


def missing_unproven(scan: EngineScan | None, prepared_on: str, node: str) -> str | None:
    """Why a node's report that a member's container is gone (``Phase.MISSING``: its journal
    knew the container, its engine no longer does) proves nothing, or None when it is proof:
    it comes from the engine the member was prepared on (members prepared before engines were
    recorded take the daemon's word, as before)."""
    if not prepared_on:
        return None
    if scan is None or not scan.engine:
        return not_proof(node, "its daemon did not say which container engine it looked in")
    why = _other_engine(scan, prepared_on)
    return not_proof(node, why) if why else None


def _other_engine(scan: EngineScan, prepared_on: str) -> str | None:
    if not prepared_on:
        return "it was prepared before nodes named their container engine"
    if scan.engine != prepared_on:
        return (
            f"its daemon now uses container engine {scan.engine[:64] or '(unnamed)'}, not "
            f"{prepared_on[:64]} where the member was prepared"
        )
    return None


def not_its_engine(prepared_on: str, scan: EngineScan | None, member_id: str) -> str | None:
    """Why a daemon must neither act nor speak for a member: the member was prepared (voted yes)
    on another container engine than the one this daemon's last scan named (a copy of the node's
    credential on another machine, a reinstalled engine), or the daemon could not name its
    engine. None when the engine is the member's own, or when none is recorded (the first yes
    vote records it; members voted before engines were recorded). A member belongs to one
    engine: it is never prepared, started or reported on behalf of another, so it never runs
    on two machines."""
    if not prepared_on:
        return None
    engine = scan.engine if scan is not None else ""
    if engine == prepared_on:
        return None
    now = (
        f"this daemon uses container engine {engine[:64]}"
        if engine
        else "this daemon did not say which container engine it uses"
    )
    return f"member {member_id} was prepared on container engine {prepared_on[:64]}, and {now}"


def copy_command(held: Phase | None, ref: MemberRef, engine: str, owner: str) -> Command | None:
    """The command for a daemon holding a copy of a member that belongs to another engine
    (``owner``; ``engine`` is this daemon's, "" when it could not name it). A prepared copy is
    aborted, then forgotten: it must never start. A started or exited one is left alone (never
    killed on a guess), and nothing is prepared there. Nothing at all while the daemon cannot
    name its engine: it may yet be the member's own."""
    if not engine:
        return None
    if held in (Phase.PREPARING, Phase.PREPARED):
        why = f"prepared on engine {engine[:64]}; the member belongs to engine {owner[:64]}"
        return Command(CommandKind.ABORT, ref, why)
    if held in (Phase.ABORTED, Phase.REFUSED):
        return Command(CommandKind.FORGET, ref, "a copy on another engine, never started")
    return None


@dataclass(frozen=True, slots=True)
class Placed:
    """The control plane's view of one member placed on a node."""

    ref: MemberRef
    job_id: str
    node: str
    decision: Decision | None
    final: bool  # the member's state is recorded final
    stop_requested: bool
    released: bool  # the node was told to forget it
    fenced: bool  # its node was declared lost after it was placed (epoch raised)


class CommandKind(StrEnum):
    PREPARE = "prepare"
    COMMIT = "commit"
    ABORT = "abort"
    STOP = "stop"
    FORGET = "forget"


@dataclass(frozen=True, slots=True)
class Command:
    kind: CommandKind
    ref: MemberRef
    reason: str = ""


def command_for(placed: Placed | None, held: Phase | None, ref: MemberRef) -> Command | None:
    """The command member ``ref`` needs now, given the control plane's view (``placed``; None:
    the control plane does not know it) and the phase its node holds it in (``held``; None: the
    node does not hold it). None: nothing to send.

    Presumed abort: nothing is ever started without a recorded commit decision, and a member the
    control plane does not know, or whose node was fenced, is stopped and forgotten.
    """

    def cmd(kind: CommandKind, reason: str = "") -> Command:
        return Command(kind, ref, reason)

    if placed is None or placed.fenced or placed.released:
        if held is None:
            return None
        if placed is None:
            why = "the control plane does not know this member"
        elif placed.fenced:
            why = "its node was declared lost (fenced); its members were recorded failed"
        else:
            why = "recorded final"
        return cmd(CommandKind.FORGET, why)
    if placed.decision is None:
        if held is None:
            return None if placed.final else cmd(CommandKind.PREPARE)
        if held in LIVE_PHASES:
            return cmd(CommandKind.STOP, "started without a commit decision")
        return None  # preparing, or voted: wait for the decision
    if placed.decision is Decision.ABORT:
        if held in (Phase.PREPARING, Phase.PREPARED):
            return cmd(CommandKind.ABORT, "the gang launch was aborted")
        if held in LIVE_PHASES:
            return cmd(CommandKind.STOP, "started although the launch was aborted")
        return None if held is None else cmd(CommandKind.FORGET, "the launch was aborted")
    # committed
    if held is Phase.PREPARED:
        if placed.stop_requested or placed.final:
            return cmd(CommandKind.ABORT, "stopped before it started")
        return cmd(CommandKind.COMMIT)
    if held in LIVE_PHASES:
        if placed.stop_requested or placed.final:
            return cmd(CommandKind.STOP, "stop requested")
        # Starting: the node took the commit but may not have made the start (its engine was
        # unreachable then). The commit is said again until it reports the member started;
        # a start is idempotent on the node.
        return cmd(CommandKind.COMMIT) if held is Phase.STARTING else None
    if held in STOPPED_PHASES and placed.final:
        return cmd(CommandKind.FORGET, "recorded final")
    return None


def refusal(placed: Placed | None, ref: MemberRef, node: str) -> str | None:
    """Why a node's message about ``ref`` must be refused, or None to accept it."""
    if placed is None:
        return f"member {ref.member_id} is unknown to the control plane"
    if placed.node != node:
        return f"member {ref.member_id} is placed on node {placed.node}, not {node}"
    if placed.ref.attempt_id != ref.attempt_id or placed.ref.index != ref.index:
        return f"member {ref.member_id} belongs to attempt {placed.ref.attempt_id}"
    if ref.epoch != placed.ref.epoch:
        return f"stale epoch {ref.epoch} for member {ref.member_id} (it has {placed.ref.epoch})"
    if placed.fenced:
        return f"node {node} was fenced after member {ref.member_id} was placed"
    return None


def stale_command(command: Command, welcomed_epoch: int) -> str | None:
    """The node's check. A Prepare or Commit from before its node was last fenced is refused;
    Abort, Stop and Forget are always obeyed (stopping is always safe, starting is not)."""
    if command.kind in (CommandKind.PREPARE, CommandKind.COMMIT) and (
        command.ref.epoch < welcomed_epoch
    ):
        return (
            f"stale epoch {command.ref.epoch} for member {command.ref.member_id} "
            f"(the node is at epoch {welcomed_epoch})"
        )
    return None
