"""Check an experiment's params against a method declaration as the server sends it.

The declaration is data (``GET /v1/methods/{name}``); it is turned into the domain's
``Method``/``ParamSpec`` and checked with the domain's own rules, so the CLI and the server
agree. Every problem is reported, each naming the file, the key and the fix.
"""

from __future__ import annotations

from typing import Any, cast

from domain.catalog import Method, ParamSpec, ParamType, ParamValue, coerce_param
from domain.errors import InvalidInput
from entrypoints.cli.workspace import Experiment

_TYPES = ("str", "int", "float", "bool")


def method_from_json(data: Any) -> Method:
    """Build a Method from the API's JSON (an object, or a one-element list of objects)."""
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise InvalidInput(
            "the server's method declaration is not in the documented shape",
            fix="check that the CLI and the server are the same version",
        )
    params = []
    for p in data.get("params") or []:
        ptype = cast(ParamType, p.get("type") if p.get("type") in _TYPES else "str")
        params.append(
            ParamSpec(
                name=str(p["name"]),
                type=ptype,
                help=str(p.get("help") or ""),
                required=bool(p.get("required")),
                default=p.get("default"),
                choices=tuple(p.get("choices") or ()),
                minimum=p.get("minimum"),
                maximum=p.get("maximum"),
            )
        )
    return Method(
        name=data["name"],
        description=str(data.get("description") or ""),
        params=tuple(params),
        default_runtime=str(data.get("default_runtime") or ""),
        framework=data.get("framework") or None,
        framework_requires=str(data.get("framework_requires") or ""),
    )


def _toml_value(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def check_params(
    exp: Experiment, method: Method, overrides: dict[str, str] | None = None
) -> list[InvalidInput]:
    """All problems with ``exp.params`` (plus ``--set`` overrides) under ``method``."""
    file = exp.file
    problems: list[InvalidInput] = []
    given: dict[str, ParamValue] = {**exp.params, **(overrides or {})}
    known = ", ".join(p.name for p in method.params) or "none"
    for name, raw in given.items():
        where = "--set" if overrides and name in overrides else str(file)
        spec = method.param(name)
        if spec is None:
            problems.append(
                InvalidInput(
                    f"{where}: method {method.name} has no parameter {name!r}",
                    fix=f"remove it; the parameters are: {known} (see `tp methods {method.name}`)",
                    field=f"params.{name}",
                )
            )
            continue
        try:
            coerce_param(spec, raw, f"params.{name}")
        except InvalidInput as exc:
            example = f"{name} = {_toml_value(spec.default)}" if spec.default is not None else ""
            fix = exc.fix + (f" (default: {example})" if example else "")
            problems.append(InvalidInput(f"{where}: {exc.message}", fix=fix, field=exc.field))
    for spec in method.params:
        if spec.required and spec.default is None and spec.name not in given:
            problems.append(
                InvalidInput(
                    f"{file}: method {method.name} needs parameter {spec.name!r} ({spec.help})",
                    fix=f"add `{spec.name} = <{spec.type}>` under [params]",
                    field=f"params.{spec.name}",
                )
            )
    return problems


def params_template(method: Method) -> list[str]:
    """``[params]`` lines for a new experiment: defaults set, required ones to fill in."""
    lines = []
    for p in method.params:
        comment = f"  # {p.help}" if p.help else ""
        if method.name == "custom/custom" and p.name == "command":
            lines.append(f'command = "sh train.sh"{comment}')
        elif p.default is not None:
            lines.append(f"{p.name} = {_toml_value(p.default)}{comment}")
        elif p.required:
            lines.append(f"# {p.name} = <{p.type}>  # required: {p.help}")
        else:
            lines.append(f"# {p.name} = <{p.type}>{comment}")
    return lines
