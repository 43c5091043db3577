"""What the node-protocol nemesis (``adapters/sim/nemesis.py``) is set with and keeps: the
rates of its faults, the gateway's skewed clock, and each daemon's machine."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from adapters.sim.nodes import SimNode


@dataclass(frozen=True, slots=True)
class NemesisRates:
    """Probabilities: per step for the first group, per delivered message for the second."""

    daemon_kill: float = 0.06
    journal_loss: float = 0.05  # a row of a stopped daemon's journal (or, 1 in 5, all of it)
    impostor: float = 0.04
    gateway_kill: float = 0.03
    coordinator_kill: float = 0.06
    partition: float = 0.04
    skew: float = 0.05
    member_exit: float = 0.2
    cancel: float = 0.02
    fence: float = 0.005
    engine_outage: float = 0.04  # a node's engine stops answering for 1-4 steps
    submit: float = 0.15
    # per message
    reset: float = 0.02
    drop: float = 0.02
    duplicate: float = 0.03


class SkewedClock:
    """The gateway's clock: the coordinator's plus an offset the nemesis moves."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return self.base.now() + self.offset  # type: ignore[no-any-return]


@dataclass
class Machine:
    """A daemon on a machine: the real one of a node, or an impostor holding a copied
    credential (its own journal and engine)."""

    node: SimNode
    impostor: bool = False
    instance: str = ""  # the daemon process's id (a new one at each start)
    down_until: int | None = None  # a killed daemon restarts at this step
    silent_since: datetime | None = None  # partitioned since (the gateway's clock)
    engine_back: int | None = None  # its engine, out, answers again at this step
