"""Blob collection end to end: the real `tp` CLI against a real API process and PostgreSQL. A
live preview keeps its archive and capsule; an archive nobody uses goes (a dry run first only
names it); members may not collect."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.e2e.test_runtimes import member
from tests.e2e.test_walkthrough import Cli
from tests.fixtures.server import Servers
from tests.support import http
from tests.support.archives import tar_gz

pytestmark = [pytest.mark.e2e]


def collect(cli: Cli, *args: str) -> dict[str, Any]:
    out = cli("admin", "blobs", "collect", "--grace-hours", "0", "--json", *args).stdout
    answer: dict[str, Any] = json.loads(out)
    return answer


def test_unused_archives_go_and_live_previews_keep_theirs(cli: Cli, api_server: Servers) -> None:
    cli("new", "hello", "--method", "custom/custom")
    cli("submit", "hello", "--profile", "cpu:1", "--preview")  # its archive and capsule
    assert collect(cli, "--dry-run")["deleted"] == 0
    data = tar_gz({"train.py": b"an archive nobody previews"})
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    up = http.post(
        api_server.url + "/v1/archives",
        content=data,
        headers={**api_server.headers, "X-Content-Digest": digest},
    )
    assert up.status_code == 201, up.text

    dry = collect(cli, "--dry-run")
    assert (dry["deleted"], dry["deleted_digests"], dry["dry_run"]) == (1, [digest], True)
    assert dry["freed_bytes"] == len(data) and dry["kept"] >= 2
    text = cli("admin", "blobs", "collect", "--grace-hours", "0", "--dry-run").stdout
    assert "would delete 1 blob(s)" in text and digest in text
    assert collect(cli)["deleted_digests"] == [digest]
    assert collect(cli)["deleted"] == 0

    bob = member(cli, "bob")
    denied = bob("admin", "blobs", "collect", ok=False)
    assert denied.returncode == 5 and "may not collect unused blobs" in denied.stderr
    bad = cli("admin", "blobs", "collect", "--grace-hours", "-1", ok=False)
    assert bad.returncode == 2 and "--grace-hours -1.0 is out of range" in bad.stderr
