"""The CLI's tables show what the server sent as plain text: a node's advertised address or a
security event's message (strings a node daemon chose) never style the operator's terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from entrypoints.cli import output

pytestmark = pytest.mark.unit


def test_a_cell_is_shown_as_it_is_never_as_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120, color_system="truecolor")
    monkeypatch.setattr(output, "out", console)
    output.table(["NODE", "WHAT"], [["n1", "[blink red]refused[/blink red] [link=http://x]y"]])
    text = buf.getvalue()
    assert "[blink red]refused[/blink red] [link=http://x]y" in text
    assert "\x1b[5" not in text and "\x1b]8;" not in text  # no blink, no hyperlink
