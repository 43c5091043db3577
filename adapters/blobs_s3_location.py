"""Where an S3 blob store is (``s3://bucket/prefix/``): parsed where the settings are read,
without the AWS SDK, which is an optional extra (``pip install 'tuneplane[s3]'``,
``adapters/extras.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from domain.errors import InvalidInput

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # "" or ending in "/"

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """``s3://bucket`` or ``s3://bucket/some/prefix/`` (the trailing slash is implied)."""
        rest = url.removeprefix("s3://")
        bucket, _, prefix = rest.partition("/")
        if not url.startswith("s3://") or not _BUCKET_RE.match(bucket):
            raise InvalidInput(
                f"{url!r} is not an S3 location",
                fix="write s3://BUCKET/PREFIX/ (a bucket name of 3-63 lower-case letters, "
                "digits, dots and hyphens; the prefix is optional)",
                field="TUNEPLANE_BLOB_STORE",
            )
        prefix = prefix.strip("/")
        return cls(bucket, prefix + "/" if prefix else "")

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"
