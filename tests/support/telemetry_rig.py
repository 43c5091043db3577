"""A real telemetry path for fault tests: `tp gateway telemetry` and `tp collector` processes,
members in PostgreSQL with their collector tokens, and files written the way training code
writes them (JSONL lines and TensorBoard event files, framed with CRC-32C).

The rig knows every point it wrote, so a test can compare what the database holds with it
exactly: every point present, none twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import crc32c
from sqlalchemy.ext.asyncio import AsyncEngine
from tensorboard.compat.proto import event_pb2, summary_pb2

from adapters.collector_tokens import CollectorTokens
from adapters.postgres.signing_keys import PostgresSigningKeys
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.tls import ensure_dev_pki
from domain.telemetry import MemberScope
from tests.contract.builders import a_job, a_member, an_attempt
from tests.fixtures.server import TP, free_port
from tests.support.db import plain_dsn

TAGS = ("train/loss", "train/reward", "train/lr", "grad_norm")


def _masked(data: bytes) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return (
        header + struct.pack("<I", _masked(header)) + payload + struct.pack("<I", _masked(payload))
    )


def value_at(member: int, step: int, tag: int) -> float:
    """The value written for (member, step, tag): distinct everywhere, so a swap shows."""
    return float(member * 1_000_000 + step * 4 + tag) / 7.0


@dataclass
class Member:
    scope: MemberScope
    kind: str  # "jsonl" or "tfevents"
    path: Path
    token: str
    records: int = 0  # records written so far


@dataclass
class Rig:
    root: Path
    db_url: str
    members: list[Member] = field(default_factory=list)
    gateway: subprocess.Popen[bytes] | None = None
    collectors: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. metrics ports

    @property
    def ca(self) -> Path:
        return ensure_dev_pki(self.root / "state", ["localhost", "127.0.0.1"]).ca.cert

    # -- set-up -----------------------------------------------------------------------------

    async def add_members(self, engine: AsyncEngine, count: int) -> None:
        job = a_job()
        async with PostgresUnitOfWork(engine) as uow:
            await uow.jobs.add(job)
            attempt = an_attempt(job, 1)
            await uow.attempts.add(attempt)
            members = [a_member(attempt, i) for i in range(count)]
            for m in members:
                await uow.members.add(m)
            await uow.commit()
        pool = await asyncpg.create_pool(plain_dsn(self.db_url), min_size=1, max_size=2)
        try:
            tokens = CollectorTokens(PostgresSigningKeys(pool))
            for i, m in enumerate(members):
                scope = MemberScope(job.id, attempt.id, m.id, i)
                token = await tokens.issue(scope, datetime.now(UTC), 86400)
                kind = "jsonl" if i % 2 == 0 else "tfevents"
                name = "metrics.jsonl" if kind == "jsonl" else "events.out.tfevents.1.host"
                metrics = self.root / f"m{i}" / "metrics"
                metrics.mkdir(parents=True)
                self.members.append(Member(scope, kind, metrics / name, token))
                members_dir = self.root / f"c{i}" / "members"
                members_dir.mkdir(parents=True)
                body = {
                    "job": job.id,
                    "attempt": attempt.id,
                    "member": m.id,
                    "index": i,
                    "token": token,
                    "metrics_dir": str(metrics),
                    "ended": False,
                }
                fd = os.open(members_dir / f"{m.id}.json", os.O_WRONLY | os.O_CREAT, 0o600)
                with os.fdopen(fd, "w") as f:
                    json.dump(body, f)
        finally:
            await pool.close()

    def write(self, records: int) -> None:
        """Append ``records`` more records (4 scalars each) to every member's file."""
        for i, m in enumerate(self.members):
            chunk = bytearray()
            for step in range(m.records, m.records + records):
                values = {t: value_at(i, step, k) for k, t in enumerate(TAGS)}
                if m.kind == "jsonl":
                    line = {"step": step, "wall_time": 1.7e9 + step, "metrics": values}
                    chunk += (json.dumps(line) + "\n").encode()
                else:
                    summary = summary_pb2.Summary(
                        value=[
                            summary_pb2.Summary.Value(tag=t, simple_value=v)
                            for t, v in values.items()
                        ]
                    )
                    event = event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary)
                    chunk += tfrecord(event.SerializeToString())
            with open(m.path, "ab") as f:
                f.write(chunk)
            m.records += records

    # -- processes --------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
        env.update(
            TUNEPLANE_DATABASE_URL=self.db_url,
            TUNEPLANE_STATE_DIR=str(self.root / "state"),
            TUNEPLANE_TELEMETRY_GATEWAY_PORT=str(self.port),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def start_gateway(self) -> None:
        ensure_dev_pki(self.root / "state", ["localhost", "127.0.0.1"])
        log = self.root / "gateway.log"
        self.gateway = subprocess.Popen(
            [TP, "gateway", "telemetry"],
            env=self.env(),
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def kill_gateway(self) -> None:
        if self.gateway is not None:
            self.gateway.send_signal(signal.SIGKILL)
            self.gateway.wait(10)
            self.gateway = None

    def start_collector(self, i: int, *more: str) -> None:
        log = self.root / f"collector-{i}.log"
        args = [
            TP, "collector",
            "--spool", str(self.root / f"c{i}" / "spool"),
            "--members", str(self.root / f"c{i}" / "members"),
            "--gateway", f"127.0.0.1:{self.port}",
            "--ca", str(self.ca),
            "--poll", "0.2", *more,
        ]  # fmt: skip
        self.collectors[i] = subprocess.Popen(
            args, env=self.env(), stdout=log.open("ab"), stderr=subprocess.STDOUT
        )

    def kill_collector(self, i: int) -> None:
        proc = self.collectors.pop(i, None)
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        for i in list(self.collectors):
            proc = self.collectors.pop(i)
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.gateway is not None:
            self.gateway.terminate()
            try:
                self.gateway.wait(10)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
            self.gateway = None

    # -- checks -----------------------------------------------------------------------------

    async def stored(self, conn: asyncpg.Connection | None = None) -> int:
        """Points stored so far, by the members' counters (raised in each batch's transaction;
        cheap enough to ask often: counting the points themselves would unnest every block)."""
        own = conn is None
        conn = conn or await asyncpg.connect(plain_dsn(self.db_url))
        try:
            sql = "SELECT coalesce(sum(points), 0) FROM telemetry_members"
            return int(await conn.fetchval(sql))
        finally:
            if own:
                await conn.close()

    def expected(self) -> int:
        return sum(m.records for m in self.members) * len(TAGS)

    async def wait_stored(self, within: float, every: float = 0.5) -> float:
        """Seconds until every written point is stored, asking every ``every`` seconds;
        AssertionError after ``within``."""
        t0 = time.monotonic()
        conn = await asyncpg.connect(plain_dsn(self.db_url))
        try:
            while time.monotonic() - t0 < within:
                if await self.stored(conn) >= self.expected():
                    return time.monotonic() - t0
                await asyncio.sleep(every)
        finally:
            await conn.close()
        raise AssertionError(
            f"{await self.stored():,} of {self.expected():,} points stored after {within} s;"
            f" see the logs in {self.root}"
        )

    async def mismatches(self) -> list[str]:
        """Every difference between the database and what was written (at most 20)."""
        conn = await asyncpg.connect(plain_dsn(self.db_url))
        problems: list[str] = []
        try:
            dup = await conn.fetch(
                "SELECT series_id, step, count(*) FROM metric_points"
                " GROUP BY series_id, step HAVING count(*) > 1 LIMIT 5"
            )
            problems += [f"stored twice: {dict(r)}" for r in dup]
            for i, m in enumerate(self.members):
                rows = await conn.fetch(
                    "SELECT s.tag, p.step, p.value FROM metric_points p"
                    " JOIN metric_series s ON s.id = p.series_id WHERE s.member_id = $1",
                    m.scope.member_id,
                )
                got = {(r["tag"], r["step"]): r["value"] for r in rows}
                if len(rows) != m.records * len(TAGS):
                    problems.append(f"member {i}: {len(rows)} points, {m.records * 4} written")
                for step in range(m.records):
                    for k, tag in enumerate(TAGS):
                        want = value_at(i, step, k)
                        if m.kind == "tfevents":
                            want = struct.unpack("<f", struct.pack("<f", want))[0]
                        if got.get((tag, step)) != want:
                            problems.append(
                                f"member {i} {tag} step {step}: {got.get((tag, step))} != {want}"
                            )
                            if len(problems) > 20:
                                return problems
        finally:
            await conn.close()
        return problems
