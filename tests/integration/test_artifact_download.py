"""Downloading one artifact file (``GET /v1/jobs/{id}/artifacts/{attempt}/{member}/file``)
from a real `tp serve` on a real PostgreSQL: the jobs, attempts, members and manifests are
stored through the PostgreSQL adapters the server reads, and the files written where the
server's local backend keeps members' outputs (``<state dir>/outputs/<job>/<attempt>/<i>/``),
so each test makes exactly the case it checks (a job per test, on one shared server)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from adapters.postgres.engine import create_engine
from adapters.postgres.uow import PostgresUnitOfWork
from domain.artifacts import ArtifactFile, ArtifactRecord, Manifest
from domain.lifecycle import AttemptState, JobState, MemberState
from tests.contract.builders import a_job, a_member, an_attempt
from tests.fixtures.server import Servers
from tests.support import http

pytestmark = pytest.mark.integration


@dataclass
class Stored:
    job_id: str
    dir: Path  # the member's output directory on the server's host

    def url(self, server: Servers, attempt: int = 1, member: int = 0) -> str:
        return f"{server.url}/v1/jobs/{self.job_id}/artifacts/{attempt}/{member}/file"


def _store(server: Servers, files: dict[str, bytes], owner: str = "admin", node: str | None = None
           ) -> Stored:  # fmt: skip
    """A succeeded job whose member 0 recorded ``files`` (and wrote them, unless on a node)."""
    job = a_job(owner=owner, state=JobState.SUCCEEDED)
    attempt = an_attempt(job, 1, state=AttemptState.SUCCEEDED)
    member = a_member(attempt, 0, state=MemberState.SUCCEEDED)
    out = server.state_dir / "outputs" / job.id / attempt.id / "0"
    entries = []
    for path, data in files.items():
        entries.append(ArtifactFile(path, len(data), hashlib.sha256(data).hexdigest()))
        if node is None:
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            (out / path).write_bytes(data)
    record = ArtifactRecord(member.id, job.id, attempt.id, 1, 0, Manifest.of(entries),
                            datetime.now(UTC), node)  # fmt: skip

    async def write() -> None:
        engine = create_engine(server.env["TUNEPLANE_DATABASE_URL"])
        try:
            async with PostgresUnitOfWork(engine) as uow:
                await uow.jobs.add(job)
                await uow.attempts.add(attempt)
                await uow.members.add(member)
                await uow.artifacts.record(record)
                await uow.commit()
        finally:
            await engine.dispose()

    asyncio.run(write())
    return Stored(job.id, out)


@pytest.fixture(scope="module")
def server(module_api_server: Servers) -> Iterator[Servers]:
    yield module_api_server


def _get(server: Servers, url: str, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token or server.token}"}
    return http.get(url, params={"path": path}, headers=headers, timeout=30)


def test_a_recorded_file_downloads_whole_with_its_size_name_and_digest(server: Servers) -> None:
    data = bytes(range(256)) * 8192 + b"tail"  # 2 MiB and a bit: several chunks
    stored = _store(server, {"model/weights.bin": data, "ünïcode name.txt": b"x"})
    got = _get(server, stored.url(server), "model/weights.bin")
    assert got.status_code == 200, got.text
    assert got.content == data
    assert got.headers["content-length"] == str(len(data))
    assert got.headers["x-content-digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"].startswith('attachment; filename="weights.bin"')
    named = _get(server, stored.url(server), "ünïcode name.txt")
    assert named.content == b"x"
    assert "filename*=UTF-8''%C3%BCn%C3%AFcode%20name.txt" in named.headers["content-disposition"]


def test_another_users_job_is_not_found_for_a_member(server: Servers) -> None:
    stored = _store(server, {"a.txt": b"secret"}, owner="admin")
    headers = {"Authorization": f"Bearer {server.token}"}
    made = http.post(f"{server.url}/v1/users", json={"name": "dora", "role": "member"},
                     headers=headers)  # fmt: skip
    assert made.status_code == 201, made.text
    token = http.post(f"{server.url}/v1/users/dora/tokens", json={}, headers=headers).json()
    got = _get(server, stored.url(server), "a.txt", token=token["token"])
    assert got.status_code == 404, got.text  # as GET /v1/jobs/{id} answers: nothing to see
    assert "secret" not in got.text
    listed = http.get(f"{server.url}/v1/jobs/{stored.job_id}", headers={"Authorization":
                      f"Bearer {token['token']}"})  # fmt: skip
    assert listed.status_code == got.status_code  # the same rule as the other job routes
    assert _get(server, stored.url(server), "a.txt").content == b"secret"  # its owner may


def test_unknown_paths_attempts_and_members_are_404_naming_what_exists(server: Servers) -> None:
    stored = _store(server, {"a.txt": b"a"})
    missing = _get(server, stored.url(server), "b.txt")
    assert missing.status_code == 404 and "b.txt" in missing.json()["detail"]
    assert "tp artifacts ls" in missing.json()["fix"]
    other = _get(server, stored.url(server, attempt=2), "a.txt")
    assert other.status_code == 404
    assert "recorded: attempt 1 member 0" in other.json()["detail"]
    assert _get(server, stored.url(server, member=1), "a.txt").status_code == 404
    nojob = f"{server.url}/v1/jobs/job-nope/artifacts/1/0/file"
    assert _get(server, nojob, "a.txt").status_code == 404


@pytest.mark.parametrize(
    "path",
    ["../a.txt", "/etc/passwd", "a/../../x", "./a.txt", "a//b", "a\\b", "x" * 5000, "a\nb", ""],
)
def test_paths_that_leave_the_directory_or_are_malformed_are_400(
    server: Servers, path: str
) -> None:
    stored = _stored_once(server)
    got = _get(server, stored.url(server), path)
    assert got.status_code == 400, got.text
    assert got.json()["field"] in ("query.path", "path")
    assert got.json()["fix"]


def test_a_nul_in_the_path_is_400(server: Servers) -> None:
    stored = _stored_once(server)
    got = http.get(stored.url(server) + "?path=a.txt%00.png", headers=server.headers)
    assert got.status_code == 400 and "NUL" in got.text


_ONCE: dict[str, Stored] = {}


def _stored_once(server: Servers) -> Stored:
    if "s" not in _ONCE:
        _ONCE["s"] = _store(server, {"a.txt": b"a"})
    return _ONCE["s"]


def test_a_file_changed_after_recording_is_refused_not_served(server: Servers) -> None:
    stored = _store(server, {"small.txt": b"original", "grown.txt": b"abc"})
    (stored.dir / "small.txt").write_bytes(b"tampered")  # same size, other bytes
    got = _get(server, stored.url(server), "small.txt")
    assert got.status_code == 409, got.text
    assert "not the file recorded" in got.json()["detail"]
    assert "tp artifacts verify" in got.json()["fix"]
    (stored.dir / "grown.txt").write_bytes(b"abcdef")
    grown = _get(server, stored.url(server), "grown.txt")
    assert grown.status_code == 409 and "6 bytes now, 3 recorded" in grown.json()["detail"]


def test_a_large_file_corrupted_at_its_end_is_never_received_whole(server: Servers) -> None:
    """Past one chunk the answer has started before the end is read: the last chunk is held
    back and the connection ends short of Content-Length, so no client takes it as whole."""
    data = b"z" * (3 * 1024 * 1024)
    stored = _store(server, {"big.bin": data})
    (stored.dir / "big.bin").write_bytes(data[:-1] + b"!")
    with pytest.raises(httpx.RemoteProtocolError, match=r"incomplete|without sending complete"):
        _get(server, stored.url(server), "big.bin")


def test_a_link_or_a_removed_file_is_never_followed(server: Servers) -> None:
    stored = _store(server, {"sub/a.txt": b"a", "gone.txt": b"g"})
    (stored.dir / "gone.txt").unlink()
    assert _get(server, stored.url(server), "gone.txt").status_code == 404
    # a member replaced its directory with a link to elsewhere on the host
    (stored.dir / "sub" / "a.txt").unlink()
    (stored.dir / "sub").rmdir()
    outside = stored.dir.parent / "elsewhere"
    outside.mkdir()
    (outside / "a.txt").write_bytes(b"a")
    (stored.dir / "sub").symlink_to(outside)
    got = _get(server, stored.url(server), "sub/a.txt")
    assert got.status_code == 409, got.text
    assert "symbolic link" in got.json()["detail"]


def test_a_file_kept_on_a_node_that_is_not_there_is_503_saying_where(server: Servers) -> None:
    # the node is asked to send it (tests/e2e/test_node_artifacts.py); one not in the fleet
    # cannot be: unavailable now, never "missing"
    stored = _store(server, {"ckpt.pt": b"on the node"}, node="gpu-7")
    got = _get(server, stored.url(server), "ckpt.pt")
    assert got.status_code == 503, got.text
    problem = got.json()
    assert "node gpu-7 is gone from the fleet" in problem["detail"], problem
    assert stored.job_id in problem["detail"] and "tp node ls" in problem["fix"]
