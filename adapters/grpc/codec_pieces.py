"""Protobuf ⇄ domain for the pieces the node control protocol's messages are made of
(``proto/node_control.proto``): member references, capacities, manifests, reports, engine
scans, the checkpoint a Prepare resumes from. A malformed piece raises ``InvalidInput``
naming the field (``node_codec`` and ``checkpoint_codec`` build the messages from them).

What a daemon sends is untrusted. Every number is bounded to what the domain and the schema
hold (no NaN or infinity, no count past ``MAX_GPUS_PER_NODE``, no integer past its column, no
time after ``MAX_AT``), and every name (ids, models, engines, paths) is refused
with a NUL or another control character: those are malformed. A daemon's prose (a reason, an
error, a progress detail) is kept, cleaned and bounded instead (``prose``): a 100 KB engine
error or a NUL in it is the engine's text, not a malformed message."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from domain import texts
from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import MAX_FILES, ResumeFrom, check_name
from domain.errors import InvalidInput
from domain.fleet import MAX_CPUS_PER_NODE, MAX_GPUS_PER_NODE, MAX_MEMORY_MB_PER_NODE
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
MAX_INT32 = 2**31 - 1  # an INTEGER column (a member's index, a GPU's)
MAX_INT64 = 2**63 - 1  # a BIGINT column (epochs, sizes)
MAX_AT = datetime(2200, 1, 1, tzinfo=UTC)  # no clock is that far ahead: a garbled time
_MAX_MS = int(MAX_AT.timestamp() * 1000)


def _bad(what: str, fix: str = "upgrade the node daemon", field: str | None = None) -> InvalidInput:
    return InvalidInput(f"malformed node control message: {what}", fix=fix, field=field)


def _ms(at: datetime | None) -> int:
    return int(at.timestamp() * 1000) if at is not None else 0


def _at(ms: int, field: str = "at_unix_ms") -> datetime | None:
    """A time on the wire (ms since the epoch; 0 or less: none), not after MAX_AT."""
    if ms <= 0:
        return None
    if ms > _MAX_MS:
        raise _bad(f"{field} {ms} is after {MAX_AT:%Y-%m-%d}", field=field)
    return datetime.fromtimestamp(ms / 1000, UTC)


def _int(value: int, field: str, most: int) -> int:
    if not 0 <= value <= most:
        raise _bad(f"{field} {value} is out of range (0 to {most})", field=field)
    return value


def _text(value: str, field: str, limit: int = _MAX_TEXT) -> str:
    """A name from the wire (an id, a model, an engine, a path): bounded, printable."""
    if len(value) > limit:
        raise _bad(f"{field} is longer than {limit} characters", field=field)
    if not value.isprintable():
        raise _bad(f"{field} {value[:80]!r} holds a NUL or another control character", field=field)
    return value


def prose(value: str, limit: int = _MAX_TEXT) -> str:
    """A daemon's free text (a reason, an error, a progress detail): kept, made printable and
    cut to ``limit`` (``domain.texts.prose``). Never refused: an engine's 100 KB error page is
    still why the member failed."""
    return texts.prose(value, limit)


def capacity_to(c: NodeCapacity) -> pb.Capacity:
    m = pb.Capacity(gpus=c.gpus, gpu_model=c.gpu_model or "", cpus=c.cpus, memory_mb=c.memory_mb)
    if c.gpu_inventory is not None:
        m.gpu_inventory.CopyFrom(inventory_to(c.gpu_inventory))
    return m


_CAPACITY_FIX = (
    "upgrade the node daemon, or give the daemon its capacity (`tp node run --gpus/--gpu-model/"
    "--cpus/--memory-mb`) if detection is wrong"
)


def capacity_from(m: pb.Capacity) -> NodeCapacity:
    """A node's capacity (``Enroll``, ``Hello``), within what a node of the fleet may have."""

    def bad(field: str, what: str) -> InvalidInput:
        return _bad(f"capacity.{field} {what}", fix=_CAPACITY_FIX, field=f"capacity.{field}")

    if m.gpus > MAX_GPUS_PER_NODE:
        raise bad("gpus", f"{m.gpus} is more than {MAX_GPUS_PER_NODE}")
    if not math.isfinite(m.cpus) or not 0 <= m.cpus <= MAX_CPUS_PER_NODE:
        raise bad("cpus", f"{m.cpus} is not a number from 0 to {MAX_CPUS_PER_NODE}")
    if m.memory_mb > MAX_MEMORY_MB_PER_NODE:
        raise bad("memory_mb", f"{m.memory_mb} is more than {MAX_MEMORY_MB_PER_NODE}")
    if len(m.gpu_model) > _MAX_GPU_TEXT or not m.gpu_model.isprintable():
        raise bad(
            "gpu_model",
            f"{m.gpu_model[:40]!r} is longer than {_MAX_GPU_TEXT} characters or holds a NUL "
            "or control character",
        )
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
    if len(value) > _MAX_GPU_TEXT or not value.isprintable():
        raise _bad(
            f"{field} is longer than {_MAX_GPU_TEXT} characters or holds a NUL or control "
            "character",
            field=field,
        )
    return value


def inventory_from(m: pb.GpuInventory) -> GpuInventory:
    """A reported inventory, checked: at most MAX_GPUS devices, unique indices (below MAX_GPUS)
    and UUIDs (each ``GPU-…``), short printable texts, a GPU's memory no more than a node's.
    A daemon that sends a malformed one is refused (its capacity is what the scheduler
    trusts)."""
    if len(m.devices) > MAX_GPUS:
        raise _bad(
            f"gpu_inventory lists {len(m.devices)} GPUs, more than {MAX_GPUS}",
            field="capacity.gpu_inventory",
        )
    devices = []
    for i, d in enumerate(m.devices):
        field = f"gpu_inventory.devices[{i}]"
        if not d.uuid.startswith("GPU-"):
            raise _bad(f"{field}.uuid {d.uuid[:40]!r} does not start with GPU-")
        devices.append(
            GpuDevice(
                _int(d.index, f"{field}.index", MAX_GPUS - 1),
                _gpu_text(d.uuid, f"{field}.uuid"), _gpu_text(d.name, f"{field}.name"),
                _int(d.memory_mb, f"{field}.memory_mb", MAX_MEMORY_MB_PER_NODE), d.mig, d.nvlink,
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
        raise _bad("a member reference needs attempt_id and member_id", field="ref")
    return MemberRef(
        _text(m.attempt_id, "ref.attempt_id"),
        _text(m.member_id, "ref.member_id"),
        _int(m.member_index, "ref.member_index", MAX_INT32),
        _int(m.epoch, "ref.epoch", MAX_INT64),
    )


def files_to(manifest: Manifest) -> list[pb.OutputFile]:
    return [pb.OutputFile(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files]


def output_file(f: pb.OutputFile | pb.FetchOutput) -> ArtifactFile:
    """One output file from the wire: a relative path without ``..`` or control characters, a
    size a BIGINT holds, a hex sha256."""
    parts = f.path.split("/")
    if not f.path or f.path.startswith("/") or "" in parts or ".." in parts or "." in parts:
        raise _bad(f"output path {f.path[:200]!r} is not a relative path", field="outputs.path")
    if len(f.sha256) != 64 or not _HEX.issuperset(f.sha256):
        raise _bad(
            f"output {f.path[:200]!r}: sha256 {f.sha256[:80]!r} is not 64 hex digits",
            field="outputs.sha256",
        )
    path = _text(f.path, "outputs.path")
    return ArtifactFile(path, _int(f.size, "outputs.size", MAX_INT64), f.sha256)


def files_from(files: Sequence[pb.OutputFile]) -> Manifest:
    """A manifest from the wire: relative paths without ``..``, hex sha256, no duplicates."""
    out = [output_file(f) for f in files]
    if len({f.path for f in out}) != len(out):
        raise _bad("the output files list a path twice")
    return Manifest.of(out)


_UNUSABLE = "a path or digest the control plane cannot keep (not relative, a control character)"


def reported_outputs(files: Sequence[pb.OutputFile]) -> Manifest:
    """A member's outputs as its exit report lists them: an entry that cannot be kept (a name
    with a control character from a daemon that listed it, a path twice) is left out and
    counted in the manifest, never a reason to refuse the report: the exit must be recorded."""
    kept: dict[str, ArtifactFile] = {}
    dropped = 0
    for f in files:
        try:
            one = output_file(f)
        except InvalidInput:
            dropped += 1
            continue
        if one.path in kept:
            dropped += 1
        else:
            kept[one.path] = one
    return Manifest.of(list(kept.values()), {_UNUSABLE: dropped} if dropped else None)


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
    """One member's report. Its reason is the daemon's prose (kept, cleaned and bounded);
    anything else malformed refuses the report (and only it: ``journal_from``)."""
    phase = _PHASES_BACK.get(m.phase)
    if phase is None:
        raise _bad(f"unknown phase {m.phase}", field="phase")
    code = m.exit_code if m.has_exit_code else None
    outputs = reported_outputs(m.outputs) if m.has_outputs else None
    return MemberReport(
        ref_from(m.ref),
        phase,
        code,
        prose(m.reason),
        _at(m.at_unix_ms, "at_unix_ms"),
        outputs,
        _at(m.collector_token_expires_unix_ms, "collector_token_expires_unix_ms"),
        m.log_pending and phase is Phase.EXITED,
    )


@dataclass(frozen=True, slots=True)
class Journal:
    """A journal from the wire (a Hello's, an Inventory's): the reports read, and why each
    unreadable one was left out (its index, the error)."""

    reports: tuple[MemberReport, ...]
    unreadable: tuple[tuple[int, InvalidInput], ...] = ()

    def scan(self, scan: EngineScan | None) -> EngineScan | None:
        """The scan that came with it, no longer complete if a report was left out: a member
        the journal holds but the gateway could not read is not proved gone by its absence
        (``domain.node_protocol.absence_unproven``), it stays unknown."""
        if not self.unreadable or scan is None:
            return scan
        index, error = self.unreadable[0]
        why = (
            f"the gateway could not read {len(self.unreadable)} of its journal's entries "
            f"(entry {index}: {error.message[:200]})"
        )
        reason = f"{scan.reason}; {why}" if scan.reason else why
        return EngineScan(scan.engine, False, prose(reason), scan.unadopted)


def journal_from(reports: Sequence[pb.MemberStatus]) -> Journal:
    """Every report that can be read; one that cannot is left out, not the whole journal (a
    daemon whose journal holds one bad row must still reconnect)."""
    read: list[MemberReport] = []
    unreadable: list[tuple[int, InvalidInput]] = []
    for index, m in enumerate(reports):
        try:
            read.append(report_from(m))
        except InvalidInput as exc:
            unreadable.append((index, exc))
    return Journal(tuple(read), tuple(unreadable))


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
        raise _bad(
            f"scan.unadopted lists more than {_MAX_UNADOPTED} members", field="scan.unadopted"
        )
    return EngineScan(
        _text(m.engine, "scan.engine"),
        m.complete,
        prose(m.reason),
        tuple(_text(u, "scan.unadopted") for u in m.unadopted),
    )
