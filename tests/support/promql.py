"""The PromQL of deploy/observability/ (the Grafana dashboard's panels, the alert rules) and the
metric names it uses, parsed by a real PromQL parser (promql-parser, the Rust parser Prometheus'
tooling uses, through its Python binding); and the metric names a text exposition offers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

OBSERVABILITY = Path(__file__).resolve().parents[2] / "deploy" / "observability"
DASHBOARD = OBSERVABILITY / "tuneplane-dashboard.json"
ALERTS = OBSERVABILITY / "tuneplane-alerts.yml"

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def expressions() -> dict[str, str]:
    """Where → expression, for every panel target and every rule."""
    found: dict[str, str] = {}
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            found[f"rule {rule.get('alert') or rule.get('record')}"] = rule["expr"]
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (a syntax error raises ValueError)."""
    return set(_names(promql_parser.parse(expr)))


def _names(node: Any) -> Iterator[str]:
    if isinstance(node, promql_parser.VectorSelector):
        if node.name:
            yield node.name
        for m in node.matchers.matchers:  # {__name__="..."}
            if m.name == "__name__":
                yield m.value
        return
    if isinstance(node, promql_parser.MatrixSelector):
        yield from _names(node.vector_selector)
        return
    for attr in ("lhs", "rhs", "expr", "param"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, str | int | float):
            yield from _names(child)
    for arg in getattr(node, "args", None) or ():
        yield from _names(arg)


def exposed(text: str) -> set[str]:
    """Every sample name the exposition ``text`` offers or declares (a labelled family with no
    child yet has no sample: its declared type says which names it will have)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names
