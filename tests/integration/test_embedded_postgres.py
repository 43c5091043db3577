"""The embedded PostgreSQL: start, connect, stop, restart on the same data directory."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from adapters.postgres.connect import plain_url
from adapters.postgres.embedded import EmbeddedPostgres, EmbeddedPostgresError

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not tmp_path: as root the server runs as another user, who cannot enter pytest's
    # 0700 base directory. A directory directly in /tmp is reachable.
    path = Path(tempfile.mkdtemp(prefix="tuneplane-embedded-")) / "pg"
    try:
        yield path
    finally:
        EmbeddedPostgres(path).stop()
        shutil.rmtree(path.parent, ignore_errors=True)


async def _query(url: str, sql: str) -> object:
    conn = await asyncpg.connect(plain_url(url), timeout=5)
    try:
        if ";" in sql:
            return await conn.execute(sql)
        return await conn.fetchval(sql)
    finally:
        await conn.close()


async def test_start_connect_stop_restart(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir)
    url = server.start()
    assert url.startswith("postgresql+asyncpg://postgres:")
    assert "@127.0.0.1:" in url and url.endswith("/tuneplane")
    assert await _query(url, "SELECT current_database()") == "tuneplane"
    await _query(url, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
    # checkpoints by time, not every GB of WAL (docs/persistence.md, "Checkpoints")
    assert await _query(url, "SHOW max_wal_size") == "4GB"
    assert await _query(url, "SHOW checkpoint_timeout") == "15min"
    if os.geteuid() == 0:
        assert (data_dir / "pgdata").stat().st_uid != 0, "the server must not run as root"

    assert server.start() == url, "start() is idempotent"
    assert EmbeddedPostgres(data_dir).start() == url, "a second handle adopts the server"

    server.stop()
    server.stop()  # idempotent
    assert not server.is_running()
    with pytest.raises(OSError):
        await _query(url, "SELECT 1")

    again = EmbeddedPostgres(data_dir)
    assert again.start() == url, "a restart keeps the port (and the password)"
    assert await _query(url, "SELECT v FROM kept") == 42
    again.stop()


async def test_a_stale_pid_file_does_not_block_a_start(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir, durable=False)
    server.start()
    server.stop()
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    # As after a crash and a container restart: the pid now names some other live process.
    pid_file.write_text(f"{os.getpid()}\n{data_dir / 'pgdata'}\n0\n{server.port}\n\n\n\n")
    url = server.start()
    assert await _query(url, "SELECT 1") == 1


def test_a_taken_port_fails_with_the_server_log(data_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        server = EmbeddedPostgres(data_dir, port=port, durable=False)
        with pytest.raises(EmbeddedPostgresError) as err:
            server.start()
    assert "Address already in use" in err.value.message
    assert str(data_dir / "server.log") in err.value.message
    assert "TUNEPLANE_DATABASE_URL" in err.value.fix


def test_url_needs_a_start(data_dir: Path) -> None:
    with pytest.raises(EmbeddedPostgresError):
        EmbeddedPostgres(data_dir).url()


def test_database_names_are_checked(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="database name"):
        EmbeddedPostgres(data_dir, database='x"; DROP')


async def test_a_state_directory_too_deep_for_a_unix_socket_still_starts(data_dir: Path) -> None:
    deep = data_dir / ("d" * 60) / ("e" * 60)  # its run/ socket would pass 107 bytes
    server = EmbeddedPostgres(deep)
    try:
        url = server.start()
        assert await _query(url, "SELECT 1") == 1
        assert not server.socket_dir.is_relative_to(deep)  # a directory of its own in /tmp
        assert (server.socket_dir.stat().st_mode & 0o077) == 0
    finally:
        server.stop()
    planted = server.socket_dir
    shutil.rmtree(planted)
    planted.symlink_to(data_dir)  # another user's link where its socket directory goes
    try:
        with pytest.raises(Exception, match="is not this server's own"):
            EmbeddedPostgres(deep).start()
    finally:
        planted.unlink()
