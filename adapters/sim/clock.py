"""A clock that moves only when told, and ids that count: the simulator's sources of time and
identity, so that one seed always gives the same run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

SIM_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class SimClock:
    """``now()`` is ``start`` plus every ``advance`` so far; it never reads the wall clock."""

    def __init__(self, start: datetime = SIM_EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("the simulated clock needs a timezone-aware start")
        self.start = start
        self.current = start

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go back")
        self.current += timedelta(seconds=seconds)

    @property
    def elapsed(self) -> float:
        """Simulated seconds since the start."""
        return (self.current - self.start).total_seconds()


class CountingIds:
    """``job-000001``, ``att-000002``, …: one counter over every kind, so ids sort by creation."""

    def __init__(self) -> None:
        self._n = 0

    def new(self, kind: str) -> str:
        self._n += 1
        return f"{kind}-{self._n:06d}"
