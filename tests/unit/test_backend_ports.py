"""Backends are registered under the port they keep (domain/backend_ports.py), and the use cases
dispatch on that registration: a name is under one port only, and asking for a backend that is
not enabled names the enabled ones, whichever port they keep."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from adapters.sim.nodes import SimNodeBackend
from domain.errors import InvalidInput
from tests.support.context import memory_context

pytestmark = pytest.mark.unit


def test_dispatch_follows_the_port_a_backend_is_registered_under(tmp_path: Path) -> None:
    base = memory_context(tmp_path)
    node = SimNodeBackend()
    ctx = dataclasses.replace(base, coordinated={"node": node})
    assert ctx.direct("local") is base.backends["local"]
    assert ctx.direct("node") is None  # coordinated: its gangs are the coordinator's
    assert ctx.backend("node") is node and ctx.backend("local") is base.backends["local"]
    with pytest.raises(InvalidInput) as caught:
        ctx.direct("slurm")
    assert "backend 'slurm' is not enabled" in caught.value.message
    assert caught.value.fix.endswith("local, node")


def test_a_backend_registered_under_two_ports_is_refused(tmp_path: Path) -> None:
    base = memory_context(tmp_path)
    with pytest.raises(ValueError, match="backend local is registered under two ports"):
        dataclasses.replace(base, coordinated={"local": SimNodeBackend()})
