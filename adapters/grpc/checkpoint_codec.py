"""The messages of the node protocol's checkpoint calls (docs/checkpoints.md), mapped to and from
the domain's types (the Prepare's ``Resume`` is in ``node_codec``)."""

from __future__ import annotations

from adapters.grpc.codec_pieces import (
    _bad,
    _text,
    check_checkpoint,
    files_to,
    manifest_from,
    ref_from,
    ref_to,
    step_from,
    step_to,
)
from domain.node_messages import CheckpointOffer
from domain.node_protocol import MemberRef
from proto import node_control_pb2 as pb

_HEX = frozenset("0123456789abcdef")


def job_from(job_id: str) -> str:
    if not job_id:
        raise _bad("no job_id given")
    return _text(job_id, "job_id")


def digest_from(sha256: str) -> str:
    if len(sha256) != 64 or not _HEX.issuperset(sha256):
        raise _bad(f"{sha256[:80]!r} is not a sha256 digest (64 hex digits)")
    return sha256


def offer_to(offer: CheckpointOffer) -> pb.CheckpointOffer:
    return pb.CheckpointOffer(
        ref=ref_to(offer.ref),
        job_id=offer.job_id,
        name=offer.name,
        step=step_to(offer.step),
        files=files_to(offer.manifest),
    )


def offer_from(m: pb.CheckpointOffer) -> CheckpointOffer:
    return CheckpointOffer(
        ref_from(m.ref),
        job_from(m.job_id),
        check_checkpoint(m.name),
        step_from(m.step),
        manifest_from(m.files),
    )


def file_named(ref: pb.MemberRef, job_id: str, sha256: str) -> tuple[MemberRef, str, str]:
    """The (member, job, digest) a file request or a first piece names, checked."""
    return ref_from(ref), job_from(job_id), digest_from(sha256)
