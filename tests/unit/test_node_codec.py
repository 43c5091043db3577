"""A Prepare survives the wire whole, the Job Capsule flag included."""

from __future__ import annotations

import dataclasses

import pytest

from adapters.grpc.node_codec import gateway_message_from, gateway_message_to
from proto import node_control_pb2 as pb
from tests.support.journal_writer import entry

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("capsule", [True, False])
def test_a_prepare_round_trips(capsule: bool) -> None:
    order = dataclasses.replace(entry("w", 3).order, capsule=capsule, collector_token="tok")
    wire = gateway_message_to(7, order, 30.0)
    _, body, _ = gateway_message_from(pb.GatewayMessage.FromString(wire.SerializeToString()))
    assert body == order
