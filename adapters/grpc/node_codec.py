"""Protobuf ⇄ domain for the node control protocol (``proto/node_control.proto``).

Decoding checks what protobuf cannot: a known phase, a non-empty member reference, a body
present, numbers and times in range, names without control characters (``codec_pieces``). A
malformed message raises ``InvalidInput`` naming the field; the gateway answers it with a
refusal and records nothing. A daemon's prose (a vote's reason, a progress detail, an error) is
cleaned and bounded, never refused; a journal (Hello, Inventory) loses only the reports it
cannot read, logged, and its engine scan then proves no member gone.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from adapters.grpc.codec_pieces import (
    MAX_INT64,
    Journal,
    _at,
    _bad,
    _int,
    _ms,
    _text,
    capacity_from,
    capacity_to,
    files_from,
    files_to,
    journal_from,
    output_file,
    prose,
    ref_from,
    ref_to,
    report_from,
    report_to,
    resume_from,
    resume_to,
    scan_from,
    scan_to,
)
from domain.artifacts import check_artifact_path
from domain.errors import InvalidInput
from domain.node_messages import (
    CredentialAck,
    FetchOutput,
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
    MemberReport,
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
    | FetchOutput
    | TokenRenewal
)

log = logging.getLogger("tuneplane.gateway")

# gRPC metadata of a Connect stream: the daemon process's random id (application/node_sessions)
INSTANCE_HEADER = "tuneplane-daemon-instance"


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
            raise _bad("hello.node_name is empty", field="node_name")
        node = _text(h.node_name, "node_name", 253)
        capacity = capacity_from(h.capacity)
        address = _long(h.address, "address")  # what else it must be: node_sessions.check_hello
        version = _long(h.daemon_version, "daemon_version")
        epoch = _int(h.epoch, "epoch", MAX_INT64)
        scan = scan_from(h.scan) if h.HasField("scan") else None
        journal = _journal(node, "Hello", journal_from(h.journal))
        body: NodeBody = Hello(
            node, capacity, address, version, epoch, journal.reports, journal.scan(scan)
        )
    elif kind == "inventory":
        i = m.inventory
        if not i.HasField("scan"):
            raise _bad("inventory.scan is missing", field="inventory.scan")
        scanned = scan_from(i.scan)
        journal = _journal("", "Inventory", journal_from(i.journal))
        body = Inventory(journal.scan(scanned) or scanned, journal.reports)
    elif kind == "heartbeat":
        body = Heartbeat(m.heartbeat.sent_unix_ms)
    elif kind == "vote":
        v = m.vote
        body = Vote(ref_from(v.ref), v.yes, prose(v.reason), v.busy and not v.yes)
    elif kind == "progress":
        p = m.progress
        body = Progress(ref_from(p.ref), prose(p.stage, 200), p.fraction, prose(p.detail))
    elif kind == "status":
        body = report_from(m.status)
    elif kind == "credential_ack":
        body = CredentialAck(m.credential_ack.credential_id)
    elif kind == "log":
        g = m.log
        offset = _int(g.offset, "log.offset", MAX_INT64)
        body = LogChunk(ref_from(g.ref), g.data, g.last, g.truncated, g.live, offset)
    elif kind == "outputs_scanned":
        o = m.outputs_scanned
        if not o.request_id:
            raise _bad("outputs_scanned.request_id is empty", field="outputs_scanned.request_id")
        found = files_from(o.files) if o.found else None
        request_id = _text(o.request_id, "outputs_scanned.request_id")
        body = OutputsScanned(request_id, ref_from(o.ref), found, prose(o.error))
    else:
        raise _bad("the message has no body")
    return m.seq, body


def _long(value: str, field: str) -> str:
    if len(value) > 4096:
        raise _bad(f"{field} is longer than 4096 characters", field=field)
    return value


def _journal(node: str, where: str, journal: Journal) -> Journal:
    """Log, in one line, the reports of a journal that could not be read (left out)."""
    if journal.unreadable:
        index, error = journal.unreadable[0]
        log.warning(
            "%s%s: %d journal entries could not be read and were left out (their members stay "
            "unknown until the node reports them readably); entry %d: %s",
            f"node {node}: " if node else "", where, len(journal.unreadable), index,
            str(error)[:500],
        )  # fmt: skip
    return journal


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
    elif isinstance(body, FetchOutput):
        f = body.file
        fetch = pb.FetchOutput(request_id=body.request_id, ref=ref_to(body.ref), job_id=body.job_id)
        fetch.path, fetch.size, fetch.sha256 = f.path, f.size, f.sha256
        msg.fetch_output.CopyFrom(fetch)
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
            collector_token_expires_at=_at(
                p.collector_token_expires_unix_ms, "prepare.collector_token_expires_unix_ms"
            ),
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
        until = _at(r.old_valid_until_unix_ms, "rotate.old_valid_until_unix_ms") or datetime.now(
            UTC
        )
        body = Rotation(r.credential, r.credential_id, until)
    elif kind == "refused":
        body = Refused(m.refused.seq, m.refused.reason)
    elif kind == "scan_outputs":
        s = m.scan_outputs
        body = ScanOutputs(s.request_id, ref_from(s.ref), s.job_id)
    elif kind == "fetch_output":
        f = m.fetch_output
        try:  # a file a download may name (no control character either)
            check_artifact_path(f.path)
        except InvalidInput as exc:
            raise _bad(exc.message) from None
        body = FetchOutput(f.request_id, ref_from(f.ref), f.job_id, output_file(f))
    elif kind == "collector_token":
        t = m.collector_token
        expires = _at(t.expires_unix_ms, "collector_token.expires_unix_ms")
        if not t.token or expires is None:
            raise _bad("a collector token needs the token and its expiry")
        body = TokenRenewal(ref_from(t.ref), t.token, expires)
    else:
        raise _bad("the gateway message has no body")
    return m.seq, body, grace
