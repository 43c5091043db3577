"""The `tp` command line: a client of the HTTP API (docs/http-api.md), plus `tp up`/`tp serve`.

``run(argv)`` returns the exit code (see ``errors`` for the table); ``main()`` exits with it.
Expected failures print ``error:``/``field:``/``fix:`` lines to stderr, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cyclopts import App, CycloptsError, Parameter

from domain.errors import TunePlaneError
from entrypoints.cli import errors, output
from entrypoints.cli.lazy import lazy

# Every top-level command, imported only when it runs (or its own --help is asked for): a `tp`
# process loads the modules of the one command it runs, not those of all of them (a third of the
# start-up). Each entry is (name, "module:object" under entrypoints.cli, the line `tp --help`
# shows); tests/unit/test_cli_lazy.py checks each.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("login", "account:login", "Check a token against a server and store both for later commands."),
    ("logout", "account:logout", "Forget the stored login."),
    ("whoami", "account:whoami", "Show who the stored (or environment) token belongs to."),
    (
        "init",
        "experiments:init",
        "Make DIR a TunePlane workspace (git repo, .gitignore, "
        "tuneplane.toml, README). Idempotent.",
    ),
    (
        "new",
        "experiments:new",
        "Create an experiment directory NAME with experiment.toml and a starter train.sh.",
    ),
    (
        "validate",
        "experiments:validate",
        "Check NAME/experiment.toml: keys, types, name, and params against the method.",
    ),
    ("methods", "catalog:methods", "List methods, or show one method's parameters."),
    (
        "profiles",
        "catalog:profiles",
        "List what --profile accepts: named profiles and each pool's implicit forms.",
    ),
    ("runtime", "runtimes:runtime_app", "Runtime images jobs run in, pinned by digest."),
    (
        "collector",
        "collector:collector",
        "Collect members' metrics into a durable spool and ship them to the telemetry gateway.",
    ),
    (
        "submit",
        "submit:submit",
        "Submit an experiment: --preview (then --commit FILE), or --yes for both in one go.",
    ),
    ("job", "jobs:job_app", "List, inspect, follow and stop jobs."),
    ("artifacts", "artifacts:artifacts_app", "A job's output files and their manifests."),
    ("plugin", "plugins:plugin_app", "Plugins: versioned packages jobs can use."),
    ("recipe", "recipe_lock:recipe_app", "The recipe an experiment is locked to."),
    ("fleet", "fleet:fleet_app", "Pools, nodes and their states; tp fleet apply FILE."),
    ("node", "nodes:node_app", "Node daemons: join tokens, running a daemon, fencing."),
    ("gateway", "nodes:gateway_app", "The gateway processes (node control, telemetry)."),
    ("queue", "queues:queue_app", "Queues: priorities and quotas of each team's jobs."),
    (
        "webhook",
        "webhooks:webhook_app",
        "Webhooks: job state changes sent to a URL, signed (notifications.md).",
    ),
    ("admin", "admin:admin_app", "Users, tokens and teams; explicit operator decisions."),
    ("token", "tokens:own_app", "Your own API tokens: list and revoke them."),
    ("config", "config_show:config_app", "TunePlane's own settings (environment, settings file)."),
    (
        "up",
        "server_cmds:up",
        "Start the control plane on embedded defaults: a private "
        "PostgreSQL, the API, the gateways and this machine's node daemon.",
    ),
    ("serve", "server_cmds:serve", "Serve one API process against TUNEPLANE_DATABASE_URL."),
    (
        "sim",
        "sim:sim",
        "Run the real admission, reservation and launch code over a simulated "
        "fleet, checking the reservation invariants.",
    ),
)


def _version() -> str:
    """`tp --version`: the installed distribution's version."""
    from importlib import metadata  # here: a tenth of every other `tp` start

    try:
        return f"tp (TunePlane) {metadata.version('tuneplane')}"
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "tp (TunePlane) unknown version (not installed: bash deploy/dev/setup.sh)"


def build_app() -> App:
    app = App(
        name="tp",
        help="TunePlane: submit, watch and stop ML training jobs.",
        default_parameter=Parameter(negative=()),
        version=_version,
        version_flags=("--version",),
    )
    for name, target, summary in COMMANDS:
        lazy(app, name, target, summary)
    return app


app = build_app()


def run(argv: Sequence[str] | None = None) -> int:
    """Run one command line; return its exit code."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    try:
        result = app(tokens, result_action="return_value", exit_on_error=False)
    except CycloptsError:
        return errors.USAGE  # cyclopts has printed the problem already
    except TunePlaneError as exc:
        output.err.print(errors.render(exc), markup=False)
        return errors.exit_code(exc)
    except KeyboardInterrupt:
        output.err.print("interrupted", markup=False)
        return errors.INTERRUPTED
    except BrokenPipeError:  # e.g. `tp job logs | head`
        return errors.OK
    except OSError as exc:  # a local file or directory that cannot be used
        output.err.print(errors.render(errors.from_os_error(exc)), markup=False)
        return errors.FAILED
    except SystemExit as exc:
        if _logged(exc):
            return errors.FAILED
        raise  # a bad setting in text mode: its one `error: … (fix: …)` line, status 1
    if isinstance(result, bool) or not isinstance(result, int):
        return errors.OK
    return result


def _logged(exc: SystemExit) -> bool:
    """A bad setting stopping a long-running process that logs json (TUNEPLANE_LOG_FORMAT):
    written as one json record, in the shape of its other lines (``entrypoints.logs``, loaded
    only by such a process; a client command never logs)."""
    logs = sys.modules.get("entrypoints.logs")
    return logs is not None and bool(logs.stop_record(exc))


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
