"""How a member's journal row is encoded (``adapters/node/journal.py``): its columns, its CRC-32
over a canonical encoding of them, its order's spec as JSON, and back; a row that cannot be
decoded is a ``ValueError`` saying why (the journal quarantines it)."""

from __future__ import annotations

import json
import logging
import time
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain.artifacts import Manifest
from domain.checkpoints import ResumeFrom, check_name
from domain.errors import InvalidInput
from domain.node_daemon_ports import JournalEntry
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef, Phase

log = logging.getLogger("tuneplane.node.journal")

COLUMNS = (
    "member_id, attempt_id, member_index, epoch, phase, container_id, exit_code, reason, spec,"
    " updated_at"
)


@dataclass(frozen=True, slots=True)
class CorruptRow:
    """A member row that failed its check, moved to the ``quarantine`` table."""

    member_id: str
    why: str


def row_crc(values: tuple[Any, ...]) -> int:
    """CRC-32 of the canonical encoding (compact JSON, in column order) of a row's values."""
    canonical = json.dumps(list(values), separators=(",", ":"), ensure_ascii=False)
    return zlib.crc32(canonical.encode("utf-8"))


def _spec(order: PrepareOrder) -> str:
    return json.dumps(
        {
            "node": order.node,
            "job_id": order.job_id,
            "image": order.image,
            "command": list(order.command),
            "env": order.env,
            "cpus": order.cpus,
            "memory_mb": order.memory_mb,
            "gpu_indices": list(order.gpu_indices),
            "source_digest": order.source_digest,
            "members": order.members,
            "process_model": order.process_model,
            "check_port": order.check_port,
            "collector_token": order.collector_token,
            "collector_token_expires": _iso(order.collector_token_expires_at),
            "capsule": order.capsule,
            "installation": order.installation,
            "attempt": order.attempt,
            "resume": _resume_to(order.resume),
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def _resume_to(resume: ResumeFrom | None) -> dict[str, Any] | None:
    if resume is None:
        return None
    return {"name": resume.name, "attempt": resume.attempt, "step": resume.step,
            "manifest": resume.manifest.to_dict()}  # fmt: skip


def _resume_from(kept: Any) -> ResumeFrom | None:
    """A journalled resume (None: none, or a journal from before checkpoints)."""
    if kept is None:
        return None
    step = kept["step"]
    return ResumeFrom(check_name(str(kept["name"])), int(kept["attempt"]),
                      None if step is None else int(step),
                      Manifest.from_dict(kept["manifest"]))  # fmt: skip


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _when(text: object) -> datetime | None:
    """A journalled time; None in journals before token renewal."""
    return datetime.fromisoformat(str(text)) if text is not None else None


def row_values(entry: JournalEntry, updated_at: int) -> tuple[Any, ...]:
    ref = entry.order.ref
    return (
        ref.member_id,
        ref.attempt_id,
        ref.index,
        ref.epoch,
        entry.phase.value,
        entry.container_id,
        entry.exit_code,
        entry.reason,
        _spec(entry.order),
        updated_at,
    )


def decode_row(row: tuple[Any, ...]) -> JournalEntry:
    """The entry of a row ``(*COLUMNS, crc)``; ValueError saying why it is corrupt."""
    *values, crc = row
    if row_crc(tuple(values)) != crc:
        raise ValueError("its checksum does not match its contents")
    member_id, attempt_id, index, epoch, phase, cid, code, reason, spec, _ = values
    try:
        s = json.loads(spec)
        order = PrepareOrder(
            ref=MemberRef(attempt_id, member_id, int(index), int(epoch)),
            node=str(s["node"]),
            job_id=str(s["job_id"]),
            image=str(s["image"]),
            command=tuple(str(c) for c in s["command"]),
            env={str(k): str(v) for k, v in s["env"].items()},
            cpus=float(s["cpus"]),
            memory_mb=int(s["memory_mb"]),
            gpu_indices=tuple(int(g) for g in s["gpu_indices"]),
            source_digest=s["source_digest"],
            members=int(s["members"]),
            process_model=str(s["process_model"]),
            check_port=int(s["check_port"]),
            collector_token=str(s.get("collector_token", "")),  # journals before telemetry
            capsule=bool(s.get("capsule", False)),  # journals before the Job Capsule
            collector_token_expires_at=_when(s.get("collector_token_expires")),
            installation=str(s.get("installation", "")),  # journals before installation ids
            attempt=int(s.get("attempt", 0)),  # journals before checkpoints
            resume=_resume_from(s.get("resume")),
        )
        return JournalEntry(order, Phase(phase), cid, code, reason)
    except (ValueError, KeyError, TypeError, AttributeError, InvalidInput) as exc:
        raise ValueError(f"it cannot be decoded ({type(exc).__name__}: {exc})") from None


def read_outputs(member_id: str, text: str, digest: str) -> Manifest | None:
    """A kept manifest, unless it is damaged (its digest no longer matches): then it is not
    reported, and the member's artifacts are not recorded from it."""
    try:
        manifest = Manifest.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        log.error("journal: the outputs manifest of %s cannot be read: %s", member_id, exc)
        return None
    if manifest.digest != digest:
        log.error("journal: the outputs manifest of %s is damaged (digest differs)", member_id)
        return None
    return manifest


def now_ms() -> int:
    return time.time_ns() // 1_000_000
