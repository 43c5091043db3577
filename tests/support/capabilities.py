"""The capability table and the outcome table of docs/backends.md, parsed: what the parity
suite (tests/e2e/test_backend_parity.py) asserts on each backend."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
BACKENDS = ("local", "node", "slurm", "kubernetes")
CELLS = ("yes", "no", "n/a")
_CODE = re.compile(r"^`([^`]*)`$")


@dataclass(frozen=True)
class Outcome:
    """One row of the outcome table: how a scenario ends, on every backend that supports it."""

    job_state: str
    member: int | None  # None: every member
    member_state: str
    exit_code: int | None  # None: any
    reasons: tuple[str, ...]  # fragments, one of which the member's reason contains ("": any)


def _rows(marker: str, text: str | None = None) -> list[list[str]]:
    """The cells of the markdown table that follows ``<!-- marker … -->``, header excluded."""
    lines = (DOC.read_text() if text is None else text).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"<!-- {marker}")), None)
    if start is None:
        raise AssertionError(f"{DOC}: no '<!-- {marker}' comment before its table")
    rows = []
    for line in lines[start + 3 :]:  # the header and the |---| line skipped
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    if not rows:
        raise AssertionError(f"{DOC}: the {marker} has no rows")
    return rows


def _name(cell: str, what: str) -> str:
    m = _CODE.match(cell)
    if m is None:
        raise AssertionError(f"{DOC}: {what} {cell!r} is not in backticks")
    return m.group(1)


def capabilities(text: str | None = None) -> dict[str, dict[str, str]]:
    """capability → backend → ``yes``, ``no`` or ``n/a``."""
    table: dict[str, dict[str, str]] = {}
    for row in _rows("capability table", text):
        name = _name(row[0], "capability")
        cells = dict(zip(BACKENDS, row[1 : 1 + len(BACKENDS)], strict=True))
        bad = {b: c for b, c in cells.items() if c not in CELLS}
        if bad:
            raise AssertionError(f"{DOC}: capability {name}: cells {bad} are not one of {CELLS}")
        if name in table:
            raise AssertionError(f"{DOC}: capability {name} appears twice")
        table[name] = cells
    return table


def outcomes(text: str | None = None) -> dict[str, Outcome]:
    """scenario → how it ends."""
    found = {}
    for row in _rows("outcome table", text):
        scenario, job, member, member_state, code, reason = row[:6]
        found[_name(scenario, "scenario")] = Outcome(
            job,
            None if member == "every" else int(member),
            member_state,
            None if code == "any" else int(code),
            _fragments(reason),
        )
    return found


def _fragments(cell: str) -> tuple[str, ...]:
    """```a` or `b``` → ("a", "b"); ```""``` → ("",)."""
    found = tuple(f.strip('"') for f in re.findall(r"`([^`]*)`", cell))
    if not found or " or ".join(f"`{f}`" for f in found) != cell.replace('`""`', "``"):
        raise AssertionError(f"{DOC}: member reason {cell!r} is not `fragment` [or `fragment` …]")
    return found


def supports(capability: str, backend: str) -> str:
    try:
        return capabilities()[capability][backend]
    except KeyError:
        raise AssertionError(f"{DOC}: no cell for capability {capability} on {backend}") from None
