"""Protobuf ⇄ domain for the pieces the node control protocol's messages are made of
(``proto/node_control.proto``): member references, capacities, manifests, reports, engine
scans, the checkpoint a Prepare resumes from. A malformed piece raises ``InvalidInput``
naming the field (``node_codec`` and ``checkpoint_codec`` build the messages from them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import MAX_FILES, ResumeFrom, check_name
from domain.errors import InvalidInput
from domain.gpus import GpuDevice, GpuInventory
from domain.node_protocol import EngineScan, MemberRef, MemberReport, NodeCapacity, Phase
from proto import node_control_pb2 as pb

_PHASES = {
    Phase.PREPARING: pb.PREPARING,
    Phase.PREPARED: pb.PREPARED,
    Phase.REFUSED: pb.REFUSED,
    Phase.ABORTED: pb.ABORTED,
    Phase.STARTING: pb.STARTING,
    Phase.RUNNING: pb.RUNNING,
    Phase.EXITED: pb.EXITED,
    Phase.MISSING: pb.MISSING,
}
_PHASES_BACK = {v: k for k, v in _PHASES.items()}
_MAX_TEXT = 4096
_HEX = frozenset("0123456789abcdef")


def _bad(what: str) -> InvalidInput:
    return InvalidInput(f"malformed node control message: {what}", fix="upgrade the node daemon")


def _ms(at: datetime | None) -> int:
    return int(at.timestamp() * 1000) if at is not None else 0


def _at(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms > 0 else None


def _text(value: str, field: str) -> str:
    if len(value) > _MAX_TEXT:
        raise _bad(f"{field} is longer than {_MAX_TEXT} characters")
    return value


def capacity_to(c: NodeCapacity) -> pb.Capacity:
    m = pb.Capacity(gpus=c.gpus, gpu_model=c.gpu_model or "", cpus=c.cpus, memory_mb=c.memory_mb)
    if c.gpu_inventory is not None:
        m.gpu_inventory.CopyFrom(inventory_to(c.gpu_inventory))
    return m


def capacity_from(m: pb.Capacity) -> NodeCapacity:
    if m.cpus < 0:
        raise _bad("capacity.cpus is negative")
    inventory = inventory_from(m.gpu_inventory) if m.HasField("gpu_inventory") else None
    return NodeCapacity(m.gpus, m.gpu_model or None, m.cpus, m.memory_mb, inventory)


MAX_GPUS = 256  # per host: NVML numbers a few dozen at most
_MAX_GPU_TEXT = 256


def inventory_to(inv: GpuInventory) -> pb.GpuInventory:
    return pb.GpuInventory(
        devices=[
            pb.GpuDevice(
                index=d.index, uuid=d.uuid, name=d.name, memory_mb=d.memory_mb, mig=d.mig,
                nvlink=d.nvlink,
            )
            for d in inv.devices
        ],
        driver=inv.driver,
        cuda=inv.cuda,
        source=inv.source,
    )  # fmt: skip


def _gpu_text(value: str, field: str) -> str:
    if len(value) > _MAX_GPU_TEXT or any(c < " " for c in value):
        raise _bad(f"{field} is longer than {_MAX_GPU_TEXT} characters or holds a NUL or control")
    return value


def inventory_from(m: pb.GpuInventory) -> GpuInventory:
    """A reported inventory, checked: at most MAX_GPUS devices, unique indices and UUIDs (each
    ``GPU-…``), short texts. A daemon that sends a malformed one is refused (its capacity is
    what the scheduler trusts)."""
    if len(m.devices) > MAX_GPUS:
        raise _bad(f"gpu_inventory lists {len(m.devices)} GPUs, more than {MAX_GPUS}")
    devices = []
    for i, d in enumerate(m.devices):
        field = f"gpu_inventory.devices[{i}]"
        if not d.uuid.startswith("GPU-"):
            raise _bad(f"{field}.uuid {d.uuid[:40]!r} does not start with GPU-")
        devices.append(
            GpuDevice(
                d.index, _gpu_text(d.uuid, f"{field}.uuid"), _gpu_text(d.name, f"{field}.name"),
                d.memory_mb, d.mig, d.nvlink,
            )
        )  # fmt: skip
    if len({d.index for d in devices}) < len(devices):
        raise _bad("gpu_inventory lists a GPU index twice")
    if len({d.uuid for d in devices}) < len(devices):
        raise _bad("gpu_inventory lists a GPU UUID twice")
    return GpuInventory(
        tuple(devices),
        _gpu_text(m.driver, "gpu_inventory.driver"),
        _gpu_text(m.cuda, "gpu_inventory.cuda"),
        _gpu_text(m.source, "gpu_inventory.source"),
    )


def ref_to(r: MemberRef) -> pb.MemberRef:
    return pb.MemberRef(
        attempt_id=r.attempt_id, member_id=r.member_id, member_index=r.index, epoch=r.epoch
    )


def ref_from(m: pb.MemberRef) -> MemberRef:
    if not m.attempt_id or not m.member_id:
        raise _bad("a member reference needs attempt_id and member_id")
    return MemberRef(
        _text(m.attempt_id, "attempt_id"), _text(m.member_id, "member_id"), m.member_index, m.epoch
    )


def files_to(manifest: Manifest) -> list[pb.OutputFile]:
    return [pb.OutputFile(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files]


def output_file(f: pb.OutputFile | pb.FetchOutput) -> ArtifactFile:
    """One output file from the wire: a relative path without ``..``, a hex sha256."""
    parts = f.path.split("/")
    if not f.path or f.path.startswith("/") or "" in parts or ".." in parts or "." in parts:
        raise _bad(f"output path {f.path[:200]!r} is not a relative path")
    if len(f.sha256) != 64 or not _HEX.issuperset(f.sha256):
        raise _bad(f"output {f.path[:200]!r}: sha256 {f.sha256[:80]!r} is not 64 hex digits")
    return ArtifactFile(_text(f.path, "output path"), f.size, f.sha256)


def files_from(files: Sequence[pb.OutputFile]) -> Manifest:
    """A manifest from the wire: relative paths without ``..``, hex sha256, no duplicates."""
    out = [output_file(f) for f in files]
    if len({f.path for f in out}) != len(out):
        raise _bad("the output files list a path twice")
    return Manifest.of(out)


def step_to(step: int | None) -> int:
    return -1 if step is None else step


def step_from(step: int) -> int | None:
    return None if step < 0 else step


def check_checkpoint(name: str) -> str:
    try:
        return check_name(name)
    except InvalidInput as exc:
        raise _bad(exc.message) from None


def manifest_from(files: Sequence[pb.OutputFile]) -> Manifest:
    """A checkpoint's manifest from the wire (at most ``MAX_FILES`` files)."""
    if len(files) > MAX_FILES:
        raise _bad(f"a checkpoint of {len(files)} files; at most {MAX_FILES} are kept")
    return files_from(files)


def resume_to(resume: ResumeFrom | None) -> pb.Resume | None:
    if resume is None:
        return None
    return pb.Resume(
        name=resume.name,
        attempt=resume.attempt,
        step=step_to(resume.step),
        files=files_to(resume.manifest),
    )


def resume_from(m: pb.Prepare) -> ResumeFrom | None:
    if not m.HasField("resume"):
        return None
    r = m.resume
    return ResumeFrom(
        check_checkpoint(r.name), r.attempt, step_from(r.step), manifest_from(r.files)
    )


def report_to(r: MemberReport) -> pb.MemberStatus:
    return pb.MemberStatus(
        ref=ref_to(r.ref),
        phase=_PHASES[r.phase],
        has_exit_code=r.exit_code is not None,
        exit_code=r.exit_code or 0,
        reason=r.reason,
        at_unix_ms=_ms(r.at),
        has_outputs=r.outputs is not None,
        outputs=files_to(r.outputs) if r.outputs is not None else [],
        collector_token_expires_unix_ms=_ms(r.token_expires_at),
        log_pending=r.log_pending,
    )


def report_from(m: pb.MemberStatus) -> MemberReport:
    phase = _PHASES_BACK.get(m.phase)
    if phase is None:
        raise _bad(f"unknown phase {m.phase}")
    code = m.exit_code if m.has_exit_code else None
    outputs = files_from(m.outputs) if m.has_outputs else None
    return MemberReport(
        ref_from(m.ref),
        phase,
        code,
        _text(m.reason, "reason"),
        _at(m.at_unix_ms),
        outputs,
        _at(m.collector_token_expires_unix_ms),
        m.log_pending and phase is Phase.EXITED,
    )


_MAX_UNADOPTED = 10_000


def scan_to(scan: EngineScan) -> pb.EngineScan:
    return pb.EngineScan(
        engine=scan.engine,
        complete=scan.complete,
        reason=scan.reason,
        unadopted=list(scan.unadopted),
    )


def scan_from(m: pb.EngineScan) -> EngineScan:
    if len(m.unadopted) > _MAX_UNADOPTED:
        raise _bad(f"scan.unadopted lists more than {_MAX_UNADOPTED} members")
    return EngineScan(
        _text(m.engine, "scan.engine"),
        m.complete,
        _text(m.reason, "scan.reason"),
        tuple(_text(u, "scan.unadopted") for u in m.unadopted),
    )
