"""Canonical JSON and content digests.

Canonical form: UTF-8, object keys sorted, no insignificant whitespace, no NaN/Infinity,
tuples written as arrays. The same value always yields the same bytes, whatever the key order
or the process that produced it, so a digest over it identifies a preview's content.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` (JSON types only) canonically; raise ValueError on NaN or other types."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` over the canonical JSON of ``value``."""
    return "sha256:" + sha256_hex(canonical_json(value))
