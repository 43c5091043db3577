"""Text from outside (an engine's error page, a daemon's reason, an error that echoes input)
made safe to store, send and show: printable and bounded, never refused, since it is still
why something failed."""

from __future__ import annotations

_LINE_BREAKS = str.maketrans({"\n": " ", "\r": " ", "\t": " ", "\v": " ", "\f": " "})


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the cut marked with how long it was
    (``… [cut: 10840 characters]``); the start is kept, where an error says what went wrong."""
    if len(text) <= limit:
        return text
    mark = f"… [cut: {len(text)} characters]"
    return text[: max(limit - len(mark), 0)] + mark


def prose(text: str, limit: int) -> str:
    """``text`` printable (line breaks and tabs made spaces; NUL, other control and invisible
    characters, lone surrogates "?") and :func:`cut` to ``limit``."""
    if text.isprintable() and len(text) <= limit:
        return text
    head = cut(text, limit)
    return "".join(c if c.isprintable() else "?" for c in head.translate(_LINE_BREAKS))
