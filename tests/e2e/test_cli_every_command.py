"""Every `tp` command, run for real (issue 18, defence B).

``ROWS`` is one table: for each command, arguments that succeed and arguments that must fail
with a clear error, with the exit code each must give. The list of commands comes from the CLI
itself (``commands()`` walks the cyclopts app), so a command without a success row and a failure
row fails ``test_every_command_has_a_row`` (a fast unit test): adding a command means adding its
rows here.

``test_every_command_for_real`` runs the rows in order, each as its own `tp` subprocess (the
installed console script, as an operator types it: the real argument parsing, the real HTTP
client, the process's exit code and its whole output) against one live system shared by the
table: `tp serve` on PostgreSQL from the fixtures, the node control and telemetry gateways, two
node daemons with a shared directory, and the test's container engine for the `local` pool.
Subprocesses rather than in-process calls: a crash at import, in argument parsing or in exit
handling shows only there, and tracebacks are what the test looks for. Every row checks the exit
code, that stdout+stderr hold no "Traceback", that a failing row says "error", that no fix is
printed twice, and the text the row expects. All rows run even if one fails; the failure lists
each bad row with its output.

Rows use ``{name}`` placeholders filled from ``Live`` (URLs, paths, ports) and from what earlier
rows captured (``capture``: a regex on their output, e.g. the job id). Long-running commands
(`tp up`, `tp serve`, `tp gateway …`, `tp node run`, `tp collector`) get `--help` and bad
arguments here; their real starts are the fixture's own processes (or, for `tp up`,
tests/e2e/test_up.py), as each row's ``note`` says.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fixtures.nodes import NodeCluster
from tests.fixtures.server import TP
from tests.support.webhook_receiver import receiver

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "docs" / "examples" / "plugins" / "exact-match"
SCENARIO = ROOT / "deploy" / "sim" / "small.toml"
DIGEST = "sha256:" + "ab" * 32


@dataclass(frozen=True)
class Row:
    command: str  # the command path, e.g. "job status"
    args: tuple[str, ...] = ()  # after the path; "{name}" placeholders
    code: int = 0  # the exit code it must give
    out: str = ""  # text stdout+stderr must contain ("{name}" placeholders)
    capture: dict[str, str] = field(default_factory=dict)  # name → regex (group 1) on output
    env: dict[str, str] = field(default_factory=dict)  # extra environment ("{name}" too)
    note: str = ""  # why the row is what it is
    timeout: float = 60
    anytime: bool = False  # uses and changes nothing other rows do: runs beside them


def ok(command: str, *args: str, **kw: object) -> Row:
    return Row(command, args, 0, **kw)  # type: ignore[arg-type]


def bad(code: int, command: str, *args: str, **kw: object) -> Row:
    assert code != 0
    return Row(command, args, code, **kw)  # type: ignore[arg-type]


LONG = "long-running: --help here; the fixture's own processes are its real start"
NO_LOGIN = {"TUNEPLANE_CONFIG_DIR": "{tmp}/no-login"}
CAROL = {"TUNEPLANE_SERVER": "{url}", "TUNEPLANE_TOKEN": "{carol_secret}"}

# fmt: off
ROWS: list[Row] = [
    # -- account -----------------------------------------------------------------------------
    bad(2, "login", "--server", "ftp://x", "--token", "t", out="not an http(s) URL"),
    bad(5, "login", "--server", "{url}", "--token", "tp_bogus", out="unknown, expired or revoked"),
    bad(6, "login", "--server", "http://127.0.0.1:1", "--token", "t", out="check that the server"),
    ok("login", "--server", "{url}", "--token", "{token}", out="as admin (admin)"),
    ok("whoami", out="admin (admin) on {url}"),
    bad(5, "whoami", env={"TUNEPLANE_TOKEN": "tp_bogus"}, out="unknown, expired or revoked"),
    bad(5, "job ls", env=NO_LOGIN, out="not logged in", note="any API command, not logged in"),
    # -- workspace and experiments -----------------------------------------------------------
    ok("init", "{ws}", out="initialised"),
    bad(2, "init", "/dev/null/ws", out="cannot create the workspace", note="was a traceback"),
    ok("new", "hello", "--method", "custom/custom", out="hello"),
    bad(2, "new", "hello", "--method", "custom/custom", out="exists"),
    bad(2, "new", "other", "--method", "no/such", out="unknown method"),
    ok("validate", "hello", out="ok: hello"),
    bad(2, "validate", "nope", out="nope"),
    ok("methods", out="custom/custom"),
    ok("methods", "custom/custom", "--json", out='"name"'),
    bad(2, "methods", "no/such", out="unknown method"),
    bad(2, "methods", "", out="unknown method", note="crashed: an empty name listed them all"),
    ok("profiles", out="cpu:N"),
    bad(2, "profiles", "--bogus", out="--bogus"),
    ok("recipe upgrade", "hello"),
    bad(2, "recipe upgrade", "nope", out="nope"),
    # -- runtimes ----------------------------------------------------------------------------
    ok("runtime ls", out="busybox"),
    bad(2, "runtime ls", "extra", out="extra"),
    ok("runtime add", "pinned", "--image", "registry.example/x:1", "--digest", DIGEST,
       out="runtime pinned created"),
    bad(2, "runtime add", "nodigest", "--image", "registry.example/x:1", out="digest"),
    bad(4, "runtime add", "busybox", "--image", "x", "--digest", DIGEST, out="built in"),
    ok("runtime build", "busybox", timeout=300,
       note="the image exists (the fixtures built it): checked, not rebuilt"),
    bad(2, "runtime build", "nosuch", out="no local recipe"),
    # -- submitting and jobs -----------------------------------------------------------------
    ok("submit", "hello", "--profile", "local/cpu:1", "--set",
       'command=echo every-command; echo kept > "$TUNEPLANE_OUTPUT_DIR/out.txt"',
       "--retry", "2", "--preview", out="retry      2 attempts",
       capture={"preview": r"tp submit --commit (\S+\.json)"}),
    bad(2, "submit", "hello", "--profile", "local/cpu:999", "--yes", out="error"),
    bad(2, "submit", "hello", "--profile", "local/cpu:1", "--retry", "0", "--yes",
        out="--retry 0"),
    bad(2, "submit", "--commit", "{tmp}/nope.json", out="nope.json"),
    bad(2, "submit", "--commit", "{tmp}", out="cannot read"),
    ok("submit", "--commit", "{preview}", "--follow", out="every-command",
       capture={"job": r"(job-[0-9a-f]+)"}, timeout=180),
    ok("submit", "--commit", "latest", out="(already submitted)",
       note="the workspace's newest submission file: a glob broke once two matched"),
    bad(2, "submit", "hello", "--profile", "local/cpu1", "--yes", out="did you mean local/cpu:1?",
        note='was "no pool of cpu1 GPUs"'),
    ok("submit", "hello", "--profile", "local/cpu:1", "--set", "command=sleep 300", "--yes",
       "--wait", capture={"long": r"(job-[0-9a-f]+)"}, timeout=180),
    ok("job ls", out="{long}"),
    ok("job ls", "--search", "{long}", out="{long}"),
    bad(2, "job ls", "--search", "x" * 201, out="length <= 200",
        note="the API bounds q= (200 characters)"),
    bad(2, "job ls", "--state", "bogus", out="bogus"),
    bad(2, "job ls", "--limit", "0", out="--limit 0 lists nothing"),
    bad(2, "job ls", "--limit", "-1", out="give --limit 1 or more"),
    ok("job status", "{job}", out="succeeded"),
    ok("job status", "{job}", "--json", capture={"attempt": r'"id": "(att-[0-9a-f]+)"'}),
    bad(3, "job status", "job-nope", out="job-nope"),
    bad(2, "job status", "", out="empty name", note="crashed: GET /v1/jobs/ is the list"),
    ok("job events", "{job}", out="committed"),
    bad(3, "job events", "job-nope", out="job-nope"),
    ok("job logs", "{job}", out="every-command"),
    bad(3, "job logs", "job-nope", out="job-nope"),
    ok("job logs", "{job}", "--member", "0", out="every-command"),
    bad(3, "job logs", "{job}", "--member", "1", out="no member 1: its members are 0"),
    bad(2, "job logs", "{job}", "--member", "-1", out="--member must be 0 or more"),
    bad(2, "job logs", "{job}", "--member", "x", out="--member"),
    ok("job why", "{job}", out="it succeeded: its member of attempt 1 exited with code 0",
       note='was "is succeeded"'),
    bad(3, "job why", "job-nope", out="job-nope"),
    ok("job metrics", "{job}", out="collects no metrics"),
    bad(3, "job metrics", "job-nope", out="job-nope"),
    ok("job metrics", "{job}", "--width", "60", out="collects no metrics"),
    bad(2, "job metrics", "{job}", "--width", "0", out="--width 0 is out of range"),
    ok("job metrics", "{job}", "--raw", out="no series for job {job}",
       note="its series and pages: tests/e2e/test_telemetry_e2e.py (a node job with metrics)"),
    ok("job metrics", "{job}", "--raw", "--json", out="[]"),
    bad(3, "job metrics", "{job}", "--raw", "--tag", "nope", out="no series 'nope'"),
    bad(2, "job metrics", "{job}", "--raw", "--tag", "a", "--tag", "b", out="one metric"),
    bad(2, "job metrics", "{job}", "--raw", "--limit", "0", out="--limit 0 is out of range"),
    bad(2, "job metrics", "{job}", "--raw", "--member", "-1", out="--member -1 is out of range"),
    bad(2, "job metrics", "{job}", "--attempt", "1", out="belong to --raw"),
    bad(4, "job stop", "{job}", out="it has already ended, there is nothing to stop",
        note='said "stop requested" and exited 0'),
    ok("job stop", "{long}", "--wait", timeout=120),
    ok("job stop", "{long}", out="already stopped", note="stopping is idempotent"),
    bad(3, "job stop", "job-nope", out="job-nope"),
    ok("artifacts ls", "{job}"),
    bad(3, "artifacts ls", "job-nope", out="job-nope"),
    ok("artifacts verify", "{job}"),
    bad(3, "artifacts verify", "job-nope", out="job-nope"),
    ok("artifacts get", "{job}", "out.txt", "-o", "{tmp}/out.txt", out="sha256 ",
       note="the file the job wrote, checked against its manifest"),
    bad(4, "artifacts get", "{job}", "out.txt", "-o", "{tmp}/out.txt", out="--force",
        note="never overwrites a file unasked"),
    bad(3, "artifacts get", "{job}", "nope.txt", "-o", "{tmp}/nope.txt", out="nope.txt"),
    bad(2, "artifacts get", "{job}", "../etc/passwd", "--attempt", "1", "-o", "{tmp}/x",
        out="part"),
    # -- plugins -----------------------------------------------------------------------------
    ok("plugin publish", str(PLUGIN), out="exact-match"),
    bad(2, "plugin publish", "{tmp}/empty", out="plugin.toml"),
    ok("plugin ls", out="exact-match"),
    bad(2, "plugin ls", "--group", "bogus", out="bogus"),
    ok("plugin info", "exact-match", out="1.0.0"),
    bad(3, "plugin info", "nope", out="nope"),
    ok("plugin install", "exact-match@1.0.0", "hello", out="exact-match"),
    bad(3, "plugin install", "nope@1.0.0", "hello", out="nope"),
    ok("plugin disable", "exact-match@1.0.0", "--reason", "table test"),
    bad(2, "plugin disable", "exact-match", "--reason", "x", out="VERSION"),
    ok("plugin enable", "exact-match@1.0.0"),
    bad(3, "plugin enable", "nope@1.0.0", out="nope"),
    # -- fleet -------------------------------------------------------------------------------
    ok("fleet ls", out="n1"),
    bad(2, "fleet ls", "--bogus", out="--bogus"),
    ok("fleet apply", "{fleet_file}", out="table"),
    bad(2, "fleet apply", "{bad_fleet_file}", out="pools[0]"),
    ok("fleet pool add", "spare", "--backend", "node", "--cpus", "1", "--memory-mb", "512"),
    bad(2, "fleet pool add", "spare2", "--backend", "nosuch", "--cpus", "1", "--memory-mb", "1",
        out="nosuch"),
    bad(2, "fleet pool add", "spare2", "--backend", "node", "--cpus", "nan", "--memory-mb", "1",
        out="not finite", note="crashed: NaN is not JSON"),
    ok("fleet pool set", "spare", "--cpus", "2"),
    bad(3, "fleet pool set", "nope", "--cpus", "2", out="nope"),
    ok("fleet node add", "x1", "--pool", "spare"),
    bad(3, "fleet node add", "x2", "--pool", "nope", out="nope"),
    ok("fleet node set", "x1", "--pool", "table"),
    bad(3, "fleet node set", "x1", "--pool", "nope", out="nope"),
    ok("fleet node cordon", "x1"),
    bad(3, "fleet node cordon", "nope", out="nope"),
    ok("fleet node drain", "x1"),
    bad(3, "fleet node drain", "nope", out="nope"),
    ok("fleet node uncordon", "x1"),
    bad(3, "fleet node uncordon", "nope", out="nope"),
    ok("fleet check", "nodes", "--timeout", "10", out="passed", timeout=180,
       note="a member on each of n1 and n2: peers and the shared directory"),
    ok("fleet check", "nodes", "--last", out="passed"),
    bad(3, "fleet check", "nope", out="nope"),
    bad(2, "fleet check", "nodes", "--timeout", "1", out="timeout"),
    # -- queues ------------------------------------------------------------------------------
    ok("queue ls", out="default"),
    bad(2, "queue ls", "--bogus", out="--bogus"),
    ok("queue add", "night", "--team", "default", "--job-quota", "2"),
    bad(3, "queue add", "day", "--team", "nope", out="nope"),
    ok("queue set", "night", "--priority", "5", "--job-quota", "none"),
    ok("queue set", "night", "--max-attempts", "3", out="attempts 3"),
    bad(2, "queue set", "night", "--max-attempts", "0", out="--max-attempts"),
    bad(2, "queue set", "night", "--priority", "5000", out="priority"),
    # -- webhooks (a receiver on loopback: the fixture's, answering 200) ---------------------
    ok("webhook add", "{hook}/ok", "--queue", "night", "--state", "failed",
       out="secret (shown once", capture={"webhook": r"webhook (wh-[^:\s]+):"}),
    bad(2, "webhook add", "http://hooks.example.org/x", out="plain http"),
    bad(2, "webhook add", "https://169.254.169.254/latest/meta-data/", out="link-local"),
    bad(2, "webhook add", "{hook}/ok", "--team", "default", "--queue", "night",
        out="one user, team or queue"),
    bad(2, "webhook add", "{hook}/ok", "--state", "runing", out="not a job state"),
    ok("webhook ls", out="{webhook}"),
    bad(2, "webhook ls", "--bogus", out="--bogus"),
    # -- the key webhook secrets are sealed under (the servers' key file: STATE/secrets.key)
    ok("admin secrets keygen", out="=", anytime=True),
    bad(2, "admin secrets keygen", "--bogus", out="--bogus", anytime=True),
    ok("admin secrets reseal", env={"TUNEPLANE_SECRETS_KEY_FILE": "{server_key}"},
       out="resealed 1 webhook secrets under the newest key"),
    bad(2, "admin secrets reseal", env={"TUNEPLANE_SECRETS_KEY_FILE": "{tmp}/no-such-key"},
        out="no secrets key file", anytime=True),
    bad(2, "serve", out="webhook secrets in the database are sealed under a key",
        note="no key file (STATE/secrets.key) once a secret is sealed: refused, none made"),
    ok("webhook test", "{webhook}", out="answered 200", note="signed as before the reseal"),
    bad(3, "webhook test", "wh-nope", out="no webhook"),
    ok("webhook rm", "{webhook}", out="removed"),
    bad(3, "webhook rm", "{webhook}", out="no webhook"),
    # -- administration ----------------------------------------------------------------------
    ok("admin team add", "research"),
    bad(2, "admin team add", "Bad Name", out="expected a name: 1-63 characters"),
    ok("admin team ls", out="research"),
    bad(2, "admin team ls", "--bogus", out="--bogus"),
    ok("admin user add", "carol", "--role", "member", "--team", "research"),
    bad(2, "admin user add", "dave", "--role", "god", out="unknown role"),
    ok("admin user ls", out="carol"),
    bad(2, "admin user ls", "--bogus", out="--bogus"),
    ok("admin user set", "carol", "--role", "viewer"),
    bad(3, "admin user set", "nope", "--role", "viewer", out="nope"),
    ok("admin token create", "carol", out="tp_"),
    bad(3, "admin token create", "nope", out="nope"),
    # -- tokens (issue 24): carol's own, then revoked by herself; the admin's is the last one
    ok("admin token create", "carol", "--label", "table", "--expires", "30d",
       capture={"carol_secret": r"(tp_[A-Za-z0-9_-]+)", "carol_tok": r"token (tok-\S+) for carol"}),
    bad(2, "admin token create", "carol", "--expires", "10000y", out="past the limit of 5 years",
        note="other bad values: tests/unit/test_cli_tokens.py"),
    ok("admin token ls", "carol", "--json", out='"label": "table"'),
    bad(2, "admin token ls", "--bogus", out="--bogus"),
    ok("token ls", env=CAROL, out="{carol_tok}"),
    bad(3, "token revoke", "tok-first-admin", env=CAROL, out="you have no token tok-first-admin",
        note="another's token: answered as one that does not exist"),
    bad(4, "admin token revoke", "tok-first-admin", out="last token that can act as an admin"),
    ok("token revoke", "{carol_tok}", env=CAROL, out="that is the token this command used"),
    bad(5, "token ls", env=CAROL, out="unknown, expired or revoked",
        note="the very next request with it is refused"),
    ok("admin token revoke", "{carol_tok}", out="already revoked"),
    ok("admin recover", "--label", "table", "--expires", "1d", out="admin access recovered",
       capture={"recovered": r"(tp_[A-Za-z0-9_-]{20,})"},
       note="on the live server's database (the table's TUNEPLANE_DATABASE_URL), no token used"),
    ok("whoami", env={"TUNEPLANE_SERVER": "{url}", "TUNEPLANE_TOKEN": "{recovered}"},
       out="admin (admin)",
       note="the recovered token works"),
    bad(2, "admin recover", "--user", "carol", out="carol has role viewer, not admin"),
    ok("admin bootstrap", "--state-dir", "{tmp}/boot", env={"TUNEPLANE_DATABASE_URL": "{spare_db}"},
       out="created user admin and its token", anytime=True,
       note="an empty database of its own; `tp serve` bootstraps too (test_first_start.py)"),
    bad(4, "admin bootstrap", "--state-dir", "{tmp}/boot",
        env={"TUNEPLANE_DATABASE_URL": "{spare_db}"}, out="has an admin already", anytime=True),
    ok("admin blobs collect", "--dry-run", out="would delete"),
    bad(2, "admin blobs collect", "--grace-hours", "nan", out="out of range",
        note="crashed: NaN hours to seconds"),
    ok("admin reservation release", "{attempt}", "--reason", "table test",
       out="nothing to release"),
    bad(3, "admin reservation release", "att-nope", "--reason", "x", out="att-nope"),
    ok("admin node lost", "x1", "--reason", "table test", out="declared lost"),
    bad(3, "admin node lost", "nope", "--reason", "x", out="nope"),
    # -- node daemons ------------------------------------------------------------------------
    ok("node token create", "--pool", "nodes", "--name", "n9", out="tp node run"),
    bad(3, "node token create", "--pool", "nope", out="nope"),
    bad(2, "node token create", "--pool", "nodes", "--ttl", "10y", out="duration"),
    ok("node ls", out="n1"),
    ok("node ls", "--json", out='"node": "n2"'),
    bad(5, "node ls", env=NO_LOGIN, out="not logged in"),
    ok("node events", "n1", out="no security events for node n1"),
    ok("node events", "n1", "--json", "--limit", "5", out="[]"),
    bad(3, "node events", "nope", out="nope"),
    ok("node fence", "n2", "--reason", "table test", out="fenced"),
    bad(3, "node fence", "nope", "--reason", "x", out="nope"),
    ok("node run", "--help", out="--join-token", note=LONG + " (n1 and n2)", anytime=True),
    bad(1, "node run", "--server", "nope", "--ca", "{ca}", out="not HOST:PORT", anytime=True),
    bad(5, "node run", "--server", "127.0.0.1:{gateway_port}", "--ca", "{ca}",
        "--state-dir", "{tmp}/n9", "--name", "n9", "--join-token", "tp_bogus",
        out="enrollment refused", note="a refusal through the real gateway: its fix once; "
        "exit 5, refused for good (a new join token is needed)", anytime=True),
    bad(1, "node run", "--server", "127.0.0.1:{gateway_port}", "--ca", "{ca}",
        "--state-dir", "{tmp}/n10", "--join-token", "tp_bogus", "--cpus", "-1",
        out="not a capacity", note="was refused by the gateway: 'upgrade the node daemon'",
        anytime=True),
    bad(1, "node run", "--server", "127.0.0.1:1", "--ca", "{ca}", "--state-dir", "{tmp}/n11",
        "--join-token", "tp_bogus", out="that the gateway runs", note="had no fix", anytime=True),
    ok("node install", "--systemd", "--server", "gw.example:8471", "--ca", "{ca}",
       "--state-dir", "{tmp}/installed", "--unit-dir", "{tmp}", "--no-enable",
       out="tuneplane-collector.service", note="units written; their validity: "
       "tests/integration/test_node_install.py", anytime=True),
    bad(2, "node install", "--systemd", "--server", "gw.example:8471", "--ca", "{ca}",
        "--state-dir", "relative/dir", "--unit-dir", "{tmp}", out="is relative", anytime=True),
    bad(1, "node run", "--server", "127.0.0.1:{gateway_port}", "--ca", "{ca}",
        "--state-dir", "{tmp}/n12", "--metrics-port", "0", out="--metrics-port 0 is not a port",
        note="refused before enrolling", anytime=True),
    ok("gateway node", "--help", out="--port", note=LONG, anytime=True),
    bad(1, "gateway node", env={"TUNEPLANE_DATABASE_URL": ""}, out="no database configured",
        note="was a traceback from the container's resources", anytime=True),
    bad(1, "gateway node", "--host", "256.1.1.1", out="cannot listen",
        note="was a traceback (the server never started was closed)", anytime=True),
    bad(1, "gateway node", "--metrics-port", "70000", out="--metrics-port 70000 is not a port",
        anytime=True),
    bad(2, "gateway node", "--metrics-port", "abc", out="--metrics-port", anytime=True),
    ok("gateway telemetry", "--help", out="--port", note=LONG, anytime=True),
    bad(1, "gateway telemetry", env={"TUNEPLANE_DATABASE_URL": ""},
        out="no database configured", anytime=True),
    bad(1, "gateway telemetry", "--port", "70000", out="out of range", note="hung", anytime=True),
    bad(1, "gateway telemetry", "--metrics-port", "{gateway_port}", out="Address already in use",
        note="the node gateway listens there", anytime=True),
    ok("collector", "--help", out="--spool", note=LONG + " (children of n1 and n2)", anytime=True),
    bad(2, "collector", "--spool", "{tmp}/spool", "--members", "{tmp}/members",
        "--gateway", "nope", "--ca", "{ca}", out="not HOST:PORT", anytime=True),
    bad(2, "collector", "--spool", "{tmp}/spool", "--members", "{tmp}/members",
        "--gateway", "127.0.0.1:1", "--ca", "{ca}", "--max-spool-mb", "0", out="too small",
        anytime=True),
    bad(2, "collector", "--spool", "{tmp}/spool-m", "--members", "{tmp}/empty",
        "--gateway", "127.0.0.1:1", "--ca", "{ca}", "--metrics-port", "-1",
        out="--metrics-port -1 is not a port", anytime=True),
    # -- servers and the simulator -----------------------------------------------------------
    ok("serve", "--help", out="--no-supervisor", note=LONG + " (the API server)", anytime=True),
    bad(2, "serve", env={"TUNEPLANE_DATABASE_URL": ""}, out="no database configured",
        note="was a traceback from the container's resources", anytime=True),
    bad(6, "serve", env={"TUNEPLANE_DATABASE_URL": "postgresql://tp@127.0.0.1:1/tp"},
        out="cannot reach the database", note="was a traceback", anytime=True),
    bad(1, "serve", env={"TUNEPLANE_ADMISSION_STORE_GROUPS": "9"}, out="from 1 to 8",
        anytime=True),
    bad(1, "serve", env={"TUNEPLANE_ADMISSION_STORE_GROUPS": "5", "TUNEPLANE_DB_POOL_SIZE": "5"},
        out="leaves no connection of TUNEPLANE_DB_POOL_SIZE=5", anytime=True),
    bad(2, "serve", "--port", "70000", out="out of range", note="hung", anytime=True),
    bad(2, "serve", "--host", "256.1.1.1", out="cannot listen", note="exit 3, uvicorn's log",
        anytime=True),
    ok("up", "--help", out="--state-dir",
       note="long-running: --help here; tests/e2e/test_up.py starts it for real", anytime=True),
    bad(2, "up", "--state-dir", "/dev/null/state", out="cannot use the state directory",
        note="was a traceback", anytime=True),
    bad(2, "up", "--state-dir", "{tmp}/up", "--port", "70000", out="out of range", note="hung",
        anytime=True),
    ok("up", "--help", out="TUNEPLANE_PG_PORT", note="says how to set every listener's port",
       anytime=True),
    bad(2, "up", "--state-dir", "{tmp}/up", "--pg-port", "0", out="--pg-port or TUNEPLANE_PG_PORT",
        anytime=True),
    # -- settings (docs/operations.md#settings) ----------------------------------------------
    ok("config show", "--process", "api", env={"TUNEPLANE_HTTP_PORT": "8999"},
       out="TUNEPLANE_HTTP_PORT", anytime=True),
    ok("config show", "--json", env={"TUNEPLANE_DATABASE_URL": "postgresql://u:pw9@h/db"},
       out='"value": "postgresql://u:****@h/db"', note="the password masked", anytime=True),
    bad(2, "config show", "--process", "bogus", out="node-gateway", anytime=True),
    bad(1, "config show", env={"TUNEPLANE_TELEMETRY_GATEWAY_PORT": "65536"},
        out="TUNEPLANE_TELEMETRY_GATEWAY_PORT='65536' is not a whole number from 1 to 65535",
        note="a bad value stops it as it stops the process", anytime=True),
    ok("sim", "--scenario", str(SCENARIO), "--steps", "20", out="trace", anytime=True),
    bad(2, "sim", "--scenario", "{tmp}/nope.toml", out="does not exist", anytime=True),
    # -- last: logging out -------------------------------------------------------------------
    ok("logout", out="removed"),
    bad(2, "logout", "extra", out="extra"),
]
# fmt: on


def commands() -> list[str]:
    """Every command of `tp`, as the command paths the CLI itself knows."""
    from entrypoints.cli.main import app

    def walk(node: object, path: list[str]) -> Iterator[str]:
        for name in node:  # type: ignore[attr-defined]
            if name.startswith("-"):
                continue
            sub = node[name]  # type: ignore[index]
            children = [n for n in sub if not n.startswith("-")]
            if children:
                yield from walk(sub, [*path, name])
            else:
                yield " ".join([*path, name])

    return sorted(set(walk(app, [])))


@pytest.mark.unit
def test_every_command_has_a_row() -> None:
    """A new command cannot escape the table: each needs a row that succeeds and one that
    must fail; and every row names a real command."""
    known = commands()
    assert len(known) > 50, known
    succeed = {r.command for r in ROWS if r.code == 0}
    fail = {r.command for r in ROWS if r.code != 0}
    missing = [c for c in known if c not in succeed or c not in fail]
    assert not missing, f"add rows for these commands to ROWS: {missing}"
    assert not {r.command for r in ROWS} - set(known), "rows for commands tp does not have"


# ---- running the table ------------------------------------------------------------------------


@dataclass
class Live:
    cluster: NodeCluster
    tmp: Path
    values: dict[str, str] = field(default_factory=dict)

    def fill(self, text: str) -> str:
        return text.format_map(self.values)


@pytest.fixture
async def live(
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]], tmp_path: Path, spare_pg_url: str
) -> AsyncIterator[Live]:
    cluster = await node_cluster_factory(nodes=0, TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK="on")
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("n1", "n2"):
        cluster.start_daemon(name, extra=["--shared-dir", str(shared)])
    await asyncio.to_thread(cluster.wait_connected, ["n1", "n2"])
    (tmp_path / "empty").mkdir()
    fleet_file, bad_fleet = tmp_path / "fleet.toml", tmp_path / "bad-fleet.toml"
    fleet_file.write_text(
        '[[pools]]\nname = "table"\nbackend = "node"\ncpus_per_node = 1\n'
        "memory_mb_per_node = 512\nnodes = 0\n"
    )
    bad_fleet.write_text('[[pools]]\nname = "x"\nbackend = "node"\ncpus_per_node = -1\n')
    live = Live(cluster, tmp_path)
    live.values.update(
        url=cluster.servers.url,
        token=cluster.servers.token,
        tmp=str(tmp_path),
        ws=str(tmp_path / "ws"),
        ca=str(cluster.ca),
        gateway_port=str(cluster.gateway_port),
        fleet_file=str(fleet_file),
        bad_fleet_file=str(bad_fleet),
        spare_db=spare_pg_url,
        server_key=str(cluster.servers.state_dir / "secrets.key"),
    )
    with receiver() as hooks:  # `tp webhook`'s receiver
        live.values["hook"] = hooks.url
        yield live


def check(row: Row, proc: subprocess.CompletedProcess[str], live: Live) -> list[str]:
    """What is wrong with the row's run ([] when nothing)."""
    text = proc.stdout + proc.stderr
    problems = []
    if proc.returncode != row.code:
        problems.append(f"exit {proc.returncode}, expected {row.code}")
    if "Traceback" in text:
        problems.append("printed a traceback")
    if row.code and "error" not in text.lower():
        problems.append("failed without saying error")
    for fix in re.findall(r"^fix: (.+)$", text, re.M):
        if text.count(fix) > 1:
            problems.append(f"printed its fix more than once: {fix!r}")
    if row.out and live.fill(row.out) not in text:
        problems.append(f"no {live.fill(row.out)!r} in its output")
    for name, pattern in row.capture.items():
        if m := re.search(pattern, text):
            live.values[name] = m.group(1)
        else:
            problems.append(f"nothing matched {pattern!r} for {{{name}}}")
    return problems


def run_row(row: Row, live: Live, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [TP, *row.command.split(), *(live.fill(a) for a in row.args)]
    env = dict(env, **{k: live.fill(v) for k, v in row.env.items()})
    cwd = Path(live.values["ws"])
    return subprocess.run(
        argv,
        cwd=cwd if cwd.is_dir() else live.tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=row.timeout,
    )


def attempt(row: Row, live: Live, env: dict[str, str]) -> tuple[float, str | None]:
    """Run one row: its time, and what went wrong (None: nothing)."""
    shown = " ".join(["tp", row.command, *row.args])
    started = time.monotonic()
    try:
        proc = run_row(row, live, env)
    except KeyError as exc:  # a placeholder an earlier (failed) row should have captured
        return 0.0, f"{shown}: no value for {exc}"
    except subprocess.TimeoutExpired:
        return row.timeout, f"{shown}: still running after {row.timeout:.0f} s"
    took = time.monotonic() - started
    if problems := check(row, proc, live):
        return took, (
            f"{shown}: {'; '.join(problems)}\n--- stdout\n{proc.stdout[-2000:]}"
            f"\n--- stderr\n{proc.stderr[-2000:]}"
        )
    return took, None


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_command_for_real(live: Live) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        TUNEPLANE_CONFIG_DIR=str(live.tmp / "config"),
        TUNEPLANE_DATABASE_URL=live.cluster.servers.env["TUNEPLANE_DATABASE_URL"],
        TUNEPLANE_STATE_DIR=str(live.tmp / "state-cli"),
        DOCKER_HOST=live.cluster.servers.env["DOCKER_HOST"],
    )
    results: dict[int, tuple[float, str | None]] = {}
    # rows that touch nothing shared (mostly the server processes' refusals, slow to import)
    # run on a second worker beside the ordered ones: the two CPUs both busy
    with ThreadPoolExecutor(max_workers=1) as beside:
        aside = {i: beside.submit(attempt, r, live, env) for i, r in enumerate(ROWS) if r.anytime}
        for i, row in enumerate(ROWS):
            if not row.anytime:
                results[i] = attempt(row, live, env)
        results.update((i, future.result()) for i, future in aside.items())
    failures = [results[i][1] for i in range(len(ROWS)) if results[i][1] is not None]
    timed = sorted((results[i][0], " ".join([r.command, *r.args])) for i, r in enumerate(ROWS))
    print("slowest rows:", *(f"{t:.1f} s tp {c}" for t, c in reversed(timed[-5:])), sep="\n  ")
    assert not failures, f"{len(failures)} of {len(ROWS)} rows failed:\n\n" + "\n\n".join(
        str(f) for f in failures
    )
