"""What adapters/container_engine/api.py sends and how it reads a refusal (no engine needed);
tests/integration/test_docker_backend.py drives it against the real engine."""

from __future__ import annotations

import pytest

from adapters.container_engine.api import _message, http_params

pytestmark = pytest.mark.unit


def test_query_parameters_are_sent_as_the_engine_reads_them() -> None:
    assert http_params(None) is None
    assert http_params({"all": True, "v": False, "t": 10, "since": "1.5", "f": 0.5}) == {
        "all": "1",
        "v": "0",
        "t": "10",
        "since": "1.5",
        "f": "0.5",
    }


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"message":"No such container: tp-x"}\n', "No such container: tp-x"),
        (b"page not found\n", "page not found"),  # a proxy's or an old engine's plain text
        (b'["not", "an", "object"]', '["not", "an", "object"]'),
        (b'{"cause":"no message field"}', '{"cause":"no message field"}'),
        (b"\xff\xfe broken", "\ufffd\ufffd broken"),
        (b"", ""),
    ],
)
def test_a_refusal_carries_the_engines_own_words(body: bytes, said: str) -> None:
    assert _message(body) == said
