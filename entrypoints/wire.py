"""Wire types shared by the HTTP API and the fleet file, and plain words for what they refuse.

The constraints are msgspec ``Meta``: the decoder enforces them (400 on the API, an error naming
the entry in a fleet file) and the OpenAPI document states them (``entrypoints/api/openapi.py``).
The domain checks again (``domain.catalog.check_name``), whole-string (a ``$`` in a msgspec or
JSON-Schema pattern also lets a final newline through in Python, never in the domain).
"""

from __future__ import annotations

import re
from typing import Annotated

from msgspec import Meta

from domain.catalog import NAME_RE

NAME_PATTERN = NAME_RE.pattern
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
IDENT_PATTERN = r"^[A-Za-z0-9._:-]+$"

Name = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=63,
        pattern=NAME_PATTERN,
        description="1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter "
        "or digit",
    ),
]
Digest = Annotated[str, Meta(pattern=DIGEST_PATTERN, description="sha256:<64 hex digits>")]
Ident = Annotated[str, Meta(min_length=1, max_length=80, pattern=IDENT_PATTERN)]

_WORDS = {
    NAME_PATTERN: "a name: 1-63 characters, lower-case letters, digits, '.', '_' or '-', "
    "starting with a letter or digit",
    DIGEST_PATTERN: "a digest: sha256: and 64 lower-case hex digits",
    IDENT_PATTERN: "an id: letters, digits, '.', '_', ':' or '-'",
}
_REGEX = re.compile(r"Expected `str` matching regex '(.*)'$")


def explain(message: str) -> str:
    """msgspec's words for a pattern it refused, in words a user reads (others unchanged)."""
    match = _REGEX.match(message)
    if match and match.group(1) in _WORDS:
        return f"expected {_WORDS[match.group(1)]}"
    return message
