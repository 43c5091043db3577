"""Where the embedded server's CPU and WAL go during a timed part of a benchmark (not a test).

``cpu_by_kind()`` splits the server's CPU by process: the client backends (the store's
connection among them), autovacuum workers, the WAL writer, the checkpointer, the background
writer, and what processes that ended meanwhile had used (the postmaster's reaped children:
an autovacuum worker that started and ended inside the pass). Live processes are read from
``/proc/PID/schedstat`` (nanoseconds); ended ones only in clock ticks (``cutime`` +
``cstime`` of the postmaster, 10 ms steps).

``Probe`` reads ``pg_stat_wal`` (records, full-page images, bytes) and what autovacuum and
ANALYZE did to the store's tables (``pg_stat_user_tables``) on a connection of its own, whose
backend ``cpu_by_kind`` leaves out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

TICK = 1 / os.sysconf("SC_CLK_TCK")
_KINDS = (
    ("autovacuum worker", "autovacuum"),
    ("autovacuum launcher", "autovacuum"),
    ("walwriter", "walwriter"),
    ("checkpointer", "checkpointer"),
    ("background writer", "bgwriter"),
)
STORE_TABLES = ("jobs", "attempts", "members", "job_events", "reservations",
                "reservation_members", "nodes", "gpu_claims")  # fmt: skip


def _kind(pid: str) -> str:
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "ended"
    for needle, kind in _KINDS:
        if needle in title:
            return kind
    return "backend" if title.startswith("postgres: ") else "other"


def cpu_by_kind(pidfile: Path, exclude: frozenset[int] = frozenset()) -> dict[str, float]:
    """CPU seconds so far of the server at ``pidfile`` (its postmaster.pid), by process kind;
    ``postmaster`` holds its own CPU, ``ended`` that of its children that have exited."""
    postmaster = pidfile.read_text().split()[0]
    out: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        pid = stat.parent.name
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if pid == postmaster:
            out["postmaster"] = (int(fields[11]) + int(fields[12])) * TICK
            out["ended"] = out.get("ended", 0.0) + (int(fields[13]) + int(fields[14])) * TICK
        elif fields[1] == postmaster and int(pid) not in exclude:
            try:
                ns = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
            except OSError:
                continue
            kind = _kind(pid)
            out[kind] = out.get(kind, 0.0) + ns / 1e9
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each kind spent between two ``cpu_by_kind``; a process that ended in between moves
    from its kind to ``ended``, so a kind may look negative: such kinds are folded into
    ``ended``."""
    out = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(before) | set(after)}
    for k in [k for k, v in out.items() if v < 0 and k != "ended"]:
        out["ended"] = out.get("ended", 0.0) + out.pop(k)
    return out


class Probe:
    """The WAL a part wrote and the store tables' maintenance counters, on a connection of its
    own. ``pg_stat_wal`` is flushed by each backend at most once a second, so the WAL is read
    as LSNs (``pg_current_wal_insert_lsn``) and, for its records and full-page images,
    ``pg_waldump --stats`` over that range."""

    def __init__(self, conn: Any, pgdata: Path, bin_dir: Path | None) -> None:
        self.conn = conn
        self.pid = 0
        self.pgdata = pgdata
        self.bin_dir = bin_dir

    @classmethod
    async def open(cls, dsn: str, pgdata: Path, bin_dir: Path | None) -> Probe:
        import asyncpg

        probe = cls(await asyncpg.connect(dsn), pgdata, bin_dir)
        probe.pid = await probe.conn.fetchval("SELECT pg_backend_pid()")
        return probe

    async def close(self) -> None:
        await self.conn.close()

    async def lsn(self) -> str:
        return str(await self.conn.fetchval("SELECT pg_current_wal_insert_lsn()::text"))

    async def wal(self, start: str) -> dict[str, float]:
        """Records, full-page image bytes and all bytes of the WAL from ``start`` to now."""
        end = await self.lsn()
        out = {"wal_records": 0.0, "fpi_bytes": 0.0, "wal_bytes": 0.0}
        out["wal_bytes"] = float(
            await self.conn.fetchval(
                "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)", end, start
            )
        )
        if out["wal_bytes"] <= 0 or self.bin_dir is None:
            return out
        await self.conn.execute("SELECT pg_switch_wal()")  # so pg_waldump can read to the end
        import asyncio

        waldump = await asyncio.create_subprocess_exec(
            str(self.bin_dir / "pg_waldump"), "-p", str(self.pgdata / "pg_wal"), "-s", start,
            "-e", end, "--stats", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        stdout, _ = await waldump.communicate()
        for line in stdout.decode().splitlines():
            if line.startswith("Total"):
                # Total  N  record bytes [%]  FPI bytes [%]  combined bytes [%]
                fields = [f for f in line.split()[1:] if not f.startswith("[")]
                out["wal_records"] = float(fields[0])
                out["fpi_bytes"] = float(fields[2])
        return out

    async def tables(self) -> dict[str, dict[str, Any]]:
        """Per store table: dead and live rows, rows changed since its last ANALYZE, and how
        often (auto)vacuum and (auto)analyze ran on it."""
        await self.conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = await self.conn.fetch(
            "SELECT relname, n_live_tup, n_dead_tup, n_mod_since_analyze, n_ins_since_vacuum, "
            "vacuum_count, autovacuum_count, analyze_count, autoanalyze_count "
            "FROM pg_stat_user_tables WHERE relname = ANY($1::text[])",
            list(STORE_TABLES),
        )
        return {r["relname"]: dict(r) for r in rows}


def describe_tables(tables: dict[str, dict[str, Any]]) -> str:
    """One line: per store table, whether it was ever analyzed and vacuumed."""
    parts = []
    for name in STORE_TABLES:
        t = tables.get(name)
        if t is None:
            continue
        analyzed = t["analyze_count"] + t["autoanalyze_count"]
        vacuumed = t["vacuum_count"] + t["autovacuum_count"]
        parts.append(f"{name} {t['n_live_tup']} live, analyzed {analyzed}x "
                     f"(autovacuum {t['autoanalyze_count']}), vacuumed {vacuumed}x "
                     f"(autovacuum {t['autovacuum_count']})")  # fmt: skip
    return "; ".join(parts)
