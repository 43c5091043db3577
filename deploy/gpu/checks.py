"""What the proof run checks (deploy/gpu/check.py gathers, this judges): pure, so the
report's rules can be read in one place. Each check is "passed", "FAILED" or "not checked (CPU
mode)" with what was seen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NOT_CPU = "not checked (CPU mode)"


@dataclass
class Report:
    mode: str  # "gpu" or "cpu"
    max_ratio: float = 1.02
    bare: dict[str, Any] | None = None  # train.py's report, run bare
    member: dict[str, Any] | None = None  # train.py's report, run through TunePlane
    job_id: str | None = None
    job: dict[str, Any] | None = None
    profile: str | None = None
    gpu_model: str | None = None
    metrics: dict[str, Any] | None = None  # GET /v1/jobs/ID/metrics
    cli_metrics: dict[str, Any] | None = None  # tp job metrics ID --all --json
    raw_loss: list[dict[str, Any]] = field(default_factory=list)
    raw_utilization: list[dict[str, Any]] = field(default_factory=list)
    inventory: Any = None  # what the node reported (the API), and the host's own GPU UUIDs
    contract: dict[str, Any] | None = None  # pytest's result of the real probes' contract
    fake_nvml: str | None = None  # CPU mode: the recorded NVML the node's probe answers from
    trl: dict[str, Any] | None = None  # the trl/sft step (None: no TRL in the training Python)
    logs: str = ""
    up_log: str = ""
    error: str | None = None
    elapsed_s: float = 0.0


def _check(name: str, ok: bool | None, detail: str) -> dict[str, str]:
    status = "passed" if ok else ("FAILED" if ok is not None else NOT_CPU)
    return {"name": name, "status": status, "detail": detail}


def _trl(r: Report) -> dict[str, str]:
    name = "trl/sft (tiny Llama) ran through the host-process executor"
    if r.trl is None:
        return {"name": name, "status": "not made", "detail": "no TRL in the training Python"}
    done = f"tuneplane-recipe: trl/sft done after {r.trl['steps']} steps" in r.trl["log"]
    ok = r.trl["state"] == "succeeded" and done and r.trl["loss_points"] >= r.trl["steps"]
    detail = f"{r.trl['state']}, {r.trl['loss_points']} train/loss points of {r.trl['steps']}"
    return _check(name, ok, detail + ("" if ok else f": {r.trl['reason']}"))


def _job(r: Report) -> dict[str, str]:
    if r.job is None:
        return _check("job succeeded", False, "no job ran")
    state = r.job.get("state")
    why = r.job.get("reason") or ""
    detail = f"{r.job_id} {state} {why}".strip()
    if state != "succeeded" and r.logs:
        detail += "; its log ends: " + " | ".join(r.logs.strip().splitlines()[-6:])
    return _check("job succeeded", state == "succeeded", detail)


def _uuids(value: Any) -> set[str]:
    """Every "GPU-…" string anywhere in ``value`` (the fleet's reported inventory)."""
    if isinstance(value, str):
        return {value} if value.startswith("GPU-") else set()
    if isinstance(value, dict):
        return set().union(*(_uuids(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_uuids(v) for v in value)) if value else set()
    return set()


def _one_gpu(r: Report) -> dict[str, str]:
    name = "the member saw exactly its GPU"
    m = r.member
    if m is None:
        return _check(name, False, "the member wrote no report")
    visible = m.get("cuda_visible_devices") or ""
    known = _uuids(r.inventory)
    bound = f"CUDA_VISIBLE_DEVICES={visible or '(unset)'}"
    if r.mode == "cpu":
        if not r.gpu_model:
            return _check(name, None, f"a CPU profile; {bound}")
        # a GPU profile on the recorded NVML: the UUID bound is one the fake reported
        single = "," not in visible and visible.startswith("GPU-")
        inside = not known or visible in known
        return _check(
            name,
            single and inside,
            f"{bound} (one UUID{', of the recorded inventory' if known else ''}); "
            "torch.cuda.device_count() not checked (CPU mode)",
        )
    uuid = m.get("gpu_uuid")
    ok = (
        visible.startswith("GPU-")
        and "," not in visible
        and m.get("device_count") == 1
        and uuid == visible
        and (not known or visible in known)
    )
    return _check(
        name,
        ok,
        f"{bound}, torch.cuda.device_count()={m.get('device_count')}, "
        f"torch's UUID {uuid}" + (f", the node reported {len(known)} GPU(s)" if known else ""),
    )


def _loss(r: Report) -> dict[str, str]:
    name = "the loss curve through TunePlane equals what the script wrote"
    if r.member is None:
        return _check(name, False, "the member wrote no losses")
    wrote = {int(k): float(v) for k, v in r.member["losses"].items()}
    got = {int(p["step"]): p["value"] for p in r.raw_loss}
    cli = (r.cli_metrics or {}).get("curves", {}).get("train/loss")
    last = cli["merged"][-1]["last"] if cli and cli.get("merged") else None
    final = wrote[max(wrote)] if wrote else None
    differ = [s for s in wrote if got.get(s) != wrote[s]]
    ok = bool(wrote) and not differ and set(got) == set(wrote) and last == final
    return _check(
        name,
        ok,
        f"{len(got)}/{len(wrote)} points equal (raw inspector); `tp job metrics` last "
        f"{last} vs written {final}" + (f"; first differing step {min(differ)}" if differ else ""),
    )


def _utilization(r: Report) -> dict[str, str]:
    name = "GPU utilisation > 0 in the member's system series (sys/gpu0/utilization)"
    values = [p["value"] for p in r.raw_utilization if p.get("value") is not None]
    every = (r.metrics or {}).get("series", [])
    tags = sorted(s["tag"] for s in every if s["tag"].startswith("sys/"))
    seen = f"{len(values)} samples, max {max(values) if values else None}; system series: {tags}"
    if r.mode == "cpu":
        if not r.gpu_model or not r.fake_nvml:
            why = "a CPU profile" if not r.gpu_model else "no recorded NVML (TUNEPLANE_FAKE_NVML)"
            return _check(name, None, f"{why}; {seen}")
        return _check(name + " (values from the recorded NVML)", bool(values), seen)
    return _check(name, bool(values) and max(values) > 0, seen)


def _ratio(r: Report) -> tuple[dict[str, str], float | None]:
    name = f"step time through TunePlane / bare ≤ {r.max_ratio}"
    bare = (r.bare or {}).get("step_time_median_s")
    tp = (r.member or {}).get("step_time_median_s")
    ratio = round(tp / bare, 4) if bare and tp else None
    detail = f"median {tp} s / {bare} s = {ratio}"
    if r.mode == "cpu":
        return _check(name, None, detail + " (two runs on a shared CPU: not a measure)"), ratio
    return _check(name, ratio is not None and ratio <= r.max_ratio, detail), ratio


def _contract(r: Report) -> dict[str, str]:
    name = "the real NVML and nvidia-smi probes pass the GPU probe contract"
    if r.mode == "cpu":
        return _check(name, None, "no GPU; CI runs the contract on the recordings")
    if r.contract is None:
        return _check(name, False, "not run")
    summary = r.contract.get("summary", "")
    ok = r.contract.get("rc") == 0 and "2 passed" in summary
    return _check(name, ok, summary if ok else " | ".join(r.contract.get("tail", [])))


def judge(r: Report) -> dict[str, Any]:
    """The report: each check, the figures, and whether every check made passed."""
    ratio_check, ratio = _ratio(r)
    checks = [_contract(r), _job(r), _one_gpu(r), _loss(r), _utilization(r), ratio_check, _trl(r)]
    if r.mode == "gpu":
        checks.append(_check("finished in under 8 minutes", r.elapsed_s < 480, f"{r.elapsed_s} s"))
    if r.error:
        checks.append(_check("the run was made", False, r.error))
    figures = {
        "mode": r.mode,
        "profile": r.profile,
        "device": (r.member or r.bare or {}).get("gpu_name") or (r.bare or {}).get("device"),
        "steps": (r.member or {}).get("steps"),
        "step_time_bare_s": (r.bare or {}).get("step_time_median_s"),
        "step_time_tuneplane_s": (r.member or {}).get("step_time_median_s"),
        "step_time_ratio": ratio,
        "elapsed_s": r.elapsed_s,
    }
    ok = all(c["status"] != "FAILED" for c in checks)
    return {
        "ok": ok, "checks": checks, "figures": figures, "job_id": r.job_id, "up_log": r.up_log,
        "trl": r.trl,
    }  # fmt: skip
