"""Webhooks over PostgreSQL with a real receiver on loopback (docs/notifications.md): the
routes in-process (an ASGI client), the outbox filled by the trigger in the job's transaction,
the deliverer's passes against a receiver that records, fails or hangs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from adapters.postgres.webhook_tables import webhook_outbox, webhook_subscriptions
from adapters.postgres.webhooks import PostgresWebhooks
from adapters.secret_box import FernetSecretBox, new_key
from adapters.tls import dev_server_context
from adapters.webhook_sender import HttpWebhookSender, system_resolver
from application.auth import bootstrap_admin, create_token
from application.context import Context, Notifications
from application.webhook_delivery import Deliverer
from domain.auth import Role, User
from domain.fleet import Queue, Team
from domain.jobs import Job
from domain.lifecycle import JobState
from domain.webhook_destinations import Destinations
from domain.webhooks import Retry, verify
from entrypoints.api.app import create_app
from tests.contract.builders import a_job, a_spec
from tests.support.asgi import asgi_transport
from tests.support.context import memory_context
from tests.support.waiting import until
from tests.support.webhook_receiver import Receiver, receiver

pytestmark = pytest.mark.integration
KEY = new_key().encode()  # the rig's secrets key (test_webhook_secrets.py rotates it)
FAST = Retry(max_attempts=3, base=timedelta(milliseconds=10), cap=timedelta(milliseconds=40))


@dataclasses.dataclass
class Rig:
    ctx: Context
    engine: AsyncEngine
    deliverer: Deliverer
    receiver: Receiver
    admin: httpx.AsyncClient
    alice: httpx.AsyncClient
    names: dict[str, list[str]]  # the one fake: names resolved as the test says (no DNS here)

    async def add(self, client: httpx.AsyncClient, path: str, **body: Any) -> dict[str, Any]:
        body.setdefault("url", self.receiver.url + path)
        r = await client.post("/v1/webhooks", json=body)
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def job(self, queue: str = "default", **kw: Any) -> Job:
        job = a_job(spec=a_spec(queue=queue), **kw)
        async with self.ctx.uow() as uow:
            await uow.jobs.add(job)
            await uow.commit()
        return job

    async def move(self, job: Job, *states: JobState, reason: str = "") -> Job:
        for state in states:
            moved = job.moved(state, job.updated_at + timedelta(seconds=1), reason)
            async with self.ctx.uow() as uow:
                await uow.jobs.update(moved, job.state)
                await uow.commit()
            job = moved
        return job

    async def outbox(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(webhook_outbox).order_by(webhook_outbox.c.id))
            return [dict(r) for r in rows.mappings()]

    async def drain(self, want: int, path: str) -> None:
        """Deliver until ``path`` has received ``want`` requests."""

        async def delivered() -> bool:
            await self.deliverer.deliver_due()
            return len(self.receiver.at(path)) >= want

        await until(delivered, what=f"{want} deliveries to {path}", within=30, every=0.02)


@pytest.fixture
async def rig(tmp_path: Path, pg_engine: AsyncEngine) -> AsyncIterator[Rig]:
    names: dict[str, list[str]] = {}

    async def resolve(host: str) -> Sequence[str]:
        return names[host] if host in names else await system_resolver(host)

    sender = HttpWebhookSender(destinations=Destinations(allow_loopback=True), resolve=resolve)
    notifications = Notifications(
        PostgresWebhooks(pg_engine), sender, retry=FAST, timeout=timedelta(seconds=30),
        allow_loopback=True, jitter=lambda: 0.0, secrets=FernetSecretBox([KEY]),
    )  # fmt: skip
    ctx = dataclasses.replace(
        memory_context(tmp_path),
        uow=lambda: PostgresUnitOfWork(pg_engine),
        notifications=notifications,
    )
    admin_token = await bootstrap_admin(ctx)
    async with ctx.uow() as uow:
        await uow.policy.put_team(Team("vision"))
        await uow.policy.put_queue(Queue("night", "vision"))
        await uow.policy.put_queue(Queue("gpu", "default"))
        await uow.policy.put_user(User("alice", Role.MEMBER, ("default",)))
        await uow.policy.put_user(User("bob", Role.MEMBER, ("vision",)))
        await uow.commit()
    alice_token = await create_token(ctx, "alice")
    app = create_app(dataclasses.replace(ctx, notifications=notifications), supervise=False)
    transport = asgi_transport(app)
    with receiver() as rec:
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t",
                              headers={"Authorization": f"Bearer {admin_token}"}) as admin,
            httpx.AsyncClient(transport=transport, base_url="http://t",
                              headers={"Authorization": f"Bearer {alice_token}"}) as alice,
        ):  # fmt: skip
            yield Rig(ctx, pg_engine, Deliverer(ctx, notifications), rec, admin, alice, names)
    await sender.close()


async def test_a_jobs_states_arrive_signed_verifiable_and_in_order(rig: Rig) -> None:
    made = await rig.add(rig.alice, "/mine")
    assert made["secret"].startswith("whsec_") and made["scope"] == "user"
    assert made["target"] == "alice"
    other = await rig.job(owner="bob")  # not alice's: not sent
    job = await rig.job(owner="alice")
    await rig.move(job, JobState.STARTING, JobState.RUNNING)
    await rig.move(job.moved(JobState.STARTING, job.updated_at).moved(
        JobState.RUNNING, job.updated_at + timedelta(seconds=2)),
        JobState.FAILED, reason="member 0 exited with 3")  # fmt: skip
    await rig.move(other, JobState.STARTING)
    await rig.drain(4, "/mine")
    got = rig.receiver.at("/mine")
    assert len(got) == 4
    events = [json.loads(r.body) for r in got]
    assert [e["job"]["state"] for e in events] == ["pending", "starting", "running", "failed"]
    assert [e["id"] for e in events] == [f"{job.id}.{n}" for n in (1, 2, 3, 4)]
    assert events[3]["job"] == {
        "id": job.id, "owner": "alice", "queue": "default", "state": "failed",
        "previous_state": "running", "reason": "member 0 exited with 3", "seq": 4,
    }  # fmt: skip
    for r, e in zip(got, events, strict=True):
        header = r.headers["TunePlane-Signature"]
        stamp = int(header.split(",")[0].removeprefix("t="))
        assert verify(made["secret"], header, r.body, stamp)
        assert r.headers["TunePlane-Event-Id"] == e["id"]
        assert r.headers["TunePlane-Webhook-Id"] == made["id"]
    assert {row["status"] for row in await rig.outbox()} == {"delivered"}
    listed = (await rig.alice.get("/v1/webhooks")).json()
    assert [(w["id"], w["delivered"], w["pending"]) for w in listed] == [(made["id"], 4, 0)]
    assert "secret" not in listed[0]


async def test_queue_team_and_state_filters_pick_the_changes(rig: Rig) -> None:
    await rig.add(rig.admin, "/night", scope="queue", target="night", states=["running"])
    await rig.add(rig.admin, "/vision", scope="team", target="vision")
    job = await rig.job(owner="bob", queue="night")
    await rig.job(owner="bob", queue="gpu")  # team default: neither
    await rig.move(job, JobState.STARTING, JobState.RUNNING)
    await rig.drain(3, "/vision")
    await rig.drain(1, "/night")
    assert [json.loads(r.body)["job"]["state"] for r in rig.receiver.at("/night")] == ["running"]
    assert len(rig.receiver.at("/vision")) == 3


async def test_a_receiver_answering_500_gets_it_again_after_back_off(rig: Rig) -> None:
    rig.receiver.plans["/flaky"] = [500, 503]
    made = await rig.add(rig.alice, "/flaky")
    job = await rig.job(owner="alice")
    await rig.move(job, JobState.STARTING)
    await rig.drain(4, "/flaky")  # 500, 503, then 200; then the next change
    got = rig.receiver.at("/flaky")
    ids = [r.headers["TunePlane-Event-Id"] for r in got]
    assert ids == [f"{job.id}.1"] * 3 + [f"{job.id}.2"]  # in order: .2 waited for .1
    first = next(row for row in await rig.outbox() if row["seq"] == 1)
    assert (first["status"], first["attempts"], first["last_status"]) == ("delivered", 2, 200)
    listed = (await rig.alice.get("/v1/webhooks")).json()
    assert listed[0]["id"] == made["id"] and listed[0]["delivered"] == 2


async def test_a_change_is_dead_after_max_attempts_and_the_next_one_goes(rig: Rig) -> None:
    rig.receiver.plans["/down"] = [500, 500, 500]
    await rig.add(rig.alice, "/down")
    job = await rig.job(owner="alice")
    await rig.move(job, JobState.STARTING)
    await rig.drain(4, "/down")
    rows = await rig.outbox()
    assert [(r["seq"], r["status"], r["attempts"]) for r in rows] == [
        (1, "dead", 3), (2, "delivered", 0),
    ]  # fmt: skip
    assert rows[0]["last_error"].startswith("HTTP 500")
    listed = (await rig.alice.get("/v1/webhooks")).json()
    assert (listed[0]["dead"], listed[0]["delivered"]) == (1, 1)


async def test_a_hanging_receiver_does_not_block_others(rig: Rig) -> None:
    rig.receiver.hanging.add("/hang")
    await rig.add(rig.admin, "/hang", scope="user", target="alice")
    await rig.add(rig.alice, "/fine")
    await rig.job(owner="alice")
    passing = asyncio.create_task(rig.deliverer.deliver_due())
    await until(lambda: len(rig.receiver.at("/fine")) == 1, what="the good receiver got it")
    assert rig.receiver.waiting == 1  # while the other still hangs
    rig.receiver.release.set()
    await passing


async def test_a_disabled_owners_webhooks_send_nothing(rig: Rig) -> None:
    await rig.add(rig.alice, "/mine")
    r = await rig.admin.patch("/v1/users/alice", json={"disabled": True})
    assert r.status_code == 200, r.text
    await rig.job(owner="alice")
    assert await rig.outbox() == []


async def test_a_rolled_back_change_sends_nothing(rig: Rig) -> None:
    await rig.add(rig.alice, "/mine")
    job = await rig.job(owner="alice")
    async with rig.ctx.uow() as uow:  # left without commit: rolled back
        await uow.jobs.update(job.moved(JobState.STARTING, job.updated_at), job.state)
    assert [r["seq"] for r in await rig.outbox()] == [1]


async def test_a_name_resolving_to_the_metadata_service_is_refused_until_dead(rig: Rig) -> None:
    """Subscribed by name (the name is not judged then), refused at each send: retried as any
    failure, dead after the maximum, and `test` answers the same words."""
    rig.names["meta.hooks.test"] = ["169.254.169.254"]
    made = await rig.add(rig.alice, "", url="https://meta.hooks.test/x")
    await rig.job(owner="alice")

    async def dead() -> bool:
        await rig.deliverer.deliver_due()
        return [r["status"] for r in await rig.outbox()] == ["dead"]

    await until(dead, what="the refused change dead", within=30, every=0.02)
    row = (await rig.outbox())[0]
    assert row["attempts"] == FAST.max_attempts and row["last_status"] is None
    says = "refused: meta.hooks.test resolves to 169.254.169.254, in 169.254.0.0/16, link-local"
    assert row["last_error"].startswith(says), row["last_error"]
    answer = (await rig.alice.post(f"/v1/webhooks/{made['id']}/test")).json()
    assert (answer["delivered"], answer["status"]) == (False, None)
    assert answer["error"].startswith(says)


async def test_test_sends_a_signed_test_event_and_reports_the_answer(rig: Rig) -> None:
    made = await rig.add(rig.alice, "/t", format="slack")
    r = await rig.alice.post(f"/v1/webhooks/{made['id']}/test")
    assert r.status_code == 200, r.text
    assert r.json()["delivered"] is True and r.json()["status"] == 200
    sent = rig.receiver.at("/t")[0]
    assert "test of webhook" in json.loads(sent.body)["text"]
    stamp = int(sent.headers["TunePlane-Signature"].split(",")[0][2:])
    assert verify(made["secret"], sent.headers["TunePlane-Signature"], sent.body, stamp)
    rig.receiver.plans["/t"] = [500]
    answer = (await rig.alice.post(f"/v1/webhooks/{made['id']}/test")).json()
    assert (answer["delivered"], answer["status"]) == (False, 500)
    assert answer["error"].startswith("HTTP 500")


async def test_who_may_subscribe_to_what(rig: Rig) -> None:
    url = rig.receiver.url + "/x"
    cases = [
        ({"scope": "user", "target": "bob"}, 403),  # another user's jobs
        ({"scope": "queue", "target": "night"}, 403),  # a queue of a team she is not in
        ({"scope": "team", "target": "vision"}, 403),
        ({"scope": "queue", "target": "nosuch"}, 404),
        ({"scope": "team", "target": "default"}, 201),  # her team
        ({"scope": "queue", "target": "gpu"}, 201),  # her team's queue
    ]
    for body, status in cases:
        r = await rig.alice.post("/v1/webhooks", json={"url": url, **body})
        assert r.status_code == status, (body, r.text)
    mine = (await rig.alice.get("/v1/webhooks")).json()
    bob_hook = await rig.add(rig.admin, "/b", scope="user", target="bob")  # admin: anything
    assert len(mine) == 2 and len((await rig.admin.get("/v1/webhooks")).json()) == 3
    assert (await rig.alice.delete(f"/v1/webhooks/{bob_hook['id']}")).status_code == 404
    assert (await rig.alice.post(f"/v1/webhooks/{bob_hook['id']}/test")).status_code == 404
    assert (await rig.admin.delete(f"/v1/webhooks/{bob_hook['id']}")).status_code == 200
    assert (await rig.admin.delete(f"/v1/webhooks/{bob_hook['id']}")).status_code == 404


async def test_hostile_input_is_refused_and_stores_nothing(rig: Rig) -> None:
    bad = [
        {"url": "http://hooks.example.org/x"},
        {"url": "https://u:p@hooks.example.org/x"},
        {"url": "https://169.254.169.254/latest/meta-data/"},  # the destination policy
        {"url": "https://[::ffff:169.254.169.254]/x"},
        {"url": "https://2130706433/x"},  # 127.0.0.1 to a resolver
        {"url": "https://hooks.example.org/\u0000"},
        {"url": "https://hooks.example.org/x\r\nX: y"},
        {"url": "https://hooks.example.org/" + "a" * 5000},
        {"url": 7},
        {"url": "https://hooks.example.org/x", "states": ["runing"]},
        {"url": "https://hooks.example.org/x", "format": "teams"},
        {"url": "https://hooks.example.org/x", "scope": "planet"},
        {"url": "https://hooks.example.org/x", "target": "Bad Name"},
        {"url": "https://hooks.example.org/x", "secret": "mine"},
        {"url": "https://hooks.example.org/x", "states": ["pending"] * 50},
    ]
    for body in bad:
        r = await rig.alice.post("/v1/webhooks", json=body)
        assert r.status_code in (400, 422), (body, r.status_code, r.text)
        assert r.json().get("fix") or r.json().get("detail"), r.text
    async with rig.engine.connect() as conn:
        assert (await conn.execute(select(webhook_subscriptions))).first() is None


async def test_removing_a_webhook_drops_its_undelivered_changes(rig: Rig) -> None:
    made = await rig.add(rig.alice, "/gone")
    await rig.job(owner="alice")
    assert len(await rig.outbox()) == 1
    assert (await rig.alice.delete(f"/v1/webhooks/{made['id']}")).status_code == 200
    assert await rig.outbox() == []
    assert not await rig.deliverer.deliver_due()
    assert rig.receiver.at("/gone") == []


async def test_https_receivers_are_verified_and_redirects_not_followed(tmp_path: Path) -> None:
    """The sender on its own: a certificate the system does not trust is a failed delivery
    naming it; trusted (here: the test's CA), the same receiver gets the body; a 3xx is a
    failure, never followed."""
    server, ca = dev_server_context(tmp_path, ["127.0.0.1"])
    headers = {"Content-Type": "application/json"}
    with receiver(server) as rec:
        rec.plans["/moved"] = [307]
        loopback = Destinations(allow_loopback=True)
        system = HttpWebhookSender(destinations=loopback)
        trusting = HttpWebhookSender(
            verify=ssl.create_default_context(cafile=str(ca)), destinations=loopback
        )
        try:
            refused = await system.send(rec.url + "/x", headers, b"{}", timedelta(seconds=30))
            sent = await trusting.send(rec.url + "/x", headers, b"{}", timedelta(seconds=30))
            moved = await trusting.send(rec.url + "/moved", headers, b"{}", timedelta(seconds=30))
        finally:
            await system.close()
            await trusting.close()
    assert refused.status is None and "CERTIFICATE_VERIFY_FAILED" in refused.error
    assert sent.ok and sent.status == 200
    assert (moved.ok, moved.status) == (False, 307) and moved.error.startswith("HTTP 307")
    assert [r.path for r in rec.received] == ["/x", "/moved"]  # the refused one sent nothing
