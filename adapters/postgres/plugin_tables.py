"""The plugins schema (part of ``tables.metadata``; migration 0009).

One row per published (name, version). The package's declaration (``plugin.toml`` as parsed)
and its file manifest are JSONB; group, executes, capabilities and description are copies of
the declaration's, for queries. ``disabled_at``, ``disabled_by`` and ``disabled_reason`` are set
together when an admin disables a version, and cleared together when one enables it.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, CheckConstraint, Column, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from adapters.postgres.tables import metadata, ts
from domain.plugins import EXECUTES, GROUPS


def _listed(values: dict[str, str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


DISABLED_TOGETHER = (
    "(disabled_at IS NULL AND disabled_by IS NULL AND disabled_reason IS NULL) OR "
    "(disabled_at IS NOT NULL AND disabled_by IS NOT NULL AND disabled_reason IS NOT NULL)"
)

plugins = Table(
    "plugins",
    metadata,
    Column("name", Text, primary_key=True),
    Column("version", Text, primary_key=True),
    Column("group", Text, nullable=False),
    Column("executes", Text, nullable=False),
    Column("capabilities", JSONB, nullable=False),  # a list of names
    Column("description", Text, nullable=False),
    Column("declaration", JSONB, nullable=False),  # domain.plugins.Declaration.to_dict()
    Column("manifest", JSONB, nullable=False),  # domain.artifacts.Manifest.to_dict()
    Column("digest", Text, nullable=False),  # the manifest's digest: the package's
    Column("blob", Text, nullable=False),  # the blob store's key of its canonical tar
    Column("size", BigInteger, nullable=False),
    Column("published_by", Text, nullable=False),
    ts("published_at"),
    ts("disabled_at", nullable=True),
    Column("disabled_by", Text, nullable=True),
    Column("disabled_reason", Text, nullable=True),
    CheckConstraint(f'"group" IN ({_listed(GROUPS)})', name="group"),
    CheckConstraint(f"executes IN ({_listed(EXECUTES)})", name="executes"),
    CheckConstraint("size >= 0", name="size"),
    CheckConstraint(DISABLED_TOGETHER, name="disabled"),
)
