"""Migration 0027 on a database with webhooks (docs/notifications.md#the-secret-at-rest): a
secret stored in clear before stays usable and is marked clear (the migration has no key);
the API's start seals it, under the key file made where none was and the database held no
sealed secret; a start without the key file, once some are sealed, is refused; downgrading is
refused while a secret is sealed."""

from __future__ import annotations

import dataclasses
import logging
import stat
from pathlib import Path

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url
from adapters.postgres.engine import create_engine
from adapters.postgres.webhooks import PostgresWebhooks
from adapters.secret_box import read_key_file
from application.context import Notifications
from domain.errors import InvalidInput
from entrypoints import secrets_key
from entrypoints.settings import Settings

pytestmark = pytest.mark.integration


async def test_clear_secrets_are_kept_then_sealed_at_start(
    empty_db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await migrate.upgrade_async(empty_db, "0026")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await conn.execute(
            "INSERT INTO webhook_subscriptions (id, owner, scope, target, url, format, "
            "created_at, secret) VALUES ('wh-old', 'admin', 'user', 'admin', "
            "'https://hooks.example.org/x', 'tuneplane', now(), 'whsec_old')"
        )
        await migrate.upgrade_async(empty_db, "0027")
        row = await conn.fetchrow("SELECT secret, sealed_secret FROM webhook_subscriptions")
        assert row is not None and tuple(row) == ("whsec_old", None)  # marked: still clear
        settings = dataclasses.replace(
            Settings.from_env(), database_url=empty_db, state_dir=tmp_path / "state"
        )
        key = tmp_path / "state" / "secrets.key"
        await secrets_key.ensure_key_file(settings)  # none sealed yet: made, 0600
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        box = read_key_file(key)
        engine = create_engine(empty_db, pool_size=1)
        try:
            await secrets_key.seal_stored(
                Notifications(PostgresWebhooks(engine), sender=None, secrets=box)  # type: ignore[arg-type]
            )
        finally:
            await engine.dispose()
        row = await conn.fetchrow("SELECT secret, sealed_secret FROM webhook_subscriptions")
        assert row is not None and row["secret"] is None
        assert box.open(row["sealed_secret"]) == "whsec_old"
        key.chmod(0o644)
        with caplog.at_level(logging.WARNING, "tuneplane"):
            await secrets_key.ensure_key_file(settings)  # there: kept as it is
        assert f"{key} is readable by others (mode 644)" in caplog.text
        assert read_key_file(key).open(row["sealed_secret"]) == "whsec_old"
        key.unlink()  # a lost state directory, or another host's process without the file
        with pytest.raises(InvalidInput, match="1 webhook secrets in the database are sealed"):
            await secrets_key.ensure_key_file(settings)
        assert not key.exists()  # no new key that would open none of them
        with pytest.raises(RuntimeError, match="webhook secrets are sealed"):
            await migrate.downgrade_async(empty_db, "0026")
        await conn.execute("DELETE FROM webhook_subscriptions")
        await migrate.downgrade_async(empty_db, "0026")
        await migrate.upgrade_async(empty_db, "head")
    finally:
        await conn.close()
