"""The proof run's rules (deploy/gpu/checks.py, deploy/gpu/README.md): what passes, what fails
and what CPU mode leaves unchecked, from the reports check.py gathers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit
_spec = importlib.util.spec_from_file_location(
    "gpu_checks", Path(__file__).resolve().parents[2] / "deploy/gpu/checks.py"
)
assert _spec and _spec.loader
checks = importlib.util.module_from_spec(_spec)
sys.modules["gpu_checks"] = checks
_spec.loader.exec_module(checks)

UUID = "GPU-3f1c0d2e-0000-4000-8000-000000000001"
OTHER = "GPU-3f1c0d2e-0000-4000-8000-000000000002"
LOSSES = {"10": 0.5, "20": 0.25, "30": 0.125}
LOSS = "the loss curve through TunePlane equals what the script wrote"


def a_report(mode: str = "gpu", **changes: Any) -> Any:
    """A run where everything went right on one GPU."""
    member = {
        "cuda_visible_devices": UUID, "device_count": 1, "gpu_uuid": UUID,
        "gpu_name": "NVIDIA H200", "steps": 30, "losses": dict(LOSSES),
        "step_time_median_s": 0.0101,
    }  # fmt: skip
    report = checks.Report(
        mode=mode,
        bare={"step_time_median_s": 0.0100, "device": "cuda"},
        member=member,
        job_id="job-1",
        job={"state": "succeeded"},
        profile="h200:1",
        gpu_model="h200",
        metrics={"series": [{"tag": "train/loss"}, {"tag": "sys/gpu0/utilization"}]},
        cli_metrics={"curves": {"train/loss": {"merged": [{"last": 0.125}]}}},
        raw_loss=[{"step": int(s), "value": v} for s, v in LOSSES.items()],
        raw_utilization=[{"value": 0.0}, {"value": 97.0}],
        inventory={"host": [UUID, OTHER]},
        elapsed_s=300.0,
        contract={"rc": 0, "summary": "2 passed, 60 deselected in 0.4s", "tail": []},
        trl=dict(TRL),
    )
    for key, value in changes.items():
        setattr(report, key, value)
    return report


TRL = {
    "job_id": "job-2", "state": "succeeded", "reason": "", "steps": 8, "loss_points": 8,
    "log": "tuneplane-recipe: trl/sft done after 8 steps\n",
}  # fmt: skip


def test_the_trl_step_fails_on_a_failed_job_or_a_short_curve_and_is_not_made_without_trl() -> None:
    for wrong in ({"state": "failed", "reason": "exited 1"}, {"loss_points": 7}, {"log": ""}):
        report = a_report()
        report.trl = {**TRL, **wrong}
        assert statuses(report)["trl/sft"] == "FAILED", wrong
    report = a_report()
    report.trl = None
    assert statuses(report)["trl/sft"] == "not made"
    assert checks.judge(report)["ok"]  # a Python without TRL fails nothing


def statuses(report: Any) -> dict[str, str]:
    return {c["name"].split(" (")[0]: c["status"] for c in checks.judge(report)["checks"]}


def test_a_good_gpu_run_passes_every_check() -> None:
    result = checks.judge(a_report())
    assert result["ok"], result
    assert {c["status"] for c in result["checks"]} == {"passed"}
    assert result["figures"]["step_time_ratio"] == 1.01


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        ({"job": {"state": "failed", "reason": "exited with code 1"}}, "job succeeded"),
        ({"cuda_visible_devices": f"{UUID},{OTHER}"}, "the member saw exactly its GPU"),
        ({"device_count": 2}, "the member saw exactly its GPU"),
        ({"gpu_uuid": OTHER}, "the member saw exactly its GPU"),
        ({"losses": {**LOSSES, "30": 0.126}}, LOSS),
        ({"losses": {**LOSSES, "40": 0.1}}, LOSS),
        ({"step_time_median_s": 0.0103}, "step time through TunePlane / bare ≤ 1.02"),
    ],
)  # fmt: skip
def test_what_the_member_reports_wrong_fails_its_check(change: dict[str, Any], failed: str) -> None:
    report = a_report()
    report.member = {**report.member, **change} if "job" not in change else report.member
    if "job" in change:
        report.job = change["job"]
    seen = statuses(report)
    assert seen[failed] == "FAILED", seen
    assert [name for name, status in seen.items() if status == "FAILED"] == [failed]
    assert not checks.judge(report)["ok"]


def test_a_uuid_the_host_does_not_have_fails() -> None:
    assert statuses(a_report(inventory={"host": [OTHER]}))["the member saw exactly its GPU"] == (
        "FAILED"
    )


def test_the_real_probes_failing_their_contract_fails_and_shows_pytest() -> None:
    said = {"rc": 1, "summary": "1 failed, 1 passed", "tail": ["E assert [] == [0]", "1 failed"]}
    result = checks.judge(a_report(contract=said))
    [check] = [c for c in result["checks"] if c["name"].startswith("the real NVML")]
    assert check["status"] == "FAILED" and "E assert [] == [0]" in check["detail"]
    skipped = {"rc": 0, "summary": "2 skipped, 60 deselected", "tail": []}  # no GPU seen
    assert (
        statuses(a_report(contract=skipped))[
            "the real NVML and nvidia-smi probes pass the GPU probe contract"
        ]
        == "FAILED"
    )


def test_no_utilisation_above_zero_fails_on_a_gpu() -> None:
    seen = statuses(a_report(raw_utilization=[{"value": 0.0}]))
    assert seen["GPU utilisation > 0 in the member's system series"] == "FAILED"


def test_a_run_that_could_not_be_made_fails_and_says_why() -> None:
    result = checks.judge(a_report(error="tp up exited 1: port taken", member=None, job=None))
    assert not result["ok"]
    made = {"name": "the run was made", "status": "FAILED", "detail": "tp up exited 1: port taken"}
    assert made in result["checks"]


def test_cpu_mode_on_a_cpu_profile_leaves_the_gpu_checks_unchecked() -> None:
    member = {"cuda_visible_devices": None, "device_count": 0, "losses": dict(LOSSES),
              "step_time_median_s": 0.5}  # fmt: skip
    report = a_report("cpu", member=member, gpu_model=None, profile="cpu:1", raw_utilization=[])
    result = checks.judge(report)
    assert result["ok"]
    seen = statuses(report)
    assert seen["job succeeded"] == seen[LOSS] == "passed"
    for name in ("the member saw exactly its GPU", "step time through TunePlane / bare ≤ 1.02",
                 "the real NVML and nvidia-smi probes pass the GPU probe contract",
                 "GPU utilisation > 0 in the member's system series"):  # fmt: skip
        assert seen[name] == checks.NOT_CPU
    assert "finished in under 8 minutes" not in seen


def test_cpu_mode_on_the_recorded_nvml_checks_the_binding_and_the_series() -> None:
    member = {"cuda_visible_devices": UUID, "device_count": 0, "losses": dict(LOSSES),
              "step_time_median_s": 0.5}  # fmt: skip
    report = a_report("cpu", member=member, fake_nvml="h200.xml")
    seen = statuses(report)
    assert seen["the member saw exactly its GPU"] == "passed"
    assert seen["GPU utilisation > 0 in the member's system series"] == "passed"
    no_series = statuses(a_report("cpu", member=member, fake_nvml="h200.xml", raw_utilization=[]))
    assert no_series["GPU utilisation > 0 in the member's system series"] == "FAILED"
    elsewhere = {**member, "cuda_visible_devices": "GPU-not-in-the-recording"}
    assert (
        statuses(a_report("cpu", member=elsewhere, fake_nvml="h200.xml"))[
            "the member saw exactly its GPU"
        ]
        == "FAILED"
    )
