"""Parsers of the control plane's settings that are more than a type (``entrypoints.settings``):
each takes the raw text and returns the value, or raises ``SettingError`` naming the variable
and the fix."""

from __future__ import annotations

from pathlib import Path

from adapters.blobs_s3_location import S3Location  # no SDK: S3 is an optional extra
from domain.errors import InvalidInput
from entrypoints.settings_loader import SettingError


def signals(raw: str) -> bool:
    if raw not in ("on", "off"):
        raise SettingError(
            f"TUNEPLANE_SIGNALS={raw!r} is neither on nor off",
            "set on, or off where LISTEN/NOTIFY does not work, e.g. behind PgBouncer in "
            "transaction mode",
        )
    return raw == "on"


def port_range(raw: str) -> range:
    """``FIRST-LAST`` (both included), e.g. ``29500-29999``."""
    first, dash, last = raw.strip().partition("-")
    fix = "write FIRST-LAST with 1024 <= FIRST <= LAST <= 65535, e.g. 29500-29999"
    if not (dash and first.strip().isdigit() and last.strip().isdigit()):
        raise SettingError(f"TUNEPLANE_RENDEZVOUS_PORTS={raw!r} is not a range of ports", fix)
    lo, hi = int(first), int(last)
    if not 1024 <= lo <= hi <= 65535:
        raise SettingError(f"TUNEPLANE_RENDEZVOUS_PORTS={raw!r} is out of bounds", fix)
    return range(lo, hi + 1)


def blob_store(raw: str) -> str:
    """Empty (the state directory's blobs/), a directory (a shared mount too), or
    ``s3://bucket/prefix/``."""
    raw = raw.strip()
    if raw.startswith("s3://"):
        try:
            S3Location.parse(raw)
        except InvalidInput as exc:
            raise SettingError(f"TUNEPLANE_BLOB_STORE: {exc.message}", exc.fix or "") from None
        return raw
    path = raw.removeprefix("file://")
    if path and not Path(path).expanduser().is_absolute():
        raise SettingError(
            f"TUNEPLANE_BLOB_STORE={raw!r} is neither an absolute directory nor an s3:// URL",
            "set /path/to/blobs, s3://BUCKET/PREFIX/, or leave it unset for the state "
            "directory's blobs/",
        )
    return path


def endpoint_url(raw: str) -> str:
    raw = raw.strip()
    if not raw.startswith(("http://", "https://")):
        raise SettingError(
            f"TUNEPLANE_S3_ENDPOINT_URL={raw!r} is not an http(s) URL",
            "e.g. https://minio.example.org:9000, or unset for AWS",
        )
    return raw


def addressing_style(raw: str) -> str:
    raw = raw.strip()
    if raw not in ("auto", "path", "virtual"):
        raise SettingError(
            f"TUNEPLANE_S3_ADDRESSING_STYLE={raw!r} is not auto, path or virtual",
            "path for most S3-compatible servers, virtual or auto for AWS",
        )
    return raw
