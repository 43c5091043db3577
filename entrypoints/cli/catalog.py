"""`tp methods [NAME]`, `tp profiles`: what the server offers (`tp runtime ls`:
entrypoints/cli/runtimes.py)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from cyclopts import Parameter

from domain.catalog import Method
from domain.errors import InvalidInput, NotFound
from entrypoints.cli import output
from entrypoints.cli.client import Api, connect
from entrypoints.cli.validation import method_from_json

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")]


def fetch_method_json(api: Api, name: str) -> dict[str, Any]:
    """``GET /v1/methods/{name}``; on 404 look in the list, so the error can name the choices."""
    try:
        data = api.get(f"/v1/methods/{quote(name, safe='/')}")
        if isinstance(data, list):
            data = next((m for m in data if m.get("name") == name), data[0] if data else {})
        if isinstance(data, dict) and data.get("name") == name:
            return data
    except NotFound:
        pass
    methods = api.get("/v1/methods")
    for m in methods:
        if m.get("name") == name:
            return dict(m)
    known = ", ".join(m.get("name", "?") for m in methods) or "none"
    raise InvalidInput(
        f"unknown method {name!r}", fix=f"use one of: {known} (see `tp methods`)", field="method"
    )


def fetch_method(api: Api, name: str) -> Method:
    return method_from_json(fetch_method_json(api, name))


def check_named(api: Api, path: str, name: str, what: str, command: str) -> None:
    """Raise a clear error when ``name`` is not in the list at ``path`` (runtimes). Profiles are
    requests the server resolves (``h200:8`` is not a name in a list): checked that way."""
    if path == "/v1/profiles":
        check_profile(api, name)
        return
    items = api.get(path)
    names = [str(i.get("name")) for i in items]
    if name not in names:
        raise InvalidInput(
            f"unknown {what} {name!r}",
            fix=f"use one of: {', '.join(names) or 'none configured'} (see `{command}`)",
            field=what,
        )


def methods(name: str | None = None, /, *, json: JsonFlag = False) -> int:
    """List methods, or show one method's parameters.

    Parameters
    ----------
    name
        A method name, e.g. custom/custom.
    """
    with connect() as api:
        data: Any = fetch_method_json(api, name) if name is not None else api.get("/v1/methods")
        runtimes = set() if json else {r.get("name") for r in api.get("/v1/runtimes")}
    if json:
        output.print_json(data)
        return 0

    def runtime(m: dict[str, Any]) -> str:
        named = str(m.get("default_runtime"))
        return named if named in runtimes else f"{named} (not registered: `tp runtime ls`)"

    if name is None:
        output.table(
            ["METHOD", "FRAMEWORK", "DESCRIPTION", "DEFAULT RUNTIME"],
            [(m.get("name"), _framework(m), m.get("description"), runtime(m)) for m in data],
        )
        return 0
    about = f"{data['name']}: {data.get('description', '')}"
    output.out.print(output.escape(about), markup=False)
    output.out.print(f"default runtime: {output.escape(runtime(data))}", markup=False)
    for label, value in (
        ("framework", _framework(data)),
        ("roles", ", ".join(data.get("roles") or [])),
        ("primary metrics", ", ".join(data.get("primary_metrics") or [])),
        ("entry", " ".join(data.get("entry") or [])),
        ("artifact", ", ".join(data.get("artifact") or [])),
        ("needs", ", ".join(data.get("needs") or [])),
    ):
        if value:
            output.out.print(f"{label}: {output.escape(value)}", markup=False)
    rows = []
    for p in data.get("params") or []:
        limits = []
        if p.get("choices"):
            limits.append("one of " + ", ".join(map(str, p["choices"])))
        if p.get("minimum") is not None:
            limits.append(f">= {p['minimum']}")
        if p.get("maximum") is not None:
            limits.append(f"<= {p['maximum']}")
        required = "yes" if p.get("required") and p.get("default") is None else ""
        default = "" if p.get("default") is None else p.get("default")
        rows.append((p["name"], p.get("type"), required, default, "; ".join(limits), p.get("help")))
    output.table(["PARAM", "TYPE", "REQUIRED", "DEFAULT", "ALLOWED", "HELP"], rows)
    return 0


def _framework(m: dict[str, Any]) -> str:
    return " ".join(str(v) for v in (m.get("framework"), m.get("framework_requires")) if v)


def _per_member(p: dict[str, Any]) -> str:
    r = p.get("resources")
    if not r:
        return ""
    gpus = f"{r['gpus']}× {r.get('gpu_model')}, " if r.get("gpus") else ""
    cpus = r.get("cpus")
    if isinstance(cpus, int | float) and float(cpus).is_integer():
        cpus = int(cpus)
    lead = f"{p['members']} × " if (p.get("members") or 1) != 1 else ""
    return f"{lead}{gpus}{cpus} CPUs, {r.get('memory_mb')} MiB"


def profiles(*, json: JsonFlag = False) -> int:
    """List what `--profile` accepts: the operator's named profiles, then each pool's implicit
    forms (MODEL, MODEL:N, cpu:N; prefixed with POOL/ where several pools match)."""
    with connect() as api:
        data = api.get("/v1/profiles")
    if json:
        output.print_json(data)
        return 0
    output.table(
        ["PROFILE", "KIND", "STANDS FOR", "POOL", "BACKEND", "PER MEMBER", "DESCRIPTION"],
        [
            (
                p.get("name"),
                p.get("kind", ""),
                p.get("request", "") if p.get("request") != p.get("name") else "",
                p.get("pool", ""),
                p.get("backend", ""),
                _per_member(p),
                p.get("description", ""),
            )
            for p in data
        ],
    )
    return 0


def check_profile(api: Api, text: str) -> None:
    """Raise the server's error when ``text`` is not a request it can resolve."""
    api.get("/v1/profiles/resolve", {"profile": text})
