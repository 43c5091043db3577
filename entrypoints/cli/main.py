"""The `tp` command line: a client of the HTTP API (docs/http-api.md), plus `tp up`/`tp serve`.

``run(argv)`` returns the exit code (see ``errors`` for the table); ``main()`` exits with it.
Expected failures print ``error:``/``field:``/``fix:`` lines to stderr, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import metadata

from cyclopts import App, CycloptsError, Parameter

from domain.errors import TunePlaneError
from entrypoints.cli import (
    account,
    admin,
    artifacts,
    catalog,
    collector,
    config_show,
    errors,
    experiments,
    fleet,
    fleet_check,  # noqa: F401  (registers `tp fleet check` on the fleet app)
    job_metrics,  # noqa: F401  (registers `tp job metrics` on the job app)
    jobs,
    nodes,
    output,
    plugins,
    queues,
    recipe_lock,
    runtimes,
    server_cmds,
    sim,
    submit,
    webhooks,
)


def _version() -> str:
    """`tp --version`: the installed distribution's version."""
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
    account.register(app)
    experiments.register(app)
    catalog.register(app)
    runtimes.register(app)  # before server_cmds, which adds `tp runtime build`
    collector.register(app)
    submit.register(app)
    jobs.register(app)
    artifacts.register(app)
    plugins.register(app)
    recipe_lock.register(app)
    fleet.register(app)  # with `tp fleet check` (entrypoints/cli/fleet_check.py)
    nodes.register(app)
    queues.register(app)
    webhooks.register(app)
    admin.register(app)
    config_show.register(app)
    server_cmds.register(app)
    sim.register(app)
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
    if isinstance(result, bool) or not isinstance(result, int):
        return errors.OK
    return result


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
