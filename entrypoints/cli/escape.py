"""Strings from the server shown on a terminal as text, never as terminal control.

A job names its output files, a plugin's publisher writes its description, a node daemon its
address: a control character in them (ESC starts a sequence that moves the cursor, recolours or
retitles the terminal; CR returns to the start of the line and a row printed over it looks
real; BEL, backspace) or a bidi override (U+202E shows text reversed) would act on the
terminal of whoever lists them. ``escape`` shows each such character as a visible escape, as
Python writes them: ``\\n``, ``\\r``, ``\\t``, ``\\xNN`` for the other C0 controls, DEL and the
C1 controls, ``\\uNNNN`` for the bidi controls and the line and paragraph separators; a
backslash is shown doubled (``\\\\``), so an escape shown was a control character sent, never
the same characters written. docs/cli.md ("What the server sent") says so.
"""

from __future__ import annotations

from typing import Any

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_BIDI_AND_SEPARATORS = (
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)
_CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]


def _shown(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


_LINES = {ord(ch): _shown(ch) for ch in (*_CONTROLS, *_BIDI_AND_SEPARATORS) if ch != "\n"}
_VALUE = {**_LINES, ord("\n"): "\\n", ord("\\"): "\\\\"}


def escape(value: Any) -> str:
    """One value from the server (a cell, a field), every control character escaped, line
    breaks too, and a backslash doubled; None is the empty string."""
    return "" if value is None else str(value).translate(_VALUE)


def escape_lines(text: str) -> str:
    """Text to print, its line breaks kept: every other control character escaped. What the
    CLI's consoles do to whatever they print (``output``), so nothing printed reaches the
    terminal as control; a value from the server inside it is first ``escape``-d whole."""
    return text.translate(_LINES)
