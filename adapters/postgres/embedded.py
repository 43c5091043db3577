"""An embedded PostgreSQL server for ``tp up`` (when no database URL is configured) and tests.

Layout of ``data_dir``::

    pgdata/        the cluster (initdb on first start)
    run/           the server's unix socket directory (mode 0700)
    server.log     the server log (its tail is quoted in every start error)
    password       the superuser password (0600); TCP logins use scram-sha-256
    port           the port of the last start, reused by the next start while it is free

Binaries: those shipped by the ``pgserver`` wheel (PostgreSQL 16), else the Debian server
packages (``/usr/lib/postgresql/*/bin``), else ``TUNEPLANE_PG_BIN``. PostgreSQL refuses to run
as root; as root the server runs as a dedicated system user (``postgres`` when it exists,
otherwise ``tuneplane-pg`` is created), which gets ``data_dir`` and, where it lacks it,
search-only (o+x) permission on the directories above ``data_dir`` and above the binaries.

``start()`` and ``stop()`` are blocking and idempotent; a start on an existing ``data_dir``
reuses the cluster, and a server still running there (from a process that died) is adopted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from adapters.child_env import child_environ
from adapters.postgres.embedded_os import (
    BinariesNotFound,
    ServerUser,
    find_bin_dir,
    free_port,
    port_free,
    run_tool,
    running_postmaster,
    server_user,
)
from domain.errors import Unavailable

log = logging.getLogger(__name__)

SUPERUSER = "postgres"
MAX_SOCKET_PATH = 107  # bytes of a Unix socket's path (sun_path, less its final NUL)
START_TIMEOUT_S = 60
_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,62}$")
_FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")
# a durable server's checkpoints by time, not by WAL: with PostgreSQL's 1 GB of WAL, telemetry at
# 2,000 streams (about 1 GB a minute) forced a checkpoint every 30 s, whose fsyncs stalled the
# ingest's commits for up to a second (docs/persistence.md, "Checkpoints")
_DURABLE_SETTINGS = ("max_wal_size=4GB", "checkpoint_timeout=15min")


START_FIX = (
    "read the server log quoted above; to start over, stop any server using this directory "
    "and delete it, or set TUNEPLANE_DATABASE_URL to use another PostgreSQL"
)


class EmbeddedPostgresError(Unavailable):
    """The embedded server could not be initialised, started or stopped."""


class EmbeddedPostgres:
    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        database: str = "tuneplane",
        durable: bool = True,
        max_connections: int = 200,
        bin_dir: Path | None = None,
        run_as: str | None = None,
    ) -> None:
        """``durable=False`` turns off fsync (tests only: a crash may lose the cluster)."""
        if not _DB_NAME.match(database):
            raise ValueError(f"database name {database!r}: use letters, digits, '_' and '-'")
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self._explicit_port = port is not None
        self.database = database
        self.durable = durable
        self.max_connections = max_connections
        self._explicit_bin = bin_dir  # TUNEPLANE_PG_BIN
        self._run_as = run_as  # TUNEPLANE_PG_USER (when started as root)
        self._bin: Path | None = None
        self._log_mark = 0  # the log's size when our last start began: quote only what follows
        self._user: ServerUser | None = None

    # -- paths -----------------------------------------------------------------------------
    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def socket_dir(self) -> Path:
        """``run/`` in the data directory, unless its socket's path would pass the 107 bytes a
        Unix socket path may have (a deep state directory): then a directory of its own in the
        system's temporary directory, named by the data directory."""
        here = self.data_dir / "run"
        if len(str(here / ".s.PGSQL.65535")) <= MAX_SOCKET_PATH:
            return here
        key = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"tuneplane-pg-{key}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    # -- public API ------------------------------------------------------------------------
    def start(self) -> str:
        """Start (or adopt) the server; return a ``postgresql+asyncpg://`` URL of ``database``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            started = time.monotonic()
            self._prepare()
            pid_port = running_postmaster(self.pgdata)
            if pid_port is not None:
                self.port = pid_port[1]
                log.info("embedded PostgreSQL already running (pid %s)", pid_port[0])
            else:
                self._launch()
            self._wait_ready()
            self._ensure_database()
            log.info(
                "embedded PostgreSQL ready on 127.0.0.1:%s in %.2fs",
                self.port,
                time.monotonic() - started,
            )
            return self.url()

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are disconnected). No-op if stopped."""
        if not self.pgdata.exists():
            return
        with self._locked():
            if running_postmaster(self.pgdata) is None:
                return
            self._pick_tools()
            self._run_server_tool(
                ["pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "-t", "60", "stop"],
                "stop",
            )

    def is_running(self) -> bool:
        return self.pgdata.exists() and running_postmaster(self.pgdata) is not None

    def url(self, database: str | None = None, *, driver: str = "asyncpg") -> str:
        """The URL of ``database`` (default: this server's database); valid once started."""
        if self.port is None:
            raise EmbeddedPostgresError(
                "the embedded PostgreSQL has not been started", fix="call start() first"
            )
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        password = self._password()
        return (
            f"{scheme}://{SUPERUSER}:{password}@127.0.0.1:{self.port}/{database or self.database}"
        )

    # -- steps -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One start/stop at a time per data_dir, across processes."""
        with open(self.data_dir / ".lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _prepare(self) -> None:
        """Pick binaries and user, fix ownership, run initdb once."""
        wanted = self._pick_tools()
        pw_file = self.data_dir / "password"
        if not pw_file.exists():
            pw_file.write_text(secrets.token_urlsafe(24))
            pw_file.chmod(0o600)
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        self._check_socket_dir()
        if self._user is not None:
            self._user.own(self.data_dir, exclude={pw_file, self.data_dir / ".lock"})
            if not self.socket_dir.is_relative_to(self.data_dir):
                self._user.own(self.socket_dir, exclude=set())
        if wanted is None:
            self._initdb(pw_file)

    def _check_socket_dir(self) -> None:
        """A socket directory in the shared temporary directory must be ours: a real directory
        (not a link another user planted), owned by us or the server's user, closed to others."""
        st = self.socket_dir.lstat()
        owners = {os.geteuid()} | ({self._user.uid} if self._user is not None else set())
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in owners or st.st_mode & 0o077:
            raise Unavailable(
                f"the PostgreSQL socket directory {self.socket_dir} is not this server's own "
                "(a link, another user's, or open to others)",
                fix=f"remove {self.socket_dir}, or use a shorter --state-dir",
            )

    def _pick_tools(self) -> str | None:
        """Choose the server user and the binaries matching the cluster's version (if any)."""
        try:
            self._user = server_user(self._run_as)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            raise EmbeddedPostgresError(
                f"cannot pick a user to run PostgreSQL as (it refuses root): {exc}",
                fix="create an unprivileged user and set TUNEPLANE_PG_USER, or run as non-root",
            ) from exc
        version_file = self.pgdata / "PG_VERSION"
        wanted = version_file.read_text().strip() if version_file.exists() else None
        try:
            self._bin = find_bin_dir(wanted, self._explicit_bin)
        except BinariesNotFound as exc:
            raise EmbeddedPostgresError(
                str(exc), fix="install PostgreSQL server binaries or set TUNEPLANE_PG_BIN"
            ) from exc
        if self._user is not None:
            # the binaries may sit in a private checkout (e.g. .venv under a 0700 directory)
            self._user.make_reachable(self._bin.parent)
        return wanted

    def _initdb(self, pw_file: Path) -> None:
        if self.pgdata.exists():
            shutil.rmtree(self.pgdata)  # a half-made cluster from an interrupted initdb
        tmp_pw = self.socket_dir / "initdb-password"
        tmp_pw.write_text(self._password())
        if self._user is not None:
            self._user.own(tmp_pw)
        try:
            fixed = ["--auth-host=scram-sha-256", "--auth-local=trust", "--no-locale", "-EUTF8"]
            nosync = ["--no-sync"] if not self.durable else []
            argv = ["initdb", "-D", str(self.pgdata), "-U", SUPERUSER, f"--pwfile={tmp_pw}"]
            self._run_server_tool([*argv, *fixed, *nosync], "initdb")
        finally:
            tmp_pw.unlink(missing_ok=True)

    def _launch(self) -> None:
        saved = self.data_dir / "port"
        explicit = self._explicit_port
        for attempt in range(3):
            if not explicit:
                previous = int(saved.read_text()) if saved.exists() and not attempt else None
                self.port = previous if previous and port_free(previous) else free_port()
            assert self.port is not None
            saved.write_text(str(self.port))
            self._log_mark = self.log_file.stat().st_size if self.log_file.exists() else 0
            options = [
                "-h 127.0.0.1",
                f"-p {self.port}",
                f"-k {shlex.quote(str(self.socket_dir))}",
                "-c unix_socket_permissions=0700",
                f"-c max_connections={self.max_connections}",
                *(f"-c {s}" for s in (_DURABLE_SETTINGS if self.durable else _FAST_SETTINGS)),
            ]
            try:
                argv = ["pg_ctl", "-D", str(self.pgdata), "-l", str(self.log_file), "-w"]
                wait = ["-t", str(START_TIMEOUT_S)]
                self._run_server_tool([*argv, *wait, "-o", " ".join(options), "start"], "start")
                return
            except EmbeddedPostgresError:
                if explicit or "could not bind" not in self._log_tail() or attempt == 2:
                    raise
                log.warning("port %s was taken; retrying on another port", self.port)

    def _wait_ready(self) -> None:
        """Real health check: pg_isready, then a password login that runs a query."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            ready = self._client(["pg_isready", "-d", "postgres", "-t", "2"], check=False)
            if ready.returncode == 0:
                probe = self._client(["psql", "-d", "postgres", "-tAc", "SELECT 1"], check=False)
                if probe.returncode == 0 and probe.stdout.strip() == "1":
                    return
            if time.monotonic() > deadline:
                raise self._error("did not accept connections", ready.stdout + ready.stderr)
            time.sleep(0.05)

    def _ensure_database(self) -> None:
        query = f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"
        if self._client(["psql", "-d", "postgres", "-tAc", query]).stdout.strip() != "1":
            self._client(["psql", "-d", "postgres", "-c", f'CREATE DATABASE "{self.database}"'])

    # -- process helpers -------------------------------------------------------------------
    def _password(self) -> str:
        try:
            return (self.data_dir / "password").read_text().strip()
        except FileNotFoundError as exc:
            raise EmbeddedPostgresError(
                f"no password file in {self.data_dir}",
                fix="start the embedded PostgreSQL first",
            ) from exc

    def _run_server_tool(self, argv: list[str], what: str) -> None:
        """Run initdb/pg_ctl (as the server user when we are root)."""
        assert self._bin is not None, "_pick_tools() first"
        user_kwargs = self._user.popen_kwargs() if self._user is not None else {}
        try:
            proc = run_tool(self._bin, argv, START_TIMEOUT_S + 30, cwd=self.data_dir, **user_kwargs)
        except subprocess.TimeoutExpired as exc:
            raise self._error(f"{what} timed out", "") from exc
        if proc.returncode != 0:
            raise self._error(f"{what} failed (exit {proc.returncode})", proc.stdout + proc.stderr)

    def _client(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run psql/pg_isready against the server over TCP with the password."""
        assert self._bin is not None, "_pick_tools() first"
        env = child_environ(
            {"PGHOST": "127.0.0.1", "PGPORT": str(self.port), "PGUSER": SUPERUSER}
            | {"PGPASSWORD": self._password(), "PGCONNECT_TIMEOUT": "5"}
        )
        proc = run_tool(self._bin, argv, 30, env=env)
        if check and proc.returncode != 0:
            raise self._error(f"{argv[0]} failed", proc.stdout + proc.stderr)
        return proc

    def _log_tail(self, lines: int = 30) -> str:
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(self._log_mark)
                text = fh.read().decode(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:]) or "(nothing logged)"

    def _error(self, what: str, output: str) -> EmbeddedPostgresError:
        return EmbeddedPostgresError(
            f"embedded PostgreSQL in {self.data_dir}: {what}.\n"
            f"--- command output ---\n{output.strip()}\n"
            f"--- server log ({self.log_file}) since this start ---\n{self._log_tail()}",
            fix=START_FIX,
        )
