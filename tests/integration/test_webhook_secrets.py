"""Webhook signing secrets sealed at rest (docs/notifications.md#the-secret-at-rest), against
a real PostgreSQL and a real receiver on loopback (the rig of test_webhooks.py): a dump of the
table holds no clear secret, deliveries still verify, keys rotate and `reseal` moves every
secret to the newest key, and a secret no key opens (a wrong key, a corrupted row) holds that
webhook's deliveries only, logged with the webhook and the fix, never sent with another
signature, never stopping the deliverer."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from typing import Any

import asyncpg
import pytest
from sqlalchemy import select, text

from adapters.postgres.connect import plain_url
from adapters.postgres.webhook_tables import webhook_subscriptions
from adapters.postgres.webhooks import PostgresWebhooks
from adapters.secret_box import FernetSecretBox, new_key
from application.webhook_delivery import Deliverer
from application.webhook_secrets import seal_all
from domain.lifecycle import JobState
from domain.secret_ports import SecretUnreadable
from domain.webhooks import verify
from tests.integration import test_webhooks
from tests.integration.test_webhooks import KEY, Rig

pytestmark = pytest.mark.integration
rig = test_webhooks.rig  # the fixture: PostgreSQL, the API in-process, a receiver


async def _row(r: Rig, webhook_id: str) -> dict[str, Any]:
    s = webhook_subscriptions
    async with r.engine.connect() as conn:
        got = (await conn.execute(select(s).where(s.c.id == webhook_id))).mappings().one()
        return dict(got)


def _verifies(r: Rig, path: str, secret: str) -> bool:
    got = r.receiver.at(path)
    header = got[-1].headers["TunePlane-Signature"]
    return verify(secret, header, got[-1].body, int(header.split(",")[0][2:]))


async def _due_now(r: Rig) -> None:
    async with r.engine.begin() as conn:
        await conn.execute(text("UPDATE webhook_outbox SET next_at = now()"))


async def test_the_secret_is_sealed_in_the_database_and_deliveries_verify(rig: Rig) -> None:
    made = await rig.add(rig.alice, "/sealed")
    secret = made["secret"]
    row = await _row(rig, made["id"])
    assert row["secret"] is None and secret not in row["sealed_secret"]
    assert rig.ctx.notifications and rig.ctx.notifications.secrets
    assert rig.ctx.notifications.secrets.open(row["sealed_secret"]) == secret
    # what a dump of the table holds: its rows as COPY writes them (pg_dump's data section)
    conn = await asyncpg.connect(plain_url(rig.engine.url.render_as_string(hide_password=False)))
    try:
        out = io.BytesIO()
        await conn.copy_from_table("webhook_subscriptions", output=out)
    finally:
        await conn.close()
    dump = out.getvalue().decode()
    assert made["id"] in dump and row["sealed_secret"] in dump
    assert secret not in dump and secret.removeprefix("whsec_") not in dump
    job = await rig.job(owner="alice")
    await rig.move(job, JobState.STARTING)
    await rig.drain(2, "/sealed")
    assert _verifies(rig, "/sealed", secret)
    listed = (await rig.alice.get("/v1/webhooks")).text
    assert secret not in listed and row["sealed_secret"] not in listed
    assert '"secret"' not in listed and '"sealed_secret"' not in listed


async def test_keys_rotate_and_reseal_moves_every_secret_to_the_newest(rig: Rig) -> None:
    assert rig.ctx.notifications
    made = [await rig.add(rig.alice, f"/r{i}") for i in range(2)]
    store = PostgresWebhooks(rig.engine)
    newest = new_key().encode()
    rotated = FernetSecretBox([newest, KEY])  # the key file with a new first line
    report = await seal_all(store, rotated, rotate=True)
    assert (report.resealed, report.sealed, report.unreadable) == (2, 0, ())
    only_newest = FernetSecretBox([newest])
    for m in made:
        sealed = (await _row(rig, m["id"]))["sealed_secret"]
        assert only_newest.open(sealed) == m["secret"]  # the old key may now be dropped
        with pytest.raises(SecretUnreadable):
            FernetSecretBox([KEY]).open(sealed)
    # deliveries with the rotated key file still verify with the unchanged secrets
    n = dataclasses.replace(rig.ctx.notifications, secrets=only_newest)
    job = await rig.job(owner="alice")
    deliverer = Deliverer(rig.ctx, n)
    for _ in range(10):
        await deliverer.deliver_due()
        if len(rig.receiver.at("/r0")) and len(rig.receiver.at("/r1")):
            break
    assert _verifies(rig, "/r0", made[0]["secret"]) and _verifies(rig, "/r1", made[1]["secret"])
    assert job.id in rig.receiver.at("/r1")[0].body.decode()
    again = await seal_all(store, only_newest, rotate=False)  # the start's check: all open
    assert (again.kept, again.unreadable) == (2, ())


async def test_a_wrong_key_or_a_corrupted_row_holds_that_webhook_only(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    assert rig.ctx.notifications
    broken = await rig.add(rig.alice, "/broken")
    healthy = await rig.add(rig.alice, "/healthy")
    sealed = (await _row(rig, broken["id"]))["sealed_secret"]
    corrupted = sealed[:40] + ("A" if sealed[40] != "A" else "B") + sealed[41:]
    async with rig.engine.begin() as conn:
        await conn.execute(
            webhook_subscriptions.update()
            .where(webhook_subscriptions.c.id == broken["id"])
            .values(sealed_secret=corrupted)
        )
    job = await rig.job(owner="alice")
    await rig.job(owner="alice")  # two held rows: one log line for the webhook
    with caplog.at_level(logging.ERROR, "tuneplane.webhooks"):
        await rig.drain(2, "/healthy")  # the same passes: the healthy one goes
    assert rig.receiver.at("/broken") == []
    assert _verifies(rig, "/healthy", healthy["secret"])
    held = [o for o in await rig.outbox() if o["subscription_id"] == broken["id"]]
    assert [(o["status"], o["attempts"]) for o in held] == [("pending", 0)] * 2
    assert all("not sent" in o["last_error"] and broken["id"] in o["last_error"] for o in held)
    logged = caplog.text
    assert logged.count(f"webhook {broken['id']}: event") == 1
    assert "TUNEPLANE_SECRETS_KEY_FILE" in logged
    assert broken["secret"] not in logged and corrupted not in logged
    listed = {w["id"]: w for w in (await rig.alice.get("/v1/webhooks")).json()}
    assert "not sent" in listed[broken["id"]]["last_error"]
    r = await rig.alice.post(f"/v1/webhooks/{broken['id']}/test")  # no send, a clear error
    assert r.status_code == 503 and broken["id"] in r.text and "KEY_FILE" in r.text
    assert rig.receiver.at("/broken") == []
    # a process with a wrong key file: the healthy one is held too, nothing is sent
    other_key = FernetSecretBox([new_key().encode()])
    wrong = dataclasses.replace(rig.ctx.notifications, secrets=other_key)
    await rig.move(job, JobState.STARTING)
    await _due_now(rig)
    await Deliverer(rig.ctx, wrong).deliver_due()
    assert len(rig.receiver.at("/healthy")) == 2 and rig.receiver.at("/broken") == []
    # the right key back: the healthy one's rows go on, in order
    await _due_now(rig)
    await rig.drain(3, "/healthy")
    bodies = [json.loads(x.body)["job"] for x in rig.receiver.at("/healthy")]
    assert [b["state"] for b in bodies if b["id"] == job.id] == ["pending", "starting"]
    report = await seal_all(PostgresWebhooks(rig.engine), FernetSecretBox([KEY]), rotate=True)
    assert report.unreadable == (broken["id"],) and report.resealed == 1


async def test_a_clear_secret_from_before_0027_is_used_then_sealed(rig: Rig) -> None:
    made = await rig.add(rig.alice, "/legacy")
    async with rig.engine.begin() as conn:  # as migration 0027 leaves an older row
        await conn.execute(
            webhook_subscriptions.update()
            .where(webhook_subscriptions.c.id == made["id"])
            .values(secret="whsec_from-before", sealed_secret=None)
        )
    await rig.job(owner="alice")
    await rig.drain(1, "/legacy")
    assert _verifies(rig, "/legacy", "whsec_from-before")
    row = await _row(rig, made["id"])
    assert row["secret"] is None and "whsec_from-before" not in row["sealed_secret"]
    assert rig.ctx.notifications and rig.ctx.notifications.secrets
    assert rig.ctx.notifications.secrets.open(row["sealed_secret"]) == "whsec_from-before"
