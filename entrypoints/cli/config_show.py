"""`tp config show`: the effective settings of TunePlane's processes, where each came from
(default, env, file) and secrets masked (docs/operations.md#settings). A bad value stops it as it
would stop the process, naming the variable and the fix."""

from __future__ import annotations

from typing import Annotated, Literal

from cyclopts import App, Parameter

from entrypoints.cli import output

config_app = App(name="config", help="TunePlane's own settings (environment, settings file).")

Process = Literal["api", "node-gateway", "telemetry-gateway", "node", "collector"]


@config_app.command(name="show")
def show(
    *,
    process: Annotated[
        Process | None,
        Parameter(name="--process", help="only the settings this process reads (default: all)"),
    ] = None,
    json: Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Print the effective settings, their source (default, env, file), secrets masked."""
    from entrypoints.settings_view import rows

    found = rows(process)
    if json:
        output.print_json(found)
        return
    output.table(
        ["SECTION", "VARIABLE", "VALUE", "SOURCE"],
        [[r["section"], r["variable"], r["value"], r["source"]] for r in found],
    )
