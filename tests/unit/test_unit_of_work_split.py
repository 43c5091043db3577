"""Use cases open the narrowest unit of work they need (domain/unit_of_work.py): none opens the
whole ``UnitOfWork`` (``ctx.uow()``) or takes one as a parameter, so a signature says which
bounded contexts a use case can touch, and mypy holds it to that."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

APPLICATION = Path(__file__).resolve().parents[2] / "application"


def _whole_units(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "uow"
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Name) and node.id == "UnitOfWork":
            found.append(f"{path.name}:{node.lineno}: UnitOfWork")
    return found


def test_no_use_case_opens_or_takes_the_whole_unit_of_work() -> None:
    found = [hit for path in sorted(APPLICATION.glob("*.py")) for hit in _whole_units(path)]
    assert found == [], "open a narrow unit instead (ctx.units.jobs(), ...): " + "; ".join(found)
