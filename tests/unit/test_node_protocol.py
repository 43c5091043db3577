"""The node control protocol's pure rules: which command a member needs, what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.node_protocol import (
    LIVE_PHASES,
    STOPPED_PHASES,
    Command,
    CommandKind,
    Decision,
    EngineScan,
    MemberRef,
    Phase,
    Placed,
    absence_unproven,
    accepts_phase,
    command_for,
    copy_command,
    missing_unproven,
    not_its_engine,
    refusal,
    stale_command,
)

pytestmark = pytest.mark.unit

REF = MemberRef("att-1", "mem-1", 0, 3)


def placed(
    decision: Decision | None = None,
    *,
    final: bool = False,
    stop: bool = False,
    released: bool = False,
    fenced: bool = False,
    node: str = "n1",
) -> Placed:
    return Placed(REF, "job-1", node, decision, final, stop, released, fenced)


def kind(p: Placed | None, held: Phase | None) -> CommandKind | None:
    cmd = command_for(p, held, REF)
    return cmd.kind if cmd else None


class TestCommandFor:
    def test_undecided_and_not_held_is_prepared(self) -> None:
        assert kind(placed(), None) is CommandKind.PREPARE

    @pytest.mark.parametrize("held", [Phase.PREPARING, Phase.PREPARED, Phase.REFUSED])
    def test_undecided_waits_for_the_vote(self, held: Phase) -> None:
        assert kind(placed(), held) is None

    @pytest.mark.parametrize("held", sorted(LIVE_PHASES))
    def test_nothing_may_run_without_a_commit(self, held: Phase) -> None:
        assert kind(placed(), held) is CommandKind.STOP
        assert kind(placed(Decision.ABORT), held) is CommandKind.STOP

    def test_commit_starts_only_prepared_members(self) -> None:
        assert kind(placed(Decision.COMMIT), Phase.PREPARED) is CommandKind.COMMIT
        assert kind(placed(Decision.COMMIT), Phase.PREPARING) is None
        assert kind(placed(Decision.COMMIT), None) is None

    @pytest.mark.parametrize("held", [Phase.PREPARING, Phase.PREPARED])
    def test_abort_rolls_back_prepared_members(self, held: Phase) -> None:
        assert kind(placed(Decision.ABORT), held) is CommandKind.ABORT

    @pytest.mark.parametrize("held", sorted(STOPPED_PHASES))
    def test_abort_forgets_what_holds_nothing(self, held: Phase) -> None:
        assert kind(placed(Decision.ABORT), held) is CommandKind.FORGET

    def test_a_stop_before_start_is_an_abort(self) -> None:
        assert kind(placed(Decision.COMMIT, stop=True), Phase.PREPARED) is CommandKind.ABORT

    def test_a_commit_is_said_again_until_its_member_reports_started(self) -> None:
        # the node journalled STARTING but its engine may not have made the start
        assert kind(placed(Decision.COMMIT), Phase.STARTING) is CommandKind.COMMIT
        assert kind(placed(Decision.COMMIT, stop=True), Phase.STARTING) is CommandKind.STOP
        assert kind(placed(Decision.COMMIT, final=True), Phase.STARTING) is CommandKind.STOP

    def test_running_members_are_stopped_on_request_or_when_final(self) -> None:
        assert kind(placed(Decision.COMMIT), Phase.RUNNING) is None
        assert kind(placed(Decision.COMMIT, stop=True), Phase.RUNNING) is CommandKind.STOP
        assert kind(placed(Decision.COMMIT, final=True), Phase.RUNNING) is CommandKind.STOP

    def test_exited_members_are_forgotten_once_recorded_final(self) -> None:
        assert kind(placed(Decision.COMMIT), Phase.EXITED) is None
        assert kind(placed(Decision.COMMIT, final=True), Phase.EXITED) is CommandKind.FORGET

    @pytest.mark.parametrize("held", list(Phase))
    def test_unknown_fenced_or_released_members_are_forgotten(self, held: Phase) -> None:
        assert kind(None, held) is CommandKind.FORGET
        assert kind(placed(Decision.COMMIT, fenced=True), held) is CommandKind.FORGET
        assert kind(placed(Decision.COMMIT, released=True), held) is CommandKind.FORGET

    def test_nothing_is_said_about_what_nobody_holds(self) -> None:
        assert kind(None, None) is None
        assert kind(placed(fenced=True), None) is None
        assert kind(placed(Decision.COMMIT, final=True), None) is None

    @given(
        st.sampled_from([None, Decision.COMMIT, Decision.ABORT]),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.sampled_from([None, *Phase]),
    )
    def test_a_start_needs_a_commit_and_no_stop(
        self,
        decision: Decision | None,
        final: bool,
        stop: bool,
        released: bool,
        fenced: bool,
        held: Phase | None,
    ) -> None:
        p = placed(decision, final=final, stop=stop, released=released, fenced=fenced)
        if kind(p, held) is CommandKind.COMMIT:
            # prepared, or starting: a start its engine may not have made is said again
            assert decision is Decision.COMMIT and held in (Phase.PREPARED, Phase.STARTING)
            assert not (final or stop or released or fenced)


class TestRefusal:
    def test_accepts_the_member_as_placed(self) -> None:
        assert refusal(placed(), REF, "n1") is None

    def test_unknown_member(self) -> None:
        assert "unknown" in (refusal(None, REF, "n1") or "")

    def test_other_node(self) -> None:
        assert "placed on node n1, not n2" in (refusal(placed(), REF, "n2") or "")

    def test_stale_epoch(self) -> None:
        old = MemberRef("att-1", "mem-1", 0, 2)
        assert "stale epoch 2" in (refusal(placed(), old, "n1") or "")

    def test_fenced(self) -> None:
        assert "fenced" in (refusal(placed(fenced=True), REF, "n1") or "")

    def test_other_attempt(self) -> None:
        other = MemberRef("att-2", "mem-1", 0, 3)
        assert "belongs to attempt att-1" in (refusal(placed(), other, "n1") or "")


class TestPhases:
    def test_forward_moves_only(self) -> None:
        assert accepts_phase(None, Phase.PREPARING)
        assert accepts_phase(Phase.PREPARED, Phase.RUNNING)
        assert not accepts_phase(Phase.RUNNING, Phase.STARTING)
        assert not accepts_phase(Phase.RUNNING, Phase.RUNNING)

    @pytest.mark.parametrize("final", sorted(STOPPED_PHASES))
    def test_a_final_phase_is_never_rewritten(self, final: Phase) -> None:
        assert not any(accepts_phase(final, p) for p in Phase)


class TestStaleCommand:
    def test_starts_from_before_a_fence_are_refused(self) -> None:
        for k in (CommandKind.PREPARE, CommandKind.COMMIT):
            assert stale_command(Command(k, REF), welcomed_epoch=4) is not None
            assert stale_command(Command(k, REF), welcomed_epoch=3) is None

    def test_stops_are_always_obeyed(self) -> None:
        for k in (CommandKind.ABORT, CommandKind.STOP, CommandKind.FORGET):
            assert stale_command(Command(k, REF), welcomed_epoch=9) is None


# -- proof of end (issue 18, defect 1) ----------------------------------------------------------

ENGINE = "ABCD:EFGH:engine-of-the-machine-that-ran-it"
FULL = EngineScan(ENGINE, True)


def test_only_a_full_scan_of_the_engine_it_was_prepared_on_proves_a_member_gone() -> None:
    assert absence_unproven(FULL, ENGINE, "mem-1", "n1") is None
    unproven = {
        "no scan (older daemon)": absence_unproven(None, ENGINE, "mem-1", "n1"),
        "engine down": absence_unproven(
            EngineScan(ENGINE, False, "the engine does not answer"), ENGINE, "mem-1", "n1"
        ),
        "another machine": absence_unproven(EngineScan("OTHER", True), ENGINE, "mem-1", "n1"),
        "not re-adoptable": absence_unproven(
            EngineScan(ENGINE, True, "", ("mem-1",)), ENGINE, "mem-1", "n1"
        ),
        "engine never recorded": absence_unproven(FULL, "", "mem-1", "n1"),
    }
    for case, why in unproven.items():
        assert why is not None, case
        assert why.startswith("node n1 does not account for it, and that proves nothing: "), why
        assert "`tp node fence n1" in why, why
    assert "the engine does not answer" in (unproven["engine down"] or "")
    other = "engine OTHER, not ABCD:EFGH:engine-of-the-machine-that-ran-it where"
    assert other in (unproven["another machine"] or "")


def test_a_missing_report_counts_only_from_the_engine_it_was_prepared_on() -> None:
    assert missing_unproven(FULL, ENGINE, "n1") is None
    assert missing_unproven(None, "", "n1") is None  # prepared before engines were recorded
    assert missing_unproven(EngineScan(ENGINE, False, "down"), ENGINE, "n1") is None  # same engine
    assert missing_unproven(EngineScan("OTHER", True), ENGINE, "n1") is not None
    assert missing_unproven(None, ENGINE, "n1") is not None
    assert missing_unproven(EngineScan("", False, "down"), ENGINE, "n1") is not None


def test_a_member_belongs_to_the_engine_that_voted_for_it() -> None:
    assert not_its_engine(ENGINE, FULL, "mem-1") is None
    assert not_its_engine("", EngineScan("OTHER", True), "mem-1") is None  # no vote recorded yet
    other = not_its_engine(ENGINE, EngineScan("OTHER", True), "mem-1")
    assert other is not None and "this daemon uses container engine OTHER" in other
    unnamed = not_its_engine(ENGINE, EngineScan("", False, "down"), "mem-1")
    assert unnamed is not None and "did not say which container engine" in unnamed
    assert not_its_engine(ENGINE, None, "mem-1") is not None


def test_a_copy_on_another_engine_is_aborted_then_forgotten_and_never_started() -> None:
    kinds = {
        phase: (cmd.kind if (cmd := copy_command(phase, REF, "OTHER", ENGINE)) else None)
        for phase in (None, *Phase)
    }
    assert kinds == {
        None: None,  # nothing is prepared there
        Phase.PREPARING: CommandKind.ABORT,
        Phase.PREPARED: CommandKind.ABORT,
        Phase.REFUSED: CommandKind.FORGET,
        Phase.ABORTED: CommandKind.FORGET,
        Phase.STARTING: None,  # a started copy is never killed on a guess
        Phase.RUNNING: None,
        Phase.EXITED: None,
        Phase.MISSING: None,
    }
    for phase in Phase:  # a daemon that cannot name its engine may yet be the member's own
        assert copy_command(phase, REF, "", ENGINE) is None
