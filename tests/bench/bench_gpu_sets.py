"""Micro-benchmark (not part of the test suite): what a reservation member's GPU set costs to
insert under each way of refusing overlaps, on the embedded PostgreSQL.

Inserts 6 batches of 1,600 rows (as one admission pass's members: ``unnest`` of arrays, one
statement per batch) into a fresh table per variant, 4 rounds interleaved, and prints the best
batch per variant: a plain table, a plain GiST index, the exclusion constraint migration 0032
uses (``EXCLUDE USING gist (gpus WITH &&)`` over ``int4multirange``), the same over
``int4range``, SP-GiST over ``int4range``, and migration 0035's claims (no exclusion; a
statement trigger inserts each row's GPU numbers into a table under a btree primary key, with
``jit = off``). Ratios between the variants are the result; the
milliseconds depend on the machine's share.

Run: ``.venv/bin/python -m tests.bench.bench_gpu_sets``
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import asyncpg

from adapters.postgres.embedded import EmbeddedPostgres

ROWS, BATCHES, ROUNDS = 1_600, 6, 4
VARIANTS = {
    "no index (int4multirange)": ("int4multirange", ""),
    "plain GiST index (int4multirange)": ("int4multirange", "index"),
    "EXCLUDE USING gist, int4multirange (0032)": ("int4multirange", "gist"),
    "EXCLUDE USING gist, int4range": ("int4range", "gist"),
    "EXCLUDE USING spgist, int4range": ("int4range", "spgist"),
    "claims under a btree primary key, statement trigger (0035)": ("int4multirange", "claims"),
}
CLAIMS = [
    "DROP TABLE IF EXISTS claims",
    "CREATE TABLE claims (gpu integer PRIMARY KEY)",
    "CREATE OR REPLACE FUNCTION claim() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$ "
    "BEGIN INSERT INTO claims (gpu) SELECT i FROM new_rows m CROSS JOIN LATERAL unnest(m.gpus) "
    "AS x CROSS JOIN LATERAL generate_series(lower(x), upper(x) - 1) AS i; RETURN NULL; END $$",
    "CREATE TRIGGER claim AFTER INSERT ON t REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION claim()",
]


async def best_batch(conn: asyncpg.Connection, kind: str, check: str) -> float:
    exclusion = f", EXCLUDE USING {check} (gpus WITH &&)" if check in ("gist", "spgist") else ""
    await conn.execute("DROP TABLE IF EXISTS t")
    await conn.execute(
        f"CREATE TABLE t (a text, m int, gpus {kind}, PRIMARY KEY (a, m){exclusion})"
    )
    if check == "index":
        await conn.execute("CREATE INDEX ON t USING gist (gpus)")
    if check == "claims":
        for statement in CLAIMS:
            await conn.execute(statement)
    value = "int4range(x.lo, x.lo + 5)"
    if kind == "int4multirange":
        value = f"int4multirange({value})"
    insert = f"INSERT INTO t SELECT x.a, 0, {value} FROM unnest($1::text[], $2::int[]) AS x(a, lo)"
    best = float("inf")
    for b in range(BATCHES):
        ids = [f"att-{b}-{i:06d}" for i in range(ROWS)]
        lows = [(b * ROWS + i) * 5 for i in range(ROWS)]  # 5 GPUs each, disjoint
        t = time.perf_counter()
        await conn.execute(insert, ids, lows)
        best = min(best, time.perf_counter() - t)
    return best


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def main() -> None:
    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg")
        url = pg.start()
        try:
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
            try:
                best = dict.fromkeys(VARIANTS, float("inf"))
                for _ in range(ROUNDS):
                    for name, (kind, check) in VARIANTS.items():
                        best[name] = min(best[name], await best_batch(conn, kind, check))
            finally:
                await conn.close()
        finally:
            pg.stop()
    base = best["no index (int4multirange)"]
    for name, seconds in best.items():
        print(f"{name}: {seconds * 1000:.1f} ms per {ROWS} rows "
              f"({seconds / ROWS * 1e6:.1f} us a row, {seconds / base:.1f}x no index)")  # fmt: skip
    print(f"load average after: {load()}")


if __name__ == "__main__":
    asyncio.run(main())
