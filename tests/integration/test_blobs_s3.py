"""The S3 blob store's configuration and its failures, against the real SeaweedFS server of
tests/fixtures/s3.py: refused credentials, a missing bucket, an unreachable endpoint, no
credentials at all; and the settings that choose the store (entrypoints/settings.py,
entrypoints/containers/blobs.py). What it does when it works is
tests/contract/test_blob_stores.py."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.blobs import FilesystemBlobStore
from adapters.blobs_s3 import Misconfigured, S3BlobStore, S3Location
from domain.errors import InvalidInput, NotFound, Unavailable
from entrypoints.containers.blobs import blob_store
from entrypoints.settings import Settings
from tests.fixtures.s3 import S3Server
from tests.fixtures.server import free_port

pytestmark = pytest.mark.integration


async def once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def test_locations_parse() -> None:
    assert S3Location.parse("s3://tp-blobs") == S3Location("tp-blobs", "")
    assert S3Location.parse("s3://tp-blobs/") == S3Location("tp-blobs", "")
    assert S3Location.parse("s3://tp-blobs/a/b") == S3Location("tp-blobs", "a/b/")
    assert str(S3Location.parse("s3://tp-blobs//a/")) == "s3://tp-blobs/a/"
    for bad in ("s3://", "s3://Upper", "s3://ab", "http://x/y", "s3://a_b/"):
        with pytest.raises(InvalidInput, match="is not an S3 location") as refused:
            S3Location.parse(bad)
        assert refused.value.field == "TUNEPLANE_BLOB_STORE"


async def test_refused_credentials_name_the_endpoint_and_the_fix(
    s3_server: S3Server, s3_prefix: str
) -> None:
    location = S3Location(s3_server.bucket, s3_prefix)
    async with S3BlobStore.connect(
        location,
        endpoint_url=s3_server.endpoint,
        access_key=s3_server.access_key,
        secret_key="not-the-secret",
        max_attempts=1,
    ) as store:
        digest = "sha256:" + hashlib.sha256(b"x").hexdigest()
        for step in (store.check(), store.put(once(b"x"), 10), store.read(digest)):
            with pytest.raises(Misconfigured, match="refused the control plane's credentials") as e:
                await step
            assert s3_server.endpoint in e.value.message
            assert "AWS_SECRET_ACCESS_KEY" in e.value.fix and "s3:ListBucket" in e.value.fix
            assert "not-the-secret" not in str(e.value)


async def test_a_missing_bucket(s3_server: S3Server) -> None:
    async with S3BlobStore.connect(
        S3Location("tp-no-such-bucket", ""),
        endpoint_url=s3_server.endpoint,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        max_attempts=1,
    ) as store:
        for step in (store.check(), store.put(once(b"x"), 10)):
            with pytest.raises(Misconfigured, match="bucket tp-no-such-bucket does not exist"):
                await step
        with pytest.raises(Misconfigured, match="does not exist") as e:
            await store.read("sha256:" + hashlib.sha256(b"x").hexdigest())
        assert "aws s3 mb s3://tp-no-such-bucket" in e.value.fix


async def test_an_unreachable_endpoint_is_unavailable_not_misconfigured() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with S3BlobStore.connect(
        S3Location("tp-blobs", ""),
        endpoint_url=endpoint,
        access_key="a",
        secret_key="b",
        max_attempts=1,
    ) as store:
        with pytest.raises(Unavailable, match="cannot be reached") as e:
            await store.put(once(b"x"), 10)
        assert not isinstance(e.value, Misconfigured)
        assert endpoint in e.value.message and "TUNEPLANE_S3_ENDPOINT_URL" in e.value.fix


async def test_no_credentials_at_all(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup
    async with S3BlobStore.connect(
        S3Location(s3_server.bucket, ""), endpoint_url=s3_server.endpoint, max_attempts=1
    ) as store:
        with pytest.raises(Misconfigured, match="no complete S3 credentials") as e:
            await store.check()
        assert "AWS_ACCESS_KEY_ID" in e.value.fix


def settings_from(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> Settings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return dataclasses.replace(Settings.from_env(), state_dir=tmp_path / "state")


def test_the_blob_store_setting_is_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cases = {
        "s3://B": "is not an S3 location",
        "relative/dir": "neither an absolute directory nor an s3:// URL",
    }
    for value, complaint in cases.items():
        with pytest.raises(SystemExit, match=complaint):
            settings_from(monkeypatch, tmp_path, TUNEPLANE_BLOB_STORE=value)
    monkeypatch.delenv("TUNEPLANE_BLOB_STORE")
    with pytest.raises(SystemExit, match="TUNEPLANE_S3_ENDPOINT_URL='minio:9000' is not"):
        settings_from(monkeypatch, tmp_path, TUNEPLANE_S3_ENDPOINT_URL="minio:9000")
    monkeypatch.delenv("TUNEPLANE_S3_ENDPOINT_URL")
    with pytest.raises(SystemExit, match="not auto, path or virtual"):
        settings_from(monkeypatch, tmp_path, TUNEPLANE_S3_ADDRESSING_STYLE="dns")


async def test_the_default_is_the_state_directory_and_a_directory_may_be_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TUNEPLANE_BLOB_STORE", raising=False)
    settings = settings_from(monkeypatch, tmp_path)
    async for store in blob_store(settings):
        assert isinstance(store, FilesystemBlobStore)
        assert store.root == tmp_path / "state" / "blobs"
    shared = tmp_path / "shared-mount"
    settings = settings_from(monkeypatch, tmp_path, TUNEPLANE_BLOB_STORE=f"file://{shared}")
    async for store in blob_store(settings):
        assert isinstance(store, FilesystemBlobStore) and store.root == shared


async def test_an_s3_url_wires_the_s3_store(
    s3_server: S3Server, s3_prefix: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = settings_from(monkeypatch, tmp_path, **s3_server.env(s3_prefix))
    async for store in blob_store(settings):
        assert isinstance(store, S3BlobStore)
        digest, _ = await store.put(once(b"wired"), 100)
        assert await store.read(digest) == b"wired"
        with pytest.raises(NotFound):
            await store.read("sha256:" + "0" * 64)
    assert not (tmp_path / "state" / "blobs").exists()


async def test_a_process_that_cannot_use_its_bucket_stops(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = s3_server.env("") | {"TUNEPLANE_BLOB_STORE": "s3://tp-no-such-bucket/"}
    settings = settings_from(monkeypatch, tmp_path, **env)
    with pytest.raises(Misconfigured, match="bucket tp-no-such-bucket does not exist"):
        async for _ in blob_store(settings):
            pass
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    settings = settings_from(monkeypatch, tmp_path, TUNEPLANE_BLOB_STORE=f"s3://{s3_server.bucket}")
    with pytest.raises(Misconfigured, match="refused the control plane's credentials"):
        async for _ in blob_store(settings):
            pass


async def test_an_unreachable_store_does_not_stop_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = {
        "TUNEPLANE_BLOB_STORE": "s3://tp-blobs/",
        "TUNEPLANE_S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "a",
        "AWS_SECRET_ACCESS_KEY": "b",
        "AWS_MAX_ATTEMPTS": "1",  # the SDK's own setting, honoured
    }
    settings = settings_from(monkeypatch, tmp_path, **env)
    async for store in blob_store(settings):
        with pytest.raises(Unavailable, match="cannot be reached"):
            await store.size("sha256:" + "0" * 64)
