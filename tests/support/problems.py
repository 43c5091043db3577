"""Reading problem answers (application/problem+json) in tests."""

from __future__ import annotations

from typing import Any, Protocol


class Answer(Protocol):
    def json(self) -> Any: ...


def said(answer: Answer) -> dict[str, object]:
    """A problem answer's words, without its request's own id (each answer has another): two
    refusals that must tell a caller nothing apart (an unknown, an expired and a revoked token)
    compare equal on these."""
    body = dict(answer.json())
    assert isinstance(body.pop("request_id"), str)
    return body
