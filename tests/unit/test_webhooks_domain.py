"""Webhooks' pure parts: which URLs are refused and why, the bodies, the signature (and the
receiver's snippet in docs/notifications.md, run as written), the back-off schedule."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from domain.errors import InvalidInput
from domain.lifecycle import JobState
from domain.webhooks import (
    Format,
    JobChange,
    Retry,
    Scope,
    StoredSecret,
    Subscription,
    body,
    check_url,
    event,
    headers,
    parse_states,
    ping_event,
    signature_header,
    verify,
)

pytestmark = pytest.mark.unit
DOC = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"
AT = datetime(2026, 12, 5, 16, 0, tzinfo=UTC)
CHANGE = JobChange("job-1", 3, JobState.RUNNING, JobState.STARTING, "", "alice", "default", AT)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://hooks.example.org/x", "plain http"),
        ("ftp://hooks.example.org/x", "not an https:// URL"),
        ("https:///nohost", "not an https:// URL"),
        ("hooks.example.org/x", "not an https:// URL"),
        ("https://user:pw@hooks.example.org/x", "credentials"),
        ("https://user@hooks.example.org/x", "credentials"),
        ("https://hooks.example.org/x\x00y", "control character"),
        ("https://hooks.example.org/x\r\nHost: evil", "control character"),
        ("https://hooks.example.org/x y", "space"),
        ("https://hööks.example.org/x", "non-ASCII"),
        ("https://hooks.example.org/x#frag", "fragment"),
        ("https://hooks.example.org:0/x", "port is 0"),
        ("https://hooks.example.org:99999/x", "cannot be parsed"),
        ("https://hooks.example.org/" + "a" * 2048, "over 2048"),
        ("https://127.0.0.1/x", "loopback"),
        ("https://127.9.9.9:8443/x", "loopback"),
        ("https://[::1]/x", "loopback"),
        ("https://[::ffff:127.0.0.1]/x", "loopback"),
        ("https://localhost/x", "loopback"),
        ("https://LocalHost./x", "loopback"),
        ("https://a.localhost/x", "loopback"),
        ("http://127.0.0.1/x", "loopback"),
        ("", "not an https:// URL"),
    ],
)
def test_hostile_urls_are_refused_naming_the_problem(url: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_url(url, allow_loopback=False)
    assert says in caught.value.message, caught.value.message
    assert caught.value.field == "url" and caught.value.fix


@pytest.mark.parametrize("value", [None, 3, b"https://x.org", ["https://x.org"]])
def test_a_url_of_the_wrong_type_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="not text"):
        check_url(value, allow_loopback=True)


def test_good_urls_pass_and_loopback_only_where_allowed() -> None:
    for url in (
        "https://hooks.example.org/x?a=1",
        "https://10.0.0.7:8443/h",
        "https://[2001:db8::1]/",
    ):
        assert check_url(url, allow_loopback=False) == url
    assert check_url("http://127.0.0.1:9/x", allow_loopback=True) == "http://127.0.0.1:9/x"
    assert check_url("https://[::1]:9/x", allow_loopback=True)
    with pytest.raises(InvalidInput, match="plain http"):  # allowing loopback allows no more
        check_url("http://10.0.0.7/x", allow_loopback=True)


def test_states_are_checked_and_ordered() -> None:
    assert parse_states(["failed", "PENDING", "failed"]) == (JobState.PENDING, JobState.FAILED)
    assert parse_states([]) == ()
    with pytest.raises(InvalidInput, match="not a job state") as caught:
        parse_states(["runing"])
    assert "running" in caught.value.fix


def test_the_event_names_the_change_and_its_id_is_stable() -> None:
    e = event(CHANGE)
    assert e["id"] == "job-1.3" == CHANGE.event_id
    assert e["type"] == "job.state_changed"
    assert e["job"] == {
        "id": "job-1", "owner": "alice", "queue": "default", "state": "running",
        "previous_state": "starting", "reason": "", "seq": 3,
    }  # fmt: skip
    assert body(e, Format.TUNEPLANE) == body(event(CHANGE), Format.TUNEPLANE)  # same bytes


def test_the_slack_body_is_one_text() -> None:
    failed = JobChange("job-2", 5, JobState.FAILED, JobState.RUNNING, "exit 3", "bob", "q", AT)
    slack = json.loads(body(event(failed), Format.SLACK))
    assert list(slack) == ["text"]
    assert (
        slack["text"] == "TunePlane: job job-2 (bob, queue q) is now *failed* (was running): exit 3"
    )
    sub = Subscription(
        "wh-1", "bob", Scope.USER, "bob", "https://x.org", (), Format.SLACK, AT, StoredSecret("s")
    )
    assert (
        "test of webhook" in json.loads(body(ping_event("test-1", sub, AT), Format.SLACK))["text"]
    )


def test_a_signature_verifies_and_tampering_or_replay_fails() -> None:
    payload = body(event(CHANGE), Format.TUNEPLANE)
    now = 1_800_000_000
    header = signature_header("whsec_k", now, payload)
    assert re.fullmatch(r"t=1800000000,v1=[0-9a-f]{64}", header)
    assert verify("whsec_k", header, payload, now)
    assert verify("whsec_k", header, payload, now + 300)  # 5 minutes: still accepted
    assert not verify("whsec_k", header, payload, now + 301)  # a replay
    assert not verify("whsec_k", header, payload, now - 301)  # from a clock far ahead
    assert not verify("whsec_other", header, payload, now)
    assert not verify("whsec_k", header, payload + b" ", now)
    forged_time = header.replace("t=1800000000", "t=1800000100")
    assert not verify("whsec_k", forged_time, payload, now + 100)  # the time is signed too
    for broken in ("", "v1=abc", "t=x,v1=abc", "t=1,t=2,v1=abc", f"t={now}"):
        assert not verify("whsec_k", broken, payload, now)


def _doc_verify() -> Any:
    text = DOC.read_text()
    snippet = text.split("<!-- verify-snippet -->", 1)[1].split("```python", 1)[1]
    code = snippet.split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace["verify"]


def test_the_docs_snippet_verifies_what_the_server_signs() -> None:
    doc_verify = _doc_verify()
    payload = body(event(CHANGE), Format.TUNEPLANE)
    now = int(time.time())
    sent = headers("whsec_k", CHANGE.event_id, "wh-1", now, payload)
    assert sent["TunePlane-Event-Id"] == "job-1.3"
    assert doc_verify("whsec_k", sent["TunePlane-Signature"], payload)
    assert not doc_verify("whsec_x", sent["TunePlane-Signature"], payload)
    assert not doc_verify("whsec_k", sent["TunePlane-Signature"], payload.replace(b"1", b"2"))
    old = headers("whsec_k", CHANGE.event_id, "wh-1", now - 301, payload)
    assert not doc_verify("whsec_k", old["TunePlane-Signature"], payload)


def test_back_off_doubles_up_to_its_cap_with_jitter_in_half_to_one() -> None:
    retry = Retry(max_attempts=5, base=timedelta(seconds=10), cap=timedelta(seconds=60))
    assert [retry.delay(n, 0.999999).total_seconds() for n in (1, 2, 3, 4, 5)] == pytest.approx(
        [10, 20, 40, 60, 60], rel=1e-5
    )
    assert [retry.delay(n, 0.0).total_seconds() for n in (1, 2, 3)] == [5, 10, 20]
    assert retry.delay(10_000, 0.5) <= timedelta(seconds=60)  # no overflow far out
    assert retry.delay(0, -3.0) == timedelta(seconds=5)  # out-of-range inputs clamp
    assert [retry.gives_up(n) for n in (4, 5, 6)] == [False, True, True]
