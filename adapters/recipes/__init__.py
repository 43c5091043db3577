"""Built-in recipes read from this directory: ``<framework>/<method>/recipe.toml`` declares a
method (parameters with type, range, choices, default and config path; roles; primary metrics;
entry; needs; the framework it is written against) and every other file beside it is its
integration artifact (docs/recipes.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from domain.catalog import Method, ParamSpec
from domain.errors import InvalidInput
from domain.runtimes import check_requirement

ROOT = Path(__file__).resolve().parent
_PARAM_KEYS = {"name", "type", "help", "required", "default", "choices", "minimum", "maximum",
               "config"}  # fmt: skip


def load_recipes(root: Path = ROOT) -> list[Method]:
    """Every recipe below ``root``, by name."""
    return sorted((load_recipe(p.parent) for p in root.glob("*/*/recipe.toml")),
                  key=lambda m: m.name)  # fmt: skip


def load_recipe(directory: Path) -> Method:
    where = directory / "recipe.toml"
    try:
        d = tomllib.loads(where.read_text())
        method = Method(
            name=str(d["name"]),
            description=str(d["description"]),
            params=tuple(_param(p) for p in d.get("params", [])),
            default_runtime=str(d["default_runtime"]),
            primary_metrics=tuple(d.get("primary_metrics", ())),
            version=str(d.get("version", "1")),
            roles=tuple(d.get("roles", ("main",))),
            entry=tuple(str(a) for a in d.get("entry", ())),
            artifact=tuple(
                (p.relative_to(directory).as_posix(), p.read_bytes())
                for p in sorted(directory.rglob("*"))
                if p.is_file() and p.name != "recipe.toml" and "__pycache__" not in p.parts
            ),
            needs=tuple(d.get("needs", ())),
            **_framework(d.get("framework")),
        )
        check_requirement(method)
    except (KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(
            f"recipe {where} is not valid: {exc!r}", fix="see docs/recipes.md for its keys"
        ) from None
    expected = "/".join(directory.parts[-2:])
    if method.name != expected:
        raise InvalidInput(f"recipe {where} is named {method.name!r}, not {expected!r}",
                           fix="name it after its directory")  # fmt: skip
    return method


def _framework(table: dict[str, Any] | None) -> dict[str, Any]:
    """``[framework]`` with ``name`` and ``requires`` (a PEP 440 specifier, default any)."""
    if table is None:
        return {}
    unknown = set(table) - {"name", "requires"}
    if unknown:
        raise ValueError(f"[framework] has unknown keys {sorted(unknown)}")
    return {"framework": str(table["name"]), "framework_requires": str(table.get("requires", ""))}


def _param(p: dict[str, Any]) -> ParamSpec:
    unknown = set(p) - _PARAM_KEYS
    if unknown:
        raise ValueError(f"parameter {p.get('name')!r} has unknown keys {sorted(unknown)}")
    return ParamSpec(
        name=str(p["name"]),
        type=p["type"],
        help=str(p.get("help", "")),
        required=bool(p.get("required", False)),
        default=p.get("default"),
        choices=tuple(p.get("choices", ())),
        minimum=p.get("minimum"),
        maximum=p.get("maximum"),
        config=str(p.get("config", "")),
    )
