"""The console's API types, generated from the OpenAPI document the server serves.

``console/src/api-schema.d.ts`` is what ``openapi-typescript`` makes of ``/schema/openapi.json``
(read in-process from an application on in-memory adapters, so no server or database is needed).
The file is committed, so building the console needs no Python; ``tests/unit/test_console_js.py``
fails when it no longer matches the routes, naming the command that writes it again:

    .venv/bin/python -m tests.support.api_types --write
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "console"
SCHEMA_TS = CONSOLE / "src" / "api-schema.d.ts"
GENERATOR = CONSOLE / "node_modules" / ".bin" / "openapi-typescript"
REF = "#/components/schemas/"
# free-form objects are Record<string, unknown>; request fields with defaults stay optional
FLAGS = ("--alphabetize", "--empty-objects-unknown", "--default-non-nullable=false")
WRITE = ".venv/bin/python -m tests.support.api_types --write"


async def _document(state: Path) -> dict[str, Any]:
    from litestar.testing import AsyncTestClient

    from entrypoints.api.app import create_app
    from tests.support.context import memory_context

    async with AsyncTestClient(app=create_app(memory_context(state), supervise=False)) as client:
        answer = await client.get("/schema/openapi.json")
        answer.raise_for_status()
        doc: dict[str, Any] = answer.json()
        return doc


def _refs(node: Any, schemas: dict[str, Any], seen: set[str]) -> None:
    """The names of every component schema ``node`` refers to, through other components."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF):
            name = ref.removeprefix(REF)
            if name not in seen:
                seen.add(name)
                _refs(schemas.get(name), schemas, seen)
        for value in node.values():
            _refs(value, schemas, seen)
    elif isinstance(node, list):
        for value in node:
            _refs(value, schemas, seen)


def answers_complete(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with every field of an answer's schema required.

    A field with a default is optional in a request (the server fills it in), but msgspec writes
    every field of an answer (no ``omit_defaults`` anywhere in the API), so the console may rely
    on it. ``openapi-typescript --default-non-nullable=false`` keeps request fields with defaults
    optional; this marks the answers' fields present. A schema used in both directions is left
    as it is."""
    schemas: dict[str, Any] = doc.get("components", {}).get("schemas", {})
    answers: set[str] = set()
    requests: set[str] = set()
    for item in doc.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            _refs(operation.get("responses", {}), schemas, answers)
            _refs(operation.get("requestBody", {}), schemas, requests)
    for name in answers - requests:
        schema = schemas[name]
        if schema.get("type") == "object" and "properties" in schema:
            schema["required"] = sorted(schema["properties"])
    return doc


def generate() -> str:
    """The TypeScript declarations for the served document, as ``openapi-typescript`` writes
    them."""
    if not GENERATOR.is_file():
        raise RuntimeError(f"no {GENERATOR}; fix: `cd console && npm ci`")
    with tempfile.TemporaryDirectory() as tmp:
        doc = answers_complete(asyncio.run(_document(Path(tmp))))
        source = Path(tmp) / "openapi.json"
        target = Path(tmp) / "schema.d.ts"
        source.write_text(json.dumps(doc, indent=1, sort_keys=True))
        subprocess.run(
            [str(GENERATOR), str(source), "--output", str(target), *FLAGS],
            check=True,
            capture_output=True,
            cwd=CONSOLE,
        )
        return target.read_text()


def main(argv: list[str]) -> int:
    fresh = generate()
    if argv[1:] == ["--write"]:
        SCHEMA_TS.write_text(fresh)
        print(f"wrote {SCHEMA_TS.relative_to(ROOT)}")
        return 0
    if SCHEMA_TS.is_file() and SCHEMA_TS.read_text() == fresh:
        return 0
    print(f"{SCHEMA_TS.relative_to(ROOT)} is out of date; fix: {WRITE}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
