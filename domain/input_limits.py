"""What every text and structured value a user sends must be (docs/http-api.md, "Input limits").

Text that reaches the database must be text PostgreSQL can store, and a value must be one a
walker can go through without exhausting the stack. So:

* text holds no NUL character (PostgreSQL cannot store one, nor can a process argument or an
  environment variable hold one);
* a structured value (JSON, TOML) nests at most :data:`MAX_DEPTH` levels, with no NUL in any
  string or key and no integer outside signed 64 bits.

The HTTP edge (``entrypoints/api/guard.py``) checks every request with these, and `tp validate`
checks experiment.toml with them (``entrypoints/cli/workspace.py``), so the two refuse the same
values. A refusal is :class:`InvalidInput` naming the field (``params.command``, ``env.A``).
"""

from __future__ import annotations

from domain.errors import InvalidInput

MAX_DEPTH = 32
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


def printable(key: str) -> str:
    """``key`` as a field name can show it (a NUL written ``\\x00``)."""
    return key.replace("\x00", "\\x00")


def check_text(text: str, field: str) -> None:
    if "\x00" in text:
        raise InvalidInput(
            f"{field} holds a NUL character (\\x00), which text fields cannot hold",
            fix="remove it; send text without NUL characters",
            field=field,
        )


def _join(path: str, key: str, root: str) -> str:
    return key if path == root else f"{path}.{key}"


def too_deep(field: str, what: str = "the request body") -> InvalidInput:
    return InvalidInput(
        f"{what} is nested more than {MAX_DEPTH} levels deep",
        fix="send a flatter document; no field of this API nests that deep",
        field=field,
    )


def check_value(value: object, root: str = "body", what: str = "the request body") -> None:
    """Raise InvalidInput at the first part of ``value`` (decoded JSON or TOML) that breaks the
    rules above, named by its path below ``root`` (a key at the top is named alone: ``env.A``);
    iterative, so that a deep value cannot exhaust the stack here either."""
    stack: list[tuple[object, str, int]] = [(value, root, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, path)
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            continue
        elif isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise InvalidInput(
                    f"{path} is {item}, outside the signed 64-bit range",
                    fix=f"send an integer between {INT_MIN} and {INT_MAX}",
                    field=path,
                )
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise too_deep(path, what)
            if isinstance(item, dict):
                for key, inner in item.items():
                    where = _join(path, printable(str(key)), root)
                    check_text(str(key), where)
                    stack.append((inner, where, depth + 1))
            else:
                stack.extend((inner, f"{path}[{i}]", depth + 1) for i, inner in enumerate(item))
