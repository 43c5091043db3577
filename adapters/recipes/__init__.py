"""Built-in recipes read from this directory: ``<framework>/<method>/recipe.toml`` declares a
method (parameters with type, range, choices, default and config path; roles; primary metrics;
entry; needs; the framework it is written against) and every other file beside it, plus the
shared files it ``include``s from ``_lib/``, is its integration artifact (docs/recipes.md)."""

from __future__ import annotations

import itertools
import math
import tomllib
from pathlib import Path
from typing import Any

from domain.catalog import Method, ParamSpec, coerce_param
from domain.errors import InvalidInput
from domain.runtimes import check_requirement

ROOT = Path(__file__).resolve().parent
_KEYS = {"name", "version", "description", "default_runtime", "primary_metrics", "roles", "entry",
         "needs", "include", "framework", "params"}  # fmt: skip
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
        unknown = set(d) - _KEYS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        method = Method(
            name=str(d["name"]),
            description=str(d["description"]),
            params=tuple(_param(p) for p in d.get("params", [])),
            default_runtime=str(d["default_runtime"]),
            primary_metrics=tuple(d.get("primary_metrics", ())),
            version=str(d.get("version", "1")),
            roles=tuple(d.get("roles", ("main",))),
            entry=tuple(str(a) for a in d.get("entry", ())),
            artifact=_artifact(directory, d.get("include", [])),
            needs=tuple(d.get("needs", ())),
            **_framework(d.get("framework")),
        )
        check_requirement(method)
    except (KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(
            f"recipe {where} is not valid: {exc!r}", fix="see docs/recipes.md for its keys"
        ) from None
    _check_config_paths(method, where)
    expected = "/".join(directory.parts[-2:])
    if method.name != expected:
        raise InvalidInput(f"recipe {where} is named {method.name!r}, not {expected!r}",
                           fix="name it after its directory")  # fmt: skip
    return method


def _artifact(directory: Path, include: list[str]) -> tuple[tuple[str, bytes], ...]:
    """The recipe's own files (by path relative to its directory) and the shared files it
    includes (paths relative to the recipes' root, or else to ``adapters/`` for the SDK's
    ``sdk/report.py``; placed beside its own by file name)."""
    files = {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "recipe.toml" and "__pycache__" not in p.parts
    }
    root = directory.parent.parent.resolve()
    for name in include:
        below = root.parent / "sdk" if str(name).startswith("sdk/") else root  # the SDK
        path = (below.parent / str(name) if below != root else root / str(name)).resolve()
        if not path.is_relative_to(below) or not path.is_file():
            raise ValueError(f"include {name!r} is not a file below {below}")
        if path.name in files:
            raise ValueError(f"include {name!r} clashes with the recipe's own {path.name}")
        files[path.name] = path.read_bytes()
    return tuple(sorted(files.items()))


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
    spec = ParamSpec(
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
    if spec.type not in ("str", "int", "float", "bool"):
        raise ValueError(f"parameter {spec.name!r} has type {spec.type!r}")
    for bound in (spec.minimum, spec.maximum):  # a NaN bound would pass every value
        number = isinstance(bound, int | float) and not isinstance(bound, bool)
        if bound is not None and not (number and math.isfinite(bound)):
            raise ValueError(f"parameter {spec.name!r} has bound {bound!r}, not a finite number")
    for value in (*spec.choices, *(() if spec.default is None else (spec.default,))):
        try:  # a declared default or choice must itself be a valid value
            coerce_param(spec, value, spec.name)
        except InvalidInput as exc:
            raise ValueError(f"its own default or choice: {exc.message}") from None
    return spec


def _check_config_paths(method: Method, where: Path) -> None:
    """Two parameters may not set one config path, nor one a path inside another's value."""
    paths = sorted((p.config or p.name) + "." for p in method.params)
    for a, b in itertools.pairwise(paths):
        if b.startswith(a):
            raise InvalidInput(
                f"recipe {where}: config paths {a[:-1]!r} and {b[:-1]!r} overlap",
                fix="give each parameter its own config path",
            )
