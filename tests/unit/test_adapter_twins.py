"""The memory and PostgreSQL adapters are laid out the same way: every repository module of one
has a twin of the same name in the other (docs/architecture.md, "Adapters and their twins").
Only the modules listed here are one-sided, each for the reason given."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"

MEMORY_ONLY = {
    "db": "the in-memory transaction engine (PostgreSQL itself on the other side)",
    "store": "the in-memory database's tables (tables.py and migrations on the other side)",
    "copies": "the in-memory database's copies of rows (the driver decodes new values there)",
    "backend": "an ExecutionBackend: its twins are the real backends",
    "journal": "a node's MemberJournal: its twin is adapters/node/journal.py (SQLite)",
    "node_states": "node state times and connectivity history: migration 0029's triggers on "
    "the other side",
}
POSTGRES_ONLY = {
    "tables": "schema",
    "artifact_tables": "schema",
    "node_tables": "schema",
    "plugin_tables": "schema",
    "telemetry_tables": "schema",
    "timeline_tables": "schema",
    "webhook_tables": "schema",
    "codec": "rows to domain values",
    "rows": "SQL row helpers (adapters/memory/db.py has the in-memory ones)",
    "arrays": "SQL helpers: array parameters bound as PostgreSQL array literals",
    "engine": "connections",
    "connect": "connections without SQLAlchemy: URL forms, session settings, the start check",
    "errors": "driver errors to domain errors",
    "embedded": "the embedded server of tp up",
    "embedded_os": "the embedded server of tp up",
    "migrate": "schema migrations",
    "metrics": "telemetry: the MetricsStore has no in-memory twin (not part of the unit of work)",
    "metric_compaction": "telemetry",
    "metrics_pool": "telemetry: the metrics store's asyncpg pool",
    "metric_groups": "telemetry: group commit of the metrics store's ingest",
    "metric_group_sql": "telemetry: the group commit's statements",
    "metric_rollups": "telemetry: rollups folded off the ack path (migration 0033)",
    "ingest_arrays": "telemetry",
    "signing_keys": "telemetry: collector token keys",
    "webhooks": "notifications: the outbox is filled by a trigger in the job's transaction; "
    "not part of the unit of work, no in-memory twin (docs/notifications.md)",
}


def _modules(name: str) -> set[str]:
    return {p.stem for p in (ADAPTERS / name).glob("*.py")}


def test_every_repository_module_has_its_twin() -> None:
    memory, postgres = _modules("memory"), _modules("postgres")
    assert memory - postgres == set(MEMORY_ONLY)
    assert postgres - memory == set(POSTGRES_ONLY)
