"""Canonical JSON and digests: same content → same bytes, whatever the key order."""

import hashlib
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.canonical import canonical_json, digest

pytestmark = pytest.mark.unit

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


def test_key_order_and_whitespace_do_not_matter() -> None:
    a = {"b": [1, 2, {"y": True, "x": None}], "a": "é"}
    b = {"a": "é", "b": [1, 2, {"x": None, "y": True}]}
    assert (
        canonical_json(a) == canonical_json(b) == '{"a":"é","b":[1,2,{"x":null,"y":true}]}'.encode()
    )
    assert digest(a) == digest(b)


def test_digest_is_stable_across_releases() -> None:
    # A fixed vector: if the encoding drifts, every stored preview digest stops matching.
    expected = hashlib.sha256(b'{"spec":{"command":["sh"],"cpus":1.0}}').hexdigest()
    assert digest({"spec": {"cpus": 1.0, "command": ["sh"]}}) == "sha256:" + expected


def test_changed_value_changes_digest() -> None:
    assert digest({"a": 1}) != digest({"a": 2})
    assert digest({"a": 1}) != digest({"a": "1"})


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": math.nan})


@given(json_values)
def test_round_trip_is_a_fixed_point(value: object) -> None:
    encoded = canonical_json(value)
    assert canonical_json(json.loads(encoded)) == encoded
