"""Outputs kept on nodes: recording a member's manifest from its node's report, and hashing the
files again there for ``tp artifacts verify``.

A node-backend member writes into a directory on its node (the daemon's outputs root); when it
exits with code 0 the daemon hashes the directory and reports the manifest with the exit (so a
report replayed from the journal carries it too). The gateway records it as the member's
artifacts, with the node's name. To verify, the control plane cannot read the node's disk: it
writes a *scan request* to the database and wakes the gateways (``NODE_WORK``); the gateway that
holds the node's stream sends ``ScanOutputs``, the node hashes the directory again and answers,
the gateway records the answer, and the caller, polling, compares. A node that is not connected
does not answer: the caller says so, never "verified".
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from application.context import Context
from domain.artifact_ports import OutputStorage
from domain.artifacts import MAX_REPORTED_FILES, ArtifactRecord, Manifest, ScanRequest, ScanResult
from domain.coordination_ports import NODE_WORK
from domain.errors import TunePlaneError
from domain.fleet import Connectivity, Node
from domain.node_messages import FetchOutput, OutputsScanned, ScanOutputs
from domain.node_protocol import MemberRef, MemberReport, Phase

SCAN_LIFETIME = timedelta(minutes=2)  # an unanswered request lapses (and is pruned) after this
SCAN_RESEND = timedelta(seconds=10)  # a gateway sends an unanswered request again after this
SCAN_WAIT = 30.0  # how long ``scan_on_nodes`` waits for the answers, seconds
_POLL = 0.1


async def scan_member(
    outputs: OutputStorage | None, node: str, job_id: str, ref: MemberRef
) -> tuple[Manifest | None, str]:
    """On a node: what the member's output directory holds (None: nothing there), or why it
    cannot say (no outputs root, unreadable files, more than ``MAX_REPORTED_FILES`` files)."""
    if outputs is None:
        return None, f"node {node} keeps no outputs (its daemon runs without an outputs root)"
    try:
        found = await outputs.scan(job_id, ref.attempt_id, ref.index)
    except (OSError, TunePlaneError) as exc:
        return None, f"the outputs on node {node} cannot be read: {exc}"
    if found is not None and len(found.files) > MAX_REPORTED_FILES:
        return None, (
            f"{len(found.files)} output files, more than the {MAX_REPORTED_FILES} a manifest"
            " reports"
        )
    return found, ""


async def record_reported(ctx: Context, node: str, job_id: str, report: MemberReport) -> bool:
    """Record the manifest a node reported with a member's exit 0 (once: the first stays)."""
    if report.outputs is None or report.phase is not Phase.EXITED or report.exit_code != 0:
        return False
    ref = report.ref
    async with ctx.units.job_artifacts() as uow:
        attempt = await uow.attempts.get(ref.attempt_id)
        if attempt is None or attempt.job_id != job_id:
            return False
        record = ArtifactRecord(
            ref.member_id, job_id, ref.attempt_id, attempt.number, ref.index,
            report.outputs, ctx.clock.now(), node,
        )  # fmt: skip
        done = await uow.artifacts.record(record)
        await uow.commit()
    return done


async def record_answer(ctx: Context, node: str, answer: OutputsScanned) -> bool:
    """Record a node's answer to a scan request (only the node it was meant for)."""
    result = ScanResult(answer.request_id, answer.manifest, answer.error, ctx.clock.now())
    async with ctx.units.nodes() as uow:
        done = await uow.output_scans.answer(node, result)
        await uow.commit()
    return done


async def due_scans(
    ctx: Context, nodes: Collection[str], sent: dict[str, datetime]
) -> list[tuple[str, ScanOutputs | FetchOutput]]:
    """The scan and fetch requests to send now to ``nodes`` (this gateway's), as (node,
    message); ``sent`` remembers when each was sent (by this gateway) so an unanswered one goes
    again only after ``SCAN_RESEND`` (a node sending the file still sends it once: it knows the
    request). Requests are rare: every pending one is read, and those for other nodes are left
    here, instead of sending the names of every connected node with each read."""
    if not nodes:
        return []
    now = ctx.clock.now()
    async with ctx.units.nodes() as uow:
        pending = await uow.output_scans.pending(None, now - SCAN_LIFETIME)
    for request_id in [r for r, at in sent.items() if now - at > SCAN_LIFETIME]:
        del sent[request_id]
    out: list[tuple[str, ScanOutputs | FetchOutput]] = []
    for r in pending:
        if r.node not in nodes:
            continue  # another gateway's node, or one whose stream ended meanwhile
        last = sent.get(r.id)
        if last is not None and now - last < SCAN_RESEND:
            continue
        sent[r.id] = now
        ref = MemberRef(r.attempt_id, r.member_id, r.member_index, 0)
        if r.fetch is None:
            out.append((r.node, ScanOutputs(r.id, ref, r.job_id)))
        else:
            out.append((r.node, FetchOutput(r.id, ref, r.job_id, r.fetch)))
    return out


def unreachable(node: Node | None, name: str) -> str | None:
    """Why node ``name`` cannot answer a request now (None: it is connected)."""
    if node is not None and node.connectivity is Connectivity.CONNECTED:
        return None
    return f"node {name} is {'gone from the fleet' if node is None else node.connectivity.value}"


async def answers(ctx: Context, request_ids: Collection[str], wait: float) -> dict[str, ScanResult]:
    """The answers recorded to these requests within ``wait`` seconds, by request id (after
    waking the gateways, which carry them to their nodes)."""
    await ctx.signals.notify(NODE_WORK)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    found: dict[str, ScanResult] = {}
    while True:
        async with ctx.units.nodes() as uow:
            for request_id in request_ids:
                if request_id not in found:
                    result = await uow.output_scans.result(request_id)
                    if result is not None:
                        found[request_id] = result
        if len(found) == len(request_ids) or loop.time() >= deadline:
            return found
        await asyncio.sleep(_POLL)


def _request(ctx: Context, r: ArtifactRecord, node: str, now: datetime) -> ScanRequest:
    rid = ctx.ids.new("scan")
    return ScanRequest(rid, node, r.job_id, r.attempt_id, r.member_id, r.member_index, now)


async def scan_on_nodes(
    ctx: Context, records: Sequence[ArtifactRecord], wait: float = SCAN_WAIT
) -> dict[str, ScanResult | str]:
    """Ask the nodes holding ``records``' files to hash them again; by member id, the answer,
    or why there is none (the node did not answer in ``wait`` seconds)."""
    now = ctx.clock.now()
    requests = {r.member_id: _request(ctx, r, r.node, now) for r in records if r.node is not None}
    if not requests:
        return {}
    out: dict[str, ScanResult | str] = {}
    async with ctx.units.node_fleet() as uow:
        await uow.output_scans.prune(now - SCAN_LIFETIME)
        for member_id, request in list(requests.items()):
            why = unreachable(await uow.fleet.node(request.node), request.node)
            if why is not None:
                out[member_id] = (
                    f"{why}; it holds these files: they cannot be checked now (`tp node ls`;"
                    " verify again once it is connected)"
                )
                del requests[member_id]
            else:
                await uow.output_scans.request(request)
        await uow.commit()
    if not requests:
        return out
    found = await answers(ctx, [r.id for r in requests.values()], wait)
    for member_id, request in requests.items():
        out[member_id] = found.get(request.id) or (
            f"node {request.node} did not answer within {wait:g} s: its files cannot be "
            "checked now (is its daemon connected? `tp node ls`; or wait longer: --wait)"
        )
    return out
