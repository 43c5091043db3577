"""The whole collector, from a members directory to the drained marker, against a recording
Telemetry server (tests/fixtures/recording_telemetry.py); member files and their errors."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest

from adapters.grpc.telemetry_client import open_channel
from adapters.telemetry.collector import Collector, CollectorOptions, read_member_file
from adapters.telemetry.spool import Spool
from domain.errors import InvalidInput
from tests.fixtures.recording_telemetry import Net, until, write_lines

pytestmark = pytest.mark.integration


def member_file(members: Path, metrics: Path, name: str, *, ended: bool = False) -> None:
    body = {
        "job": "j1",
        "attempt": "a1",
        "member": name,
        "index": 0,
        "token": f"token-{name}",
        "metrics_dir": str(metrics),
        "ended": ended,
    }
    fd = os.open(members / f"{name}.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)


async def test_the_collector_from_member_files_to_the_drained_marker(
    tmp_path: Path, net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    members = tmp_path / "members"
    members.mkdir()
    metrics = tmp_path / "metrics-m1"
    points = write_lines(metrics / "train.jsonl", range(500))
    with (metrics / "train.jsonl").open("ab") as f:
        f.write(b'{"step": 9999, "tra')  # cut short: counted corrupt once the member ended
    member_file(members, metrics, "m1")
    (members / "broken.json").write_text("{not json")
    options = CollectorOptions(
        tmp_path / "spool", members, f"127.0.0.1:{net.port}", net.pki.ca.cert
    )
    spool = Spool(options.spool)
    channel = open_channel("127.0.0.1", net.port, net.pki.ca.cert)
    collector = Collector(options, spool, channel)
    try:
        with caplog.at_level(logging.ERROR, "tuneplane.collector"):
            await collector.step()
            await collector.step()
        assert "broken.json" in caplog.text and "is not JSON" in caplog.text
        assert caplog.text.count("broken.json") == 1  # once per version of the file
        await until(lambda: len(net.recording.points("m1")) == points)
        assert not (members / "m1.drained").exists()
        member_file(members, metrics, "m1", ended=True)
        for _ in range(200):
            await collector.step()
            if (members / "m1.drained").exists():
                break
            await asyncio.sleep(0.05)
        assert (members / "m1.drained").exists()
        assert collector.runs == {}
        assert spool.pending("m1") == 0 and spool.sources("m1") == {}
        assert net.recording.accepted[-1].counters.corrupt_records == 1
        assert len(net.recording.points("m1")) == points
        await collector.step()  # the daemon has not removed the files yet: nothing restarts
        assert collector.runs == {}
    finally:
        await collector.close()
        channel.close()
        spool.close()


async def test_an_ended_member_whose_token_is_refused_is_given_up(tmp_path: Path, net: Net) -> None:
    net.recording.deny = True
    members = tmp_path / "members"
    members.mkdir()
    write_lines(tmp_path / "metrics" / "train.jsonl", range(50))
    member_file(members, tmp_path / "metrics", "m1")
    options = CollectorOptions(
        tmp_path / "spool", members, f"127.0.0.1:{net.port}", net.pki.ca.cert
    )
    spool = Spool(options.spool)
    channel = open_channel("127.0.0.1", net.port, net.pki.ca.cert)
    collector = Collector(options, spool, channel)
    try:
        await collector.step()
        await until(lambda: collector.runs["m1"].shipper.refused is not None)
        await collector.step()
        assert "m1" in collector.runs and spool.pending("m1") == 50  # running: kept
        member_file(members, tmp_path / "metrics", "m1", ended=True)
        await collector.step()
        assert (members / "m1.drained").exists()
        assert spool.pending("m1") == 0
    finally:
        await collector.close()
        channel.close()
        spool.close()


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("[1, 2]", "is not a JSON object"),
        ('{"job": "j"}', '"attempt" must be a non-empty string'),
        (
            '{"job": "j", "attempt": "a", "member": "m1", "token": "t", "metrics_dir": "rel",'
            ' "index": 0}',
            "is not an absolute path",
        ),
        (
            '{"job": "j", "attempt": "a", "member": "m1", "token": "t", "metrics_dir": "/m",'
            ' "index": -1}',
            '"index" must be an integer >= 0',
        ),
        (
            '{"job": "j", "attempt": "a", "member": "m1", "token": "t", "metrics_dir": "/m",'
            ' "index": 0, "ended": "yes"}',
            '"ended" must be true or false',
        ),
        (
            '{"job": "j", "attempt": "a", "member": "../x", "token": "t", "metrics_dir": "/m",'
            ' "index": 0}',
            "but the file is named m1.json",
        ),
    ],
)
def test_a_malformed_member_file_is_named_with_what_is_wrong(
    tmp_path: Path, body: str, complaint: str
) -> None:
    path = tmp_path / "m1.json"
    path.write_text(body)
    with pytest.raises(InvalidInput) as caught:
        read_member_file(path)
    assert str(path) in caught.value.message and complaint in caught.value.message
    assert "node daemon" in caught.value.fix
