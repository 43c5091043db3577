"""What a node daemon reads back from a container to rebuild a lost journal row
(``adapters/node/executor.found_container``): labels that do not name a member fully are never
guessed at (the member stays unknown), and nothing secret is expected in them."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.node.executor import found_container
from domain.node_protocol import MemberRef

pytestmark = pytest.mark.unit

LABELS = {
    "tuneplane.job": "job-1",
    "tuneplane.attempt": "att-1",
    "tuneplane.member": "mem-1",
    "tuneplane.member-index": "2",
    "tuneplane.epoch": "3",
    "tuneplane.node": "n1",
    "tuneplane.installation": "inst-a",
}


def info(labels: dict[str, str], **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "Id": "c" * 64,
        "Config": {"Labels": labels, "Image": "sha256:" + "ab" * 32},
        "HostConfig": {
            "NanoCpus": 1_500_000_000,
            "Memory": 512 * 1024 * 1024,
            "DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["0", "3", "GPU-uuid"]}],
        },
        "State": {"Status": "running", "StartedAt": "2026-12-05T10:00:00Z"},
        "Mounts": [{"Destination": "/tuneplane/metrics"}, {"Destination": "/shared"}],
    }
    base.update(over)
    return base


def test_a_labelled_container_names_its_member_and_resources() -> None:
    found = found_container(info(LABELS))
    assert found.ref == MemberRef("att-1", "mem-1", 2, 3)
    assert (found.job_id, found.cpus, found.memory_mb, found.gpu_indices) == (
        "job-1",
        1.5,
        512,
        (0, 3),
    )
    assert found.started and found.metrics and found.container_id == "c" * 64


@pytest.mark.parametrize(
    "broken",
    [
        {"tuneplane.member-index": "-1"},
        {"tuneplane.member-index": "two"},
        {"tuneplane.epoch": "0"},
        {"tuneplane.epoch": "1e9"},
        {"tuneplane.attempt": ""},
        {"tuneplane.member": ""},
    ],
)
def test_incomplete_labels_name_no_member(broken: dict[str, str]) -> None:
    assert found_container(info(LABELS | broken)).ref is None
    labels = {k: v for k, v in LABELS.items() if k != "tuneplane.epoch"}
    assert found_container(info(labels)).ref is None


def test_a_created_container_without_limits_or_mounts_is_read_as_such() -> None:
    bare = info(
        LABELS,
        HostConfig={},
        Mounts=None,
        State={"Status": "created", "StartedAt": "0001-01-01T00:00:00Z"},
    )
    found = found_container(bare)
    assert not found.started and not found.metrics
    assert (found.cpus, found.memory_mb, found.gpu_indices) == (0.0, 0, ())
