"""Protobuf ⇄ domain for the node control protocol (``proto/node_control.proto``).

Decoding checks what protobuf cannot: a known phase, a non-empty member reference, a body
present. A malformed message raises ``InvalidInput`` naming the field; the gateway answers it
with a refusal and records nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import MAX_FILES, ResumeFrom, check_name
from domain.errors import InvalidInput
from domain.node_messages import (
    CredentialAck,
    Heartbeat,
    HeartbeatAck,
    Hello,
    Inventory,
    LogChunk,
    OutputsScanned,
    PrepareOrder,
    Progress,
    Refused,
    Rotation,
    ScanOutputs,
    SourceChunk,
    TokenRenewal,
    Vote,
    Welcome,
)
from domain.node_protocol import (
    Command,
    CommandKind,
    EngineScan,
    MemberRef,
    MemberReport,
    NodeCapacity,
    Phase,
)
from proto import node_control_pb2 as pb

NodeBody = (
    Hello
    | Heartbeat
    | Vote
    | Progress
    | MemberReport
    | CredentialAck
    | LogChunk
    | OutputsScanned
    | Inventory
)
GatewayBody = (
    Welcome
    | HeartbeatAck
    | SourceChunk
    | PrepareOrder
    | Command
    | Rotation
    | Refused
    | ScanOutputs
    | TokenRenewal
)

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
# gRPC metadata of a Connect stream: the daemon process's random id (application/node_sessions)
INSTANCE_HEADER = "tuneplane-daemon-instance"
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


# -- pieces -----------------------------------------------------------------------------------


def capacity_to(c: NodeCapacity) -> pb.Capacity:
    return pb.Capacity(gpus=c.gpus, gpu_model=c.gpu_model or "", cpus=c.cpus, memory_mb=c.memory_mb)


def capacity_from(m: pb.Capacity) -> NodeCapacity:
    if m.cpus < 0:
        raise _bad("capacity.cpus is negative")
    return NodeCapacity(m.gpus, m.gpu_model or None, m.cpus, m.memory_mb)


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


def files_from(files: Sequence[pb.OutputFile]) -> Manifest:
    """A manifest from the wire: relative paths without ``..``, hex sha256, no duplicates."""
    out = []
    for f in files:
        parts = f.path.split("/")
        if not f.path or f.path.startswith("/") or "" in parts or ".." in parts or "." in parts:
            raise _bad(f"output path {f.path[:200]!r} is not a relative path")
        if len(f.sha256) != 64 or not _HEX.issuperset(f.sha256):
            raise _bad(f"output {f.path[:200]!r}: sha256 {f.sha256[:80]!r} is not 64 hex digits")
        out.append(ArtifactFile(_text(f.path, "output path"), f.size, f.sha256))
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


# -- node -> gateway --------------------------------------------------------------------------


def node_message_to(seq: int, body: NodeBody) -> pb.NodeMessage:
    msg = pb.NodeMessage(seq=seq)
    if isinstance(body, Hello):
        msg.hello.CopyFrom(
            pb.Hello(
                node_name=body.node,
                capacity=capacity_to(body.capacity),
                address=body.address,
                daemon_version=body.daemon_version,
                epoch=body.epoch,
                journal=[report_to(r) for r in body.journal],
                scan=scan_to(body.scan) if body.scan is not None else None,
            )
        )
    elif isinstance(body, Inventory):
        msg.inventory.CopyFrom(
            pb.Inventory(scan=scan_to(body.scan), journal=[report_to(r) for r in body.journal])
        )
    elif isinstance(body, Heartbeat):
        msg.heartbeat.sent_unix_ms = body.sent_unix_ms
    elif isinstance(body, Vote):
        msg.vote.CopyFrom(
            pb.Vote(ref=ref_to(body.ref), yes=body.yes, reason=body.reason, busy=body.busy)
        )
    elif isinstance(body, Progress):
        msg.progress.CopyFrom(
            pb.Progress(
                ref=ref_to(body.ref), stage=body.stage, fraction=body.fraction, detail=body.detail
            )
        )
    elif isinstance(body, MemberReport):
        msg.status.CopyFrom(report_to(body))
    elif isinstance(body, CredentialAck):
        msg.credential_ack.credential_id = body.credential_id
    elif isinstance(body, OutputsScanned):
        msg.outputs_scanned.CopyFrom(
            pb.OutputsScanned(
                request_id=body.request_id,
                ref=ref_to(body.ref),
                found=body.manifest is not None,
                files=files_to(body.manifest) if body.manifest is not None else [],
                error=body.error,
            )
        )
    else:
        msg.log.CopyFrom(
            pb.LogChunk(
                ref=ref_to(body.ref),
                data=body.data,
                last=body.last,
                truncated=body.truncated,
                live=body.live,
                offset=body.offset,
            )
        )
    return msg


def node_message_from(m: pb.NodeMessage) -> tuple[int, NodeBody]:
    kind = m.WhichOneof("body")
    if kind == "hello":
        h = m.hello
        if not h.node_name:
            raise _bad("hello.node_name is empty")
        body: NodeBody = Hello(
            _text(h.node_name, "node_name"),
            capacity_from(h.capacity),
            _text(h.address, "address"),
            _text(h.daemon_version, "daemon_version"),
            h.epoch,
            tuple(report_from(r) for r in h.journal),
            scan_from(h.scan) if h.HasField("scan") else None,
        )
    elif kind == "inventory":
        i = m.inventory
        if not i.HasField("scan"):
            raise _bad("inventory.scan is missing")
        body = Inventory(scan_from(i.scan), tuple(report_from(r) for r in i.journal))
    elif kind == "heartbeat":
        body = Heartbeat(m.heartbeat.sent_unix_ms)
    elif kind == "vote":
        v = m.vote
        body = Vote(ref_from(v.ref), v.yes, _text(v.reason, "reason"), v.busy and not v.yes)
    elif kind == "progress":
        p = m.progress
        body = Progress(
            ref_from(p.ref), _text(p.stage, "stage"), p.fraction, _text(p.detail, "detail")
        )
    elif kind == "status":
        body = report_from(m.status)
    elif kind == "credential_ack":
        body = CredentialAck(m.credential_ack.credential_id)
    elif kind == "log":
        g = m.log
        body = LogChunk(ref_from(g.ref), g.data, g.last, g.truncated, g.live, g.offset)
    elif kind == "outputs_scanned":
        o = m.outputs_scanned
        if not o.request_id:
            raise _bad("outputs_scanned.request_id is empty")
        found = files_from(o.files) if o.found else None
        body = OutputsScanned(
            _text(o.request_id, "request_id"), ref_from(o.ref), found, _text(o.error, "error")
        )
    else:
        raise _bad("the message has no body")
    return m.seq, body


# -- gateway -> node --------------------------------------------------------------------------

_COMMANDS = {
    CommandKind.COMMIT: "commit",
    CommandKind.ABORT: "abort",
    CommandKind.STOP: "stop",
    CommandKind.FORGET: "forget",
}


def gateway_message_to(
    seq: int, body: GatewayBody, grace_seconds: float = 10.0
) -> pb.GatewayMessage:
    msg = pb.GatewayMessage(seq=seq)
    if isinstance(body, Welcome):
        msg.welcome.CopyFrom(
            pb.Welcome(
                epoch=body.epoch,
                heartbeat_seconds=body.heartbeat_seconds,
                server_unix_ms=body.server_unix_ms,
                installation=body.installation,
            )
        )
    elif isinstance(body, HeartbeatAck):
        msg.heartbeat_ack.sent_unix_ms = body.sent_unix_ms
    elif isinstance(body, SourceChunk):
        msg.source.CopyFrom(
            pb.SourceChunk(digest=body.digest, offset=body.offset, data=body.data, last=body.last)
        )
    elif isinstance(body, PrepareOrder):
        msg.prepare.CopyFrom(
            pb.Prepare(
                ref=ref_to(body.ref),
                job_id=body.job_id,
                image=body.image,
                command=list(body.command),
                env=body.env,
                cpus=body.cpus,
                memory_mb=body.memory_mb,
                gpu_indices=list(body.gpu_indices),
                source_digest=body.source_digest or "",
                members=body.members,
                process_model=body.process_model,
                check_port=body.check_port,
                collector_token=body.collector_token,
                capsule=body.capsule,
                node_name=body.node,
                collector_token_expires_unix_ms=_ms(body.collector_token_expires_at),
                attempt=body.attempt,
                resume=resume_to(body.resume),
            )
        )
    elif isinstance(body, Command):
        if body.kind is CommandKind.PREPARE:
            raise ValueError("a Prepare is sent as a PrepareOrder")
        ref = ref_to(body.ref)
        if body.kind is CommandKind.COMMIT:
            msg.commit.ref.CopyFrom(ref)
        elif body.kind is CommandKind.ABORT:
            msg.abort.CopyFrom(pb.Abort(ref=ref, reason=body.reason))
        elif body.kind is CommandKind.STOP:
            msg.stop.CopyFrom(pb.Stop(ref=ref, grace_seconds=grace_seconds))
        else:
            msg.forget.CopyFrom(pb.Forget(ref=ref, reason=body.reason))
    elif isinstance(body, Rotation):
        msg.rotate.CopyFrom(
            pb.RotateCredential(
                credential=body.credential,
                credential_id=body.credential_id,
                old_valid_until_unix_ms=_ms(body.old_valid_until),
            )
        )
    elif isinstance(body, ScanOutputs):
        msg.scan_outputs.CopyFrom(
            pb.ScanOutputs(request_id=body.request_id, ref=ref_to(body.ref), job_id=body.job_id)
        )
    elif isinstance(body, TokenRenewal):
        msg.collector_token.CopyFrom(
            pb.CollectorToken(
                ref=ref_to(body.ref), token=body.token, expires_unix_ms=_ms(body.expires_at)
            )
        )
    else:
        msg.refused.CopyFrom(pb.Refused(seq=body.seq, reason=body.reason))
    return msg


def gateway_message_from(m: pb.GatewayMessage) -> tuple[int, GatewayBody, float]:
    """(seq, body, stop grace seconds)."""
    kind = m.WhichOneof("body")
    grace = 0.0
    body: GatewayBody
    if kind == "welcome":
        w = m.welcome
        body = Welcome(w.epoch, w.heartbeat_seconds, w.server_unix_ms, w.installation)
    elif kind == "heartbeat_ack":
        body = HeartbeatAck(m.heartbeat_ack.sent_unix_ms)
    elif kind == "source":
        s = m.source
        body = SourceChunk(s.digest, s.offset, s.data, s.last)
    elif kind == "prepare":
        p = m.prepare
        body = PrepareOrder(
            ref=ref_from(p.ref),
            node=p.node_name,
            job_id=p.job_id,
            image=p.image,
            command=tuple(p.command),
            env=dict(p.env),
            cpus=p.cpus,
            memory_mb=p.memory_mb,
            gpu_indices=tuple(p.gpu_indices),
            source_digest=p.source_digest or None,
            members=p.members,
            process_model=p.process_model,
            check_port=p.check_port,
            collector_token=p.collector_token,
            capsule=p.capsule,
            collector_token_expires_at=_at(p.collector_token_expires_unix_ms),
            attempt=p.attempt,
            resume=resume_from(p),
        )
    elif kind == "commit":
        body = Command(CommandKind.COMMIT, ref_from(m.commit.ref))
    elif kind == "abort":
        body = Command(CommandKind.ABORT, ref_from(m.abort.ref), m.abort.reason)
    elif kind == "stop":
        body = Command(CommandKind.STOP, ref_from(m.stop.ref))
        grace = m.stop.grace_seconds
    elif kind == "forget":
        body = Command(CommandKind.FORGET, ref_from(m.forget.ref), m.forget.reason)
    elif kind == "rotate":
        r = m.rotate
        until = _at(r.old_valid_until_unix_ms) or datetime.now(UTC)
        body = Rotation(r.credential, r.credential_id, until)
    elif kind == "refused":
        body = Refused(m.refused.seq, m.refused.reason)
    elif kind == "scan_outputs":
        s = m.scan_outputs
        body = ScanOutputs(s.request_id, ref_from(s.ref), s.job_id)
    elif kind == "collector_token":
        t = m.collector_token
        expires = _at(t.expires_unix_ms)
        if not t.token or expires is None:
            raise _bad("a collector token needs the token and its expiry")
        body = TokenRenewal(ref_from(t.ref), t.token, expires)
    else:
        raise _bad("the gateway message has no body")
    return m.seq, body, grace
