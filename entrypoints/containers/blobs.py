"""The blob store resource, for the processes that keep blobs (the API, the node gateway)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from adapters.blobs import FilesystemBlobStore
from adapters.extras import require
from domain.blob_ports import BlobStore
from domain.errors import InvalidInput, Unavailable
from entrypoints.settings import Settings
from entrypoints.settings_loader import SettingExit

log = logging.getLogger(__name__)


async def blob_store(settings: Settings) -> AsyncIterator[BlobStore]:
    """The filesystem store (the default, `tp up` included), or S3 when TUNEPLANE_BLOB_STORE
    is an s3:// URL: then the bucket is checked first, and a process that cannot use it stops
    with what to fix, unless the store is only unreachable (it may come back)."""
    location = settings.blob_s3
    if location is None:
        yield FilesystemBlobStore(settings.blob_dir)
        return
    try:
        require("s3")  # the AWS SDK is an optional extra, imported only for S3
    except InvalidInput as exc:  # stops the process, as the Kubernetes backend's does
        raise SettingExit(exc.message, exc.fix or "", "TUNEPLANE_BLOB_STORE") from None
    from adapters.blobs_s3 import Misconfigured, S3BlobStore

    async with S3BlobStore.connect(
        location,
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        addressing_style=settings.s3_addressing_style,
    ) as store:
        try:
            await store.check()
        except Misconfigured:
            raise  # the process stops with what to fix
        except Unavailable as exc:
            log.warning("%s; going on, requests that need a blob get 503 until it is back", exc)
        yield store
