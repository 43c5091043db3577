"""The control plane with its blobs in S3 (a real SeaweedFS server, tests/fixtures/s3.py): the
real `tp` CLI uploads a source archive larger than one part (a multipart upload with its
declared digest), the server builds the Job Capsule (larger than one part too: a multipart
upload to a temporary key, copied to its digest), and a job on the local backend runs from that
capsule, read back from the bucket and checked against its digest."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.s3 import S3Server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_a_job_runs_from_its_capsule_in_s3(
    api_servers_factory: Any, s3_server: S3Server, s3_prefix: str, tmp_path: Path
) -> None:
    servers = await api_servers_factory(1, **s3_server.env(s3_prefix))
    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", servers.url, "--token", servers.token)
    cli("init", str(tmp_path / "ws"))
    cli.cwd = tmp_path / "ws"
    cli("new", "big", "--method", "custom/custom")
    data = os.urandom(9 * 1024 * 1024)  # incompressible: the archive is over 8 MiB too
    (cli.cwd / "big" / "data.bin").write_bytes(data)
    (cli.cwd / "big" / "train.sh").write_text("sha256sum data.bin\n")

    out = cli("submit", "big", "--profile", "cpu:1", "--yes")
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"}, timeout=120)
    logs = cli("job", "logs", job_id).stdout
    assert job["state"] == "succeeded", (job, logs)
    assert hashlib.sha256(data).hexdigest() in logs

    spec = json.loads(cli("job", "status", job_id, "--json").stdout)["spec"]
    async with s3_server.client() as s3:
        listed = await s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=s3_prefix)
        uploads = await s3.list_multipart_uploads(Bucket=s3_server.bucket, Prefix=s3_prefix)
    keys = {o["Key"]: o["Size"] for o in listed["Contents"]}
    capsule = s3_prefix + "sha256/" + spec["capsule"]["blob"].removeprefix("sha256:")
    source = s3_prefix + "sha256/" + spec["source"]["digest"].removeprefix("sha256:")
    assert keys == {capsule: spec["capsule"]["size"], source: spec["source"]["size"]}
    assert min(keys.values()) > 8 * 1024 * 1024 and not uploads.get("Uploads")
    assert not [p for p in servers.state_dir.rglob("sha256/*/*") if p.is_file()]  # none local
    assert s3_server.secret_key not in (servers.state_dir / "serve-0.log").read_text()
