"""Schemathesis hooks of tests/e2e/test_openapi_fuzz.py (loaded with SCHEMATHESIS_HOOKS).

Schemathesis generates values from the document; these hooks add, drawn by the same seeded
Hypothesis data, the inputs that broke the server before (issue 18, defect 7) and that a schema
alone rarely yields: a NUL character in a path or query parameter or in any string or key of a
JSON body, a body nested 50,000 levels deep (sent as raw bytes: no JSON library on the way
recurses that deep), integers past 64 bits, and surrogate-like and other unicode text. They also
make some previews runnable (a method and a profile that exist here), so that the stateful
phase commits real jobs and follows the links from them; a job only waits (the test cordons
the node), so fuzzed values never reach a container.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import schemathesis
from hypothesis import strategies as st

DEEP = 50_000
ODD_PARAMS = ["\x00", "a\x00b", "\ud7ff\ue000", "😀" * 40, "\u202e", " ", "%", "a/b"]
ODD_TEXT = [*ODD_PARAMS, "", "x" * 70_000]
ODD_NUMBERS = [2**64, -(2**63) - 1, 10**30, -1, 0, 2**63 - 1]
Path = tuple[str | int, ...]


def _leaves(value: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """Every leaf of a JSON value with its path (dictionaries and lists walked)."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*path, k))] or [
            (path, value)
        ]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, (*path, i))] or [
            (path, value)
        ]
    return [(path, value)]


def _replaced(body: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(body))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return copy


def _replaced_at(body: Any, where_and_new: tuple[Path, Any]) -> Any:
    return _replaced(body, *where_and_new)


def _with_key(body: dict[str, Any], key: str) -> dict[str, Any]:
    """``body`` with one more key (a NUL in a key must be refused like one in a value)."""
    return {**body, key: "x"}


def _deep(body: dict[str, Any]) -> bytes:
    """``body`` as JSON with its first field (or a new one) nested ``DEEP`` levels deep."""
    key = next(iter(body), "deep")
    rest = {k: v for k, v in body.items() if k != key}
    head = json.dumps(rest)[:-1] + (", " if rest else "")
    return f'{head}"{key}": '.encode() + b"[" * DEEP + b"]" * DEEP + b"}"


def runnable_preview(body: dict[str, Any]) -> dict[str, Any]:
    """A preview this server can resolve, keeping the generated env and plugins-free fields."""
    given_env = body.get("env")
    env: dict[str, Any] = given_env if isinstance(given_env, dict) else {}
    return {
        "experiment": "fuzz",
        "method": "custom/custom",
        "profile": "local/cpu:0.5",  # the fuzzer adds CPU pools of its own
        "params": {"command": "true"},
        "env": {k: v for k, v in env.items() if k.isidentifier() and k.isascii()},
    }


@schemathesis.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> Any:
    if not isinstance(body, dict):
        return st.just(body)
    op = context.operation
    plain = [body]
    if op is not None and (op.method.upper(), op.path) == ("POST", "/v1/previews"):
        plain.append(runnable_preview(body))
    if op is not None and (op.method.upper(), op.path) == ("POST", "/v1/webhooks"):
        # a generated https URL would be accepted and sent to (the deliverer, `test`): the
        # server must never be made to call a real host, so every one names a host that
        # cannot resolve (RFC 2606 .invalid); odd values still replace it below
        plain = [{**body, "url": "https://hooks.invalid/fuzz"}]
    odd = []
    for b in plain:
        where = [p for p, _ in _leaves(b) if p]
        if where:
            odd.append(
                st.tuples(st.sampled_from(where), st.sampled_from(ODD_TEXT + ODD_NUMBERS)).map(
                    functools.partial(_replaced_at, b)
                )
            )
    odd.append(st.sampled_from(plain).map(lambda b: _with_key(b, "k\x00")))
    odd.append(st.sampled_from(plain).map(_deep))
    return _sometimes(st.sampled_from(plain), st.one_of(odd))


def _sometimes(plain: Any, odd: Any) -> Any:
    """Draws from ``odd`` once in four, else from ``plain`` (values as generated, or as a link
    filled them in)."""
    return st.integers(0, 3).flatmap(lambda n: odd if n == 0 else plain)


def _odd_values(values: dict[str, Any]) -> Any:
    if not values:
        return st.just(values)
    odd = st.tuples(st.sampled_from(sorted(values)), st.sampled_from(ODD_PARAMS)).map(
        lambda kv: {**values, kv[0]: kv[1]}
    )
    return _sometimes(st.just(values), odd)


@schemathesis.hook
def flatmap_query(context: schemathesis.HookContext, query: dict[str, Any]) -> Any:
    return _odd_values(query) if isinstance(query, dict) else st.just(query)


@schemathesis.hook
def flatmap_path_parameters(context: schemathesis.HookContext, params: dict[str, Any]) -> Any:
    if not isinstance(params, dict):
        return st.just(params)
    # An empty path parameter makes another path (the client collapses `//`: POST
    # /v1/jobs//cancel is sent as POST /v1/jobs/cancel, the job named "cancel"), whose answer
    # the tool would hold against this operation; the server's side of it is tested in
    # tests/unit/test_api_guard.py.
    filled = {k: "0" if v == "" else v for k, v in params.items()}
    return _odd_values(filled)
