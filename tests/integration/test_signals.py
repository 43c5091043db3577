"""Wake-up hints over LISTEN/NOTIFY between two processes' worth of PostgresSignals: delivered
by topic, dropped (never raised) while the database is away, and delivered again once the
listening connection is back; a reconnect wakes every subscriber (hints may have been lost)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from adapters.memory.signals import InProcessSignals
from adapters.postgres.signals import PostgresSignals
from tests.support.db import plain_dsn

pytestmark = pytest.mark.integration


async def woken(event: asyncio.Event, within: float = 5.0) -> bool:
    try:
        await asyncio.wait_for(event.wait(), within)
    except TimeoutError:
        return False
    event.clear()
    return True


async def test_hints_reach_subscribers_of_their_topic_in_another_connection(pg_url: str) -> None:
    listener, sender = PostgresSignals(pg_url), PostgresSignals(pg_url)
    votes, work = asyncio.Event(), asyncio.Event()
    listener.subscribe("launch_news", votes.set)
    await listener.start()
    listener.subscribe("node_work", work.set)  # subscribing after the start works too
    await sender.start()
    try:
        assert await woken(votes)  # connecting wakes every subscriber once
        await asyncio.sleep(0.2)  # the late subscription's LISTEN is in place
        work.clear()
        await sender.notify("launch_news")
        assert await woken(votes)
        assert not work.is_set()
        await sender.notify("node_work")
        assert await woken(work)
        assert not votes.is_set()
        assert sender.sent == 2 and listener.received == 2
    finally:
        await sender.close()
        await listener.close()


async def test_a_lost_connection_drops_hints_and_comes_back(pg_url: str) -> None:
    listener = PostgresSignals(pg_url, retry_seconds=0.1)
    sender = PostgresSignals(pg_url, retry_seconds=0.1)
    news = asyncio.Event()
    listener.subscribe("launch_news", news.set)
    await listener.start()
    await sender.start()
    try:
        assert await woken(news)
        admin = await asyncpg.connect(plain_dsn(pg_url))
        try:  # the database ends both sessions (a restart, a failover, a network cut)
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'tuneplane-signals'"
            )
        finally:
            await admin.close()
        await sender.notify("launch_news")  # dropped or delivered, never raised
        assert await woken(news)  # the listener reconnected and woke its subscribers
        await asyncio.sleep(0.3)  # the sender reconnected too
        await sender.notify("launch_news")
        assert await woken(news)
    finally:
        await sender.close()
        await listener.close()


async def test_a_database_that_never_answers_only_costs_the_hints() -> None:
    signals = PostgresSignals("postgresql://nobody@127.0.0.1:1/none", timeout=0.5)
    called: list[int] = []
    signals.subscribe("node_work", lambda: called.append(1))
    await signals.start()
    try:
        await signals.notify("node_work")
        assert signals.sent == 0 and called == []
    finally:
        await signals.close()


async def test_in_process_signals_wake_by_topic() -> None:
    signals = InProcessSignals()
    seen: list[str] = []
    signals.subscribe("a", lambda: seen.append("a"))
    signals.subscribe("b", lambda: seen.append("b"))
    await signals.notify("a")
    await signals.notify("c")
    assert seen == ["a"] and signals.sent == 2
