"""Reading a process's log as the docs promise it (docs/operations.md#logs): json mode's lines
(``records``) and text mode's (``text_records``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def records(path: Path, role: str) -> list[dict[str, Any]]:
    """Every line of ``path`` as a JSON object written by a process of ``role`` (an assertion
    error naming the first line that is not)."""
    found = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"{path}:{n} is not JSON: {line[:300]!r}") from None
        assert isinstance(record, dict), (path, n, line)
        assert record.get("role") == role, (path, n, record)
        assert RFC3339_UTC.fullmatch(record["ts"]), (path, n, record)
        assert record["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), record
        assert isinstance(record["logger"], str) and isinstance(record["msg"], str), record
        found.append(record)
    assert found, f"{path} is empty"
    return found


TEXT_RECORD = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<role>[a-z-]+) [\w.]+: "
)
OTHER_FORMAT = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")  # basicConfig's, litestar's


def text_records(path: Path, role: str) -> int:
    """``path`` in text mode: records of ``role`` in the one format, their tracebacks indented,
    and what the process printed for its operator; no line in another log format. How many
    records."""
    found = 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if match := TEXT_RECORD.match(line):
            assert match["role"] == role, (path, n, line)
            found += 1
        else:
            assert not OTHER_FORMAT.match(line), f"{path}:{n} is in another format: {line!r}"
    assert found, f"{path} has no log record"
    return found
