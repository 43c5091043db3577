"""TOML and JSON documents read from files and answers, never nested deeper than ``MAX_DEPTH``.

The standard library's parsers recurse once per level of arrays or tables: a file of 100,000
``[`` stops them with a ``RecursionError`` (a traceback, not an error naming the file). Here that,
and any document deeper than ``MAX_DEPTH`` (which nothing TunePlane reads comes near, and which
the code walking the document could not always follow), is a ``NestedTooDeeply``: a
``TOMLDecodeError`` and so a ``ValueError``, which the callers already turn into an error that
names the file and the fix.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

MAX_DEPTH = 100


class NestedTooDeeply(tomllib.TOMLDecodeError):
    """A document nested deeper than ``MAX_DEPTH`` levels of arrays, tables or objects."""

    def __init__(self) -> None:
        super().__init__(
            f"nested too deeply (more than {MAX_DEPTH} levels of arrays, tables or objects)"
        )


def _check_depth(data: Any) -> None:
    todo: list[tuple[Any, int]] = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise NestedTooDeeply()
        todo.extend((child, depth + 1) for child in children)


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``; a document nested too deeply raises ``NestedTooDeeply``."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise NestedTooDeeply() from None
    _check_depth(data)
    return data


def json_loads(raw: str | bytes, *, walk: bool = True) -> Any:
    """``json.loads``; a document nested too deeply raises ``NestedTooDeeply``. ``walk=False``
    (a server's answers, which may be long) only catches what stops the parser itself."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise NestedTooDeeply() from None
    if walk:
        _check_depth(data)
    return data
