"""Every `tp` command, run for real (issue 18, defence B).

``ROWS`` (tests/e2e/cli_rows.py) is one table: for each command, arguments that succeed and
arguments that must fail with a clear error, with the exit code each must give. The list of
commands comes from the CLI itself (``commands()`` walks the cyclopts app), so a command without
a success row and a failure row fails ``test_every_command_has_a_row`` (a fast unit test):
adding a command means adding its rows there.

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

from tests.e2e.cli_rows import ROWS, Row
from tests.fixtures.nodes import NodeCluster
from tests.fixtures.server import TP
from tests.support.webhook_receiver import receiver


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
