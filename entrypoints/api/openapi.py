"""The served OpenAPI document (``/schema/openapi.json``): what the server enforces, in one place.

litestar derives the document from the routes, but drops part of what msgspec enforces on a
body (``additionalProperties: false`` of ``forbid_unknown_fields``, the constraints of list
items, dictionary keys and values). So every component that is a msgspec Struct (or an enum)
is replaced by msgspec's own JSON Schema of that type, the one its decoder checks against; the
operations, parameters and responses stay litestar's. The links between operations (a
preview's id to reading it and committing it, a job's id to everything about that job, …) are
added here too, for clients and for the stateful API fuzzing in the tests
(``tests/e2e/test_openapi_fuzz.py``).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Collection, Iterator
from typing import Any

import msgspec
from litestar import Request
from litestar.openapi.plugins import JsonRenderPlugin

from entrypoints.api.problems import PROBLEM_JSON, TITLES

REF = "#/components/schemas/{name}"


def _subclasses(cls: type) -> Iterator[type]:
    sub: type
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _wire_types(names: Collection[str]) -> list[type]:
    """The API's Structs named ``names`` (the document's components); names are unique among
    the Structs its modules define (litestar's own signature models are not among them)."""
    found: dict[str, type] = {}
    for cls in _subclasses(msgspec.Struct):
        module = sys.modules.get(cls.__module__)
        ours = cls.__module__.startswith("entrypoints.") and getattr(module, cls.__name__, None)
        if cls.__name__ not in names or ours is not cls:
            continue
        if found.setdefault(cls.__name__, cls) is not cls:  # one component per name
            raise TypeError(f"two wire Structs are named {cls.__name__}: rename one")
    return list(found.values())


# (source operation, its answers, the values they carry, the paths they feed)
LINKS: list[tuple[str, tuple[str, ...], dict[str, str], str]] = [
    ("POST /v1/previews", ("201",), {"preview_id": "$response.body#/id"}, "/v1/previews/"),
    ("POST /v1/jobs", ("200", "201"), {"job_id": "$response.body#/job_id"}, "/v1/jobs/"),
    ("GET /v1/jobs", ("200",), {"job_id": "$response.body#/jobs/0/id"}, "/v1/jobs/"),
    ("GET /v1/jobs/{job_id}", ("200",),
     {"attempt_id": "$response.body#/attempts/0/id"}, "/v1/attempts/"),
    ("POST /v1/pools", ("201",),
     {"name": "$response.body#/name", "pool": "$response.body#/name"}, "/v1/pools/"),
    ("POST /v1/nodes", ("201",), {"name": "$response.body#/name"}, "/v1/nodes/"),
    ("POST /v1/users", ("201",), {"name": "$response.body#/name"}, "/v1/users/"),
    ("POST /v1/queues", ("201",), {"name": "$response.body#/name"}, "/v1/queues/"),
    ("POST /v1/runtimes", ("200", "201"), {"name": "$response.body#/runtime/name"},
     "/v1/runtimes/"),
]  # fmt: skip
# a preview is committed with its own id and digest (the retry key is the client's)
COMMIT = {"preview_id": "$response.body#/id", "digest": "$response.body#/digest"}


def _links(paths: dict[str, Any]) -> None:
    """Add the OpenAPI links of :data:`LINKS` (and preview → commit) to the answers."""
    for source, statuses, values, prefix in LINKS:
        method, path = source.split(" ")
        answers = paths.get(path, {}).get(method.lower(), {}).get("responses", {})
        links: dict[str, Any] = {}
        for target, operations in paths.items():
            if not target.startswith(prefix):
                continue
            for target_method, op in operations.items():
                names = [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]
                if names and set(names) <= set(values):
                    links[f"{target_method.upper()} {target}"] = {
                        "operationId": op["operationId"],
                        "parameters": {n: values[n] for n in names},
                    }
        if source == "POST /v1/previews":
            links["POST /v1/jobs"] = {
                "operationId": paths["/v1/jobs"]["post"]["operationId"],
                "requestBody": COMMIT,
            }
        for status in statuses:
            if status in answers and links:
                answers[status]["links"] = links


def _problems(paths: dict[str, Any]) -> None:
    """Every operation documents the problems any route can answer (400 from the edge checks
    of ``guard.py``, 401 without a token, 404 for a path parameter that names nothing, 413 for
    a body past its route's limit), and every problem as ``application/problem+json``."""
    problem = {PROBLEM_JSON: {"schema": {"$ref": REF.format(name="Problem")}}}
    for operations in paths.values():
        for op in operations.values():
            answers = op.setdefault("responses", {})
            needed = {400}
            if op.get("security"):
                needed.add(401)
            for parameter in op.get("parameters", []):
                if parameter["in"] == "path":  # an empty one is a path with an empty segment
                    needed.add(404)
                    parameter["schema"].setdefault("minLength", 1)
            if "requestBody" in op:
                needed.add(413)
            for status in needed:
                answers.setdefault(str(status), {"description": TITLES[status]})
            for status, answer in answers.items():
                if status[0] in "45":
                    answer["content"] = problem


def tighten(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with msgspec's schemas for its wire types, its problems documented, and the
    links added."""
    doc = copy.deepcopy(document)
    components: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    _, schemas = msgspec.json.schema_components(_wire_types(components), ref_template=REF)
    for name, schema in schemas.items():
        components[name] = schema
    _problems(doc.get("paths", {}))
    _links(doc.get("paths", {}))
    return doc


class TightJsonRenderPlugin(JsonRenderPlugin):
    """``/schema/openapi.json``, tightened once (``tighten``) and then served as it is."""

    def __init__(self) -> None:
        super().__init__()
        self._tight: dict[str, Any] | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if self._tight is None:
            self._tight = tighten(openapi_schema)
        return self.render_json(request, self._tight)
