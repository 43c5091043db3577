"""A stand-in for `helm template` where no helm binary is installed (none is packaged for this
machine): renders the Go-template subset that deploy/helm/tuneplane uses, and refuses anything
else, so the chart's templates cannot silently outgrow it. Supported: `{{ }}` with `{{-`/`-}}`
trimming; `.Values.…`, `.Release.Name|Namespace`, `.Chart.…`, `$` (the root) and `.` (the
item in a `range`); `if`/`else`/`end`, `range LIST`/`end`; functions `quote`, `toYaml`,
`nindent N`, `indent N`, `default X`; pipelines with `|`. A missing value is an error (helm
prints "<no value>"; a typo should fail the test instead)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for m in _ACTION.finditer(text):
        literal = text[pos : m.start()]
        if trim_next:
            literal = literal.lstrip()
        if m.group(1):
            literal = literal.rstrip()
        out += [("text", literal), ("action", m.group(2))]
        trim_next, pos = bool(m.group(3)), m.end()
    tail = text[pos:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def _tree(tokens: list[tuple[str, str]], i: int = 0) -> tuple[list[Any], int, str]:
    """Nodes up to an ``else``/``end`` (returned as the third value) or the end."""
    nodes: list[Any] = []
    while i < len(tokens):
        kind, value = tokens[i]
        i += 1
        if kind == "text":
            nodes.append(("text", value))
        elif value in ("end", "else"):
            return nodes, i, value
        elif value.startswith(("if ", "range ")):
            word, expr = value.split(" ", 1)
            body, i, stop = _tree(tokens, i)
            other: list[Any] = []
            if stop == "else":
                other, i, stop = _tree(tokens, i)
            if stop != "end":
                raise ValueError(f"{{{{ {value} }}}} has no end")
            nodes.append((word, expr, body, other))
        else:
            nodes.append(("expr", value))
    return nodes, i, ""


def _split(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside double quotes."""
    parts, cur, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == sep and not quoted:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*parts, cur.strip()]


def _term(term: str, dot: Any, root: dict[str, Any]) -> Any:
    if term.startswith('"'):
        return json.loads(term)
    if re.fullmatch(r"-?\d+", term):
        return int(term)
    if term == ".":
        return dot
    if term.startswith(("$.", ".")):
        value: Any = root if term.startswith("$") else dot
        for key in term.lstrip("$").strip(".").split("."):
            if not isinstance(value, dict) or key not in value:
                raise KeyError(f"{term}: no value")
            value = value[key]
        return value
    raise ValueError(f"unsupported term {term!r}")


def _call(name: str, args: list[Any]) -> Any:
    if name == "quote":
        return json.dumps("" if args[0] is None else str(args[0]))
    if name == "toYaml":
        return yaml.safe_dump(args[0], default_flow_style=False, sort_keys=False).rstrip("\n")
    if name in ("indent", "nindent"):
        pad = " " * int(args[0])
        text = pad + str(args[1]).replace("\n", "\n" + pad)
        return "\n" + text if name == "nindent" else text
    if name == "default":
        return args[1] if args[1] not in (None, "", [], {}, False) else args[0]
    raise ValueError(f"unsupported function {name!r}")


def _eval(expr: str, dot: Any, root: dict[str, Any]) -> Any:
    value: Any = None
    for n, command in enumerate(_split(expr, "|")):
        words = _split(command, " ")
        if words[0] in ("quote", "toYaml", "indent", "nindent", "default"):
            args = [_term(w, dot, root) for w in words[1:]] + ([value] if n else [])
            value = _call(words[0], args)
        elif n == 0 and len(words) == 1:
            value = _term(words[0], dot, root)
        else:
            raise ValueError(f"unsupported command {command!r}")
    return value


def _render(nodes: list[Any], dot: Any, root: dict[str, Any]) -> str:
    out = []
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "expr":
            value = _eval(node[1], dot, root)
            out.append(str(value).lower() if isinstance(value, bool) else str(value))
        elif node[0] == "if":
            value = _eval(node[1], dot, root)
            out.append(_render(node[2] if value else node[3], dot, root))
        else:  # range
            items = _eval(node[1], dot, root) or []
            out.extend(_render(node[2], item, root) for item in items)
    return "".join(out)


def template(chart: Path, release: str, namespace: str, values: dict[str, Any]) -> str:
    """The chart's manifests, as `helm template RELEASE CHART -n NAMESPACE` prints them."""
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    merged = yaml.safe_load((chart / "values.yaml").read_text())
    for key, value in values.items():
        merged = _merge(merged, {key: value})
    root = {
        "Values": merged,
        "Release": {"Name": release, "Namespace": namespace},
        "Chart": {
            "Name": meta["name"],
            "Version": meta["version"],
            "AppVersion": meta["appVersion"],
        },
    }
    docs = []
    for path in sorted((chart / "templates").glob("*.yaml")):
        nodes, _, stop = _tree(_tokens(path.read_text()))
        if stop:
            raise ValueError(f"{path.name}: {{{{ {stop} }}}} without its if or range")
        docs.append(
            f"---\n# Source: {meta['name']}/templates/{path.name}\n" + _render(nodes, root, root)
        )
    return "\n".join(docs)


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in over.items()}}
    return over
