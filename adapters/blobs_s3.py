"""Content-addressed blob store on an S3-compatible object store (AWS S3, MinIO, Ceph RGW,
SeaweedFS, ...), through aiobotocore (the AWS SDK's core, async).

Layout: ``s3://<bucket>/<prefix>sha256/<64 hex>``. The same port contract as the filesystem
store (``domain/ports.py`` BlobStore, ``tests/contract/test_blob_stores.py``):

* ``put`` hashes while it uploads and never leaves a partial or wrong object behind.
  A blob of at most one part (8 MiB) is held in memory until its digest is known, then written
  with one PutObject to its final key. A larger one is sent as a multipart upload, one part at a
  time: straight to its final key when the caller declared the digest (``expected``), otherwise
  to a temporary key ``<prefix>uploads/<random>`` that is copied to the final key once the
  digest is known, then deleted. A multipart upload stays invisible until it is completed, so
  TooLarge, a digest mismatch, an error or a cancellation aborts it and nothing is left.
  Identical content is written once: a HEAD of the final key comes first.
* ``read`` checks that the object's bytes hash to its key; an object changed behind
  TunePlane's back is refused (NotFound, naming both digests), never handed out.
* Service errors become domain errors: NotFound for a missing object, Unavailable (naming the
  endpoint and what to fix) for everything else: unreachable, 5xx, refused credentials, missing
  bucket. From the caller's side each of these is the server's storage being unusable, not a
  fault in the request; the supervisor retries Unavailable on its next tick.

Credentials come from the AWS SDK's standard chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws, instance or pod roles); nothing here logs them.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from adapters.blobs import (
    check_digest,
    corrupt_blob,
    digest_mismatch,
    file_chunks,
    too_large,
    write_file,
)
from adapters.blobs_s3_errors import (
    ABSENT,
    FAILURES,
    NO_BUCKET,
    S3Place,
    code,
    fail,
    failures,
    no_bucket,
)
from adapters.blobs_s3_errors import Misconfigured as Misconfigured  # raised from here
from adapters.blobs_s3_location import S3Location as S3Location  # parsed without the SDK
from domain.blob_ports import StoredBlob
from domain.errors import NotFound
from domain.submission import DIGEST_RE

log = logging.getLogger(__name__)

PART_SIZE = 8 * 1024 * 1024  # S3's smallest part is 5 MiB (all but the last)
_PIECE = 1024 * 1024  # read size of a blob sent on in pieces (``chunks``)


class S3BlobStore:
    """Use ``S3BlobStore.connect(...)`` (an async context manager that owns the client)."""

    def __init__(self, client: Any, location: S3Location, part_size: int = PART_SIZE) -> None:
        self._s3 = client
        self.location = location
        self.part_size = part_size
        self.endpoint = str(client.meta.endpoint_url)
        self.place = S3Place(
            str(location),
            location.bucket,
            location.prefix,
            self.endpoint,
            str(client.meta.region_name),
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        location: S3Location,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str | None = None,
        access_key: str | None = None,  # None: the AWS SDK's credential chain
        secret_key: str | None = None,
        part_size: int = PART_SIZE,
        max_attempts: int | None = None,  # None: AWS_MAX_ATTEMPTS, or the SDK's 3
    ) -> AsyncIterator[S3BlobStore]:
        session = get_session()
        region = region or session.get_config_variable("region") or "us-east-1"
        config = AioConfig(
            region_name=region,
            # an S3-compatible server behind one host name wants path-style URLs; AWS decides
            s3={"addressing_style": addressing_style or ("path" if endpoint_url else "auto")},
            retries={"mode": "standard"}
            | ({} if max_attempts is None else {"max_attempts": max_attempts}),
            connect_timeout=10,
            read_timeout=120,
            # integrity is the SHA-256 of every blob (checked here) plus Content-MD5 on each
            # write; the SDK's default CRC trailers are refused by some S3-compatible servers
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        async with session.create_client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=config,
        ) as client:
            store = cls(client, location, part_size)
            log.info("blob store: %s at %s (region %s)", location, store.endpoint, region)
            yield store

    # -- the port ---------------------------------------------------------------------------

    async def put(
        self, chunks: AsyncIterator[bytes], max_size: int, expected: str | None = None
    ) -> tuple[str, int]:
        hasher = hashlib.sha256()
        counted = [0]
        parts = self._parts(chunks, max_size, hasher, counted)
        try:
            first = await anext(parts)
            second = await anext(parts, None)
            if second is None:  # one part: the digest is known before anything is written
                digest = _checked(hasher, expected)
                await self._put_small(digest, first)
                return digest, counted[0]
            return await self._put_multipart(parts, [first, second], hasher, counted, expected)
        finally:
            await parts.aclose()

    async def size(self, digest: str) -> int | None:
        key = self._key(digest)
        try:
            head = await self._s3.head_object(Bucket=self.location.bucket, Key=key)
        except ClientError as exc:
            if code(exc) in ABSENT:
                return None
            fail(self.place, exc, f"looking up {digest}")
        except FAILURES as exc:
            fail(self.place, exc, f"looking up {digest}")
        return int(head["ContentLength"])

    async def put_file(
        self, path: str, max_size: int, beneath: str | None = None
    ) -> tuple[str, int]:
        return await self.put(file_chunks(path, beneath), max_size)

    async def copy_to(self, digest: str, path: str) -> None:
        await write_file(path, await self.read(digest))  # its digest checked

    async def read(self, digest: str) -> bytes:
        data = b"".join([chunk async for chunk in self.chunks(digest)])
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if found != digest:
            raise corrupt_blob(digest, found, f"{self.location}{_relative(digest)}")
        return data

    async def chunks(self, digest: str) -> AsyncIterator[bytes]:
        key = self._key(digest)
        try:
            got = await self._s3.get_object(Bucket=self.location.bucket, Key=key)
        except ClientError as exc:
            if code(exc) in ABSENT:
                raise NotFound(f"no blob {digest}", fix="upload it again") from None
            fail(self.place, exc, f"reading {digest}")
        except FAILURES as exc:
            fail(self.place, exc, f"reading {digest}")
        with failures(self.place, f"reading {digest}"):
            async with got["Body"] as body:
                while chunk := await body.read(_PIECE):
                    yield chunk

    async def listing(self) -> AsyncIterator[StoredBlob]:
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.location.bucket, Prefix=self.location.prefix + "sha256/"
        )
        with failures(self.place, "listing the blobs"):
            async for page in pages:
                for item in page.get("Contents", []):
                    name = str(item["Key"]).rsplit("/", 1)[-1]
                    digest = "sha256:" + name
                    if DIGEST_RE.match(digest):
                        yield StoredBlob(digest, int(item["Size"]), item["LastModified"])

    async def delete(self, digest: str) -> None:
        with failures(self.place, f"deleting {digest}"):
            await self._s3.delete_object(Bucket=self.location.bucket, Key=self._key(digest))

    # -- operations -------------------------------------------------------------------------

    async def check(self) -> None:
        """That the bucket exists and these credentials may use it (HeadBucket); raises
        Unavailable naming the problem and its fix."""
        try:
            await self._s3.head_bucket(Bucket=self.location.bucket)
        except ClientError as exc:
            if code(exc) in NO_BUCKET:
                no_bucket(self.place)
            fail(self.place, exc, f"checking bucket {self.location.bucket}")
        except FAILURES as exc:
            fail(self.place, exc, f"checking bucket {self.location.bucket}")

    # -- internals --------------------------------------------------------------------------

    def _key(self, digest: str) -> str:
        check_digest(digest)
        return self.location.prefix + _relative(digest)

    async def _parts(
        self,
        chunks: AsyncIterator[bytes],
        max_size: int,
        hasher: Any,
        counted: list[int],
    ) -> AsyncGenerator[bytes, None]:
        """The stream cut into parts of ``part_size`` (the last one may be shorter; an empty
        stream is one empty part), hashed and counted on the way; TooLarge as soon as it passes
        ``max_size``."""
        buffer, sent = bytearray(), False
        async for chunk in chunks:
            counted[0] += len(chunk)
            if counted[0] > max_size:
                raise too_large(max_size)
            hasher.update(chunk)
            buffer += chunk
            while len(buffer) >= self.part_size:
                yield bytes(buffer[: self.part_size])
                del buffer[: self.part_size]
                sent = True
        if buffer or not sent:
            yield bytes(buffer)

    async def _exists(self, key: str, size: int | None, md5: bytes | None = None) -> bool:
        """An object at ``key``, of ``size`` bytes and with ``md5`` as its ETag when given (a
        single-part object's ETag is the MD5 of its bytes): otherwise it is (re)written."""
        try:
            head = await self._s3.head_object(Bucket=self.location.bucket, Key=key)
        except ClientError as exc:
            if code(exc) in ABSENT:
                return False
            raise
        if size is not None and int(head["ContentLength"]) != size:
            return False
        return md5 is None or str(head.get("ETag", "")).strip('"') == md5.hex()

    async def _renew(self, key: str) -> None:
        """Stored again: its LastModified set to now (a server-side copy onto itself, the
        one way S3 has), so a collection pass does not take a blob just uploaded again."""
        bucket = self.location.bucket
        await self._s3.copy_object(
            Bucket=bucket,
            Key=key,
            CopySource={"Bucket": bucket, "Key": key},
            MetadataDirective="REPLACE",
        )

    async def _put_small(self, digest: str, data: bytes) -> None:
        key = self._key(digest)
        md5 = hashlib.md5(data, usedforsecurity=False).digest()
        with failures(self.place, f"storing {digest}"):
            if await self._exists(key, len(data), md5):  # a damaged copy is replaced
                await self._renew(key)
                return
            await self._s3.put_object(
                Bucket=self.location.bucket,
                Key=key,
                Body=data,
                ContentMD5=base64.b64encode(md5).decode(),
            )

    async def _put_multipart(
        self,
        parts: AsyncIterator[bytes],
        held: list[bytes],
        hasher: Any,
        counted: list[int],
        expected: str | None,
    ) -> tuple[str, int]:
        direct = expected is not None and DIGEST_RE.match(expected) is not None
        if direct:
            assert expected is not None
            with failures(self.place, f"storing {expected}"):
                present = await self._exists(self._key(expected), None)
            if present:  # the same content is stored: only check what is sent
                async for _ in parts:
                    pass
                digest = _checked(hasher, expected)
                with failures(self.place, f"storing {expected}"):
                    await self._renew(self._key(digest))
                return digest, counted[0]
            key = self._key(expected)
        else:
            key = f"{self.location.prefix}uploads/{uuid.uuid4().hex}"
        bucket = self.location.bucket
        with failures(self.place, "starting an upload"):
            upload = await self._s3.create_multipart_upload(Bucket=bucket, Key=key)
        upload_id = upload["UploadId"]
        try:
            done: list[dict[str, Any]] = []
            for part in held:
                await self._upload_part(key, upload_id, done, part)
            held.clear()
            async for part in parts:
                await self._upload_part(key, upload_id, done, part)
            digest = _checked(hasher, expected)
            with failures(self.place, f"storing {digest}"):
                await self._s3.complete_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}
                )
        except BaseException:
            with contextlib.suppress(Exception):  # nothing was completed: drop the parts
                await self._s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            raise
        if not direct:
            try:
                final = self._key(digest)
                with failures(self.place, f"storing {digest}"):
                    if await self._exists(final, counted[0]):
                        await self._renew(final)
                    else:
                        await self._s3.copy_object(
                            Bucket=bucket, Key=final, CopySource={"Bucket": bucket, "Key": key}
                        )
            finally:
                with contextlib.suppress(Exception):
                    await self._s3.delete_object(Bucket=bucket, Key=key)
        return digest, counted[0]

    async def _upload_part(
        self, key: str, upload_id: str, done: list[dict[str, Any]], data: bytes
    ) -> None:
        number = len(done) + 1
        with failures(self.place, "uploading a part"):
            sent = await self._s3.upload_part(
                Bucket=self.location.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
                ContentMD5=_md5(data),
            )
        done.append({"ETag": sent["ETag"], "PartNumber": number})


def _relative(digest: str) -> str:
    return "sha256/" + digest.removeprefix("sha256:")


def _checked(hasher: Any, expected: str | None) -> str:
    digest = "sha256:" + str(hasher.hexdigest())
    if expected is not None and expected != digest:
        raise digest_mismatch(digest, expected)
    return digest


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
