"""Commands imported only when they run: a `tp` process loads the modules of the one command it
runs, not those of all of them (tests/unit/test_cli_lazy.py)."""

from __future__ import annotations

from cyclopts import App
from cyclopts.command_spec import CommandSpec


class _Lazy(CommandSpec):
    """A lazily imported command whose summary is for its parent's command list only: once
    imported, its own help (the function's docstring, the sub-app's help) is what
    `tp … NAME --help` shows, where cyclopts would put the summary in its place."""

    def resolve(self, parent_app: App) -> App:
        if self.is_resolved:
            return super().resolve(parent_app)
        summary, self.help = self.help, None
        try:
            return super().resolve(parent_app)
        finally:
            self.help = summary


def lazy(app: App, name: str, target: str, summary: str) -> None:
    """Register ``target`` ("module:object" under entrypoints.cli: a function or an App named
    ``name``) as command ``name`` of ``app``, imported when first used; ``summary`` is its line
    in ``app``'s command list."""
    if name in app:
        raise ValueError(f"command {name!r} is registered twice")
    # cyclopts' own `app.command("module:object", help=...)` would make the summary replace the
    # command's full help once imported; the registry below is the one it fills
    app._commands[name] = _Lazy(f"entrypoints.cli.{target}", name=name, help=summary)
