"""What the S3 blob store (``adapters/blobs_s3.py``) says when the object store fails: the SDK's
and the service's errors become domain errors naming the endpoint and the fix. NotFound for a
missing object is the caller's business (``ABSENT``); everything else is Unavailable, and
``Misconfigured`` (still Unavailable) when an operator must act."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

import aiohttp
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)

from domain.errors import Unavailable

_CREDENTIALS = {
    "AccessDenied",
    "AllAccessDisabled",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidToken",
    "SignatureDoesNotMatch",
    "RequestTimeTooSkewed",
    "403",
}
_REGION = {
    "PermanentRedirect",
    "AuthorizationHeaderMalformed",
    "IllegalLocationConstraintException",
}
ABSENT = {"NoSuchKey", "404", "NotFound"}
NO_BUCKET = {"404", "NoSuchBucket", "NotFound"}
FAILURES = (BotoCoreError, aiohttp.ClientError, OSError)  # besides ClientError


class Misconfigured(Unavailable):
    """Unavailable until an operator acts: credentials refused or missing, no such bucket, the
    wrong region. (Plain Unavailable: unreachable or failing; it may come back by itself.)"""


@dataclass(frozen=True, slots=True)
class S3Place:
    """Where the blob store is, as its errors name it."""

    url: str  # s3://bucket/prefix/
    bucket: str
    prefix: str
    endpoint: str
    region: str


def code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


@contextlib.contextmanager
def failures(place: S3Place, doing: str) -> Iterator[None]:
    """Every failure inside becomes the domain error ``fail`` names."""
    try:
        yield
    except ClientError as exc:
        fail(place, exc, doing)
    except FAILURES as exc:
        fail(place, exc, doing)


def fail(place: S3Place, exc: Exception, doing: str) -> NoReturn:
    where = f"the blob store {place.url} at {place.endpoint}"
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        raise Misconfigured(
            f"{where} cannot be used: the control plane has no complete S3 credentials ({exc})",
            fix="give the control plane credentials the AWS way: AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE with ~/.aws/credentials, or a role",
        ) from None
    if not isinstance(exc, ClientError):
        raise Unavailable(
            f"{where} cannot be reached while {doing} ({type(exc).__name__}: {exc})",
            fix=f"check that {place.endpoint} is up and reachable from the control plane "
            "(TUNEPLANE_S3_ENDPOINT_URL), then retry",
        ) from None
    found, http = code(exc), status(exc)
    answer = f"{http} {found}" if found and found != str(http) else f"HTTP {http}"
    if found == "NoSuchBucket":
        no_bucket(place)
    if found in _CREDENTIALS:
        raise Misconfigured(
            f"{where} refused the control plane's credentials while {doing} ({answer})",
            fix="check the AWS credentials the control plane runs with (AWS_ACCESS_KEY_ID "
            "/ AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and that they may s3:GetObject, "
            f"s3:PutObject, s3:DeleteObject and s3:AbortMultipartUpload on "
            f"{place.bucket}/{place.prefix}* and s3:ListBucket on the "
            "bucket (without ListBucket a missing object also reads as 403)",
        ) from None
    if found in _REGION or http == 301:
        raise Misconfigured(
            f"the bucket {place.bucket} at {place.endpoint} is not in the region the "
            f"control plane signs for ({place.region}; {answer})",
            fix="set TUNEPLANE_S3_REGION (or AWS_DEFAULT_REGION) to the bucket's region",
        ) from None
    raise Unavailable(
        f"{where} answered {answer} while {doing}",
        fix="retry later; if it persists, check the object store's health and logs",
    ) from None


def no_bucket(place: S3Place) -> NoReturn:
    raise Misconfigured(
        f"the bucket {place.bucket} does not exist at {place.endpoint}",
        fix="create it (e.g. `aws s3 mb s3://"
        f"{place.bucket}`) or correct TUNEPLANE_BLOB_STORE / "
        "TUNEPLANE_S3_ENDPOINT_URL",
    ) from None
