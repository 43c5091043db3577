"""The console's own checks, run in the suite: its JavaScript unit tests (vitest, in Node: chart
maths and the API client) and its API types, which must be what ``openapi-typescript`` makes of
the OpenAPI document the server serves today (a route changed without regenerating them fails
here, naming the command that does)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support import api_types

pytestmark = pytest.mark.unit

VITEST = api_types.CONSOLE / "node_modules" / ".bin" / "vitest"


def test_the_consoles_javascript_unit_tests_pass() -> None:
    if not VITEST.is_file() or shutil.which("node") is None:
        pytest.fail(f"no {VITEST}; fix: `cd console && npm ci` (deploy/dev/setup.sh does it)")
    run = subprocess.run(
        [str(VITEST), "run", "--reporter=dot"],
        cwd=api_types.CONSOLE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]


def test_the_consoles_api_types_match_the_served_openapi_document() -> None:
    assert api_types.SCHEMA_TS.read_text() == api_types.generate(), (
        f"{api_types.SCHEMA_TS.relative_to(api_types.ROOT)} is out of date; fix: {api_types.WRITE}"
    )


def test_every_answer_field_is_required_and_request_defaults_stay_optional() -> None:
    INNER = "#/components/schemas/Inner"

    def ref(name: str) -> dict[str, object]:
        return {"content": {"a": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}

    doc = {
        "paths": {"/x": {"post": {"requestBody": ref("In"), "responses": {"200": ref("Out")}}}},
        "components": {
            "schemas": {
                "In": {"type": "object", "properties": {"a": {}, "b": {"default": 1}}},
                "Out": {"type": "object", "properties": {"c": {"$ref": INNER}}},
                "Inner": {"type": "object", "properties": {"e": {"default": 0}}},
            }
        },
    }
    doc["components"]["schemas"]["In"]["required"] = ["a"]  # type: ignore[index]
    doc["components"]["schemas"]["Out"]["properties"]["d"] = {"default": ""}  # type: ignore[index]
    schemas = api_types.answers_complete(doc)["components"]["schemas"]
    assert schemas["In"]["required"] == ["a"]
    assert schemas["Out"]["required"] == ["c", "d"]
    assert schemas["Inner"]["required"] == ["e"]
