"""An exit by SIGKILL the engine has not yet put down to the OOM killer is looked at again for
a moment (adapters/container_engine/spec.py ``oom_unsettled``): on cgroup v2, moby's OOM event
can arrive after the exit (hashicorp/nomad#13119), and ``State.OOMKilled`` is set then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from adapters.container_engine.spec import OOM_SETTLE_SECONDS, oom_unsettled

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 5, 11, 50, 0, tzinfo=UTC)


def state(code: int, oom: bool, ago: float) -> dict[str, object]:
    finished = (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%S.123456789Z")
    return {"State": {"ExitCode": code, "OOMKilled": oom, "FinishedAt": finished}}


def test_only_a_fresh_sigkill_without_its_cause_waits() -> None:
    assert oom_unsettled(state(137, False, 0.5), NOW)
    assert not oom_unsettled(state(137, True, 0.5), NOW)  # the cause is known: recorded
    assert not oom_unsettled(state(1, False, 0.5), NOW)  # not a SIGKILL
    assert not oom_unsettled(state(143, False, 0.5), NOW)
    assert not oom_unsettled(state(137, False, OOM_SETTLE_SECONDS + 2), NOW)  # waited enough
    assert not oom_unsettled({"State": {"ExitCode": 137, "FinishedAt": "garbage"}}, NOW)
    assert not oom_unsettled({}, NOW)
