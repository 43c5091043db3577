"""The proof run (deploy/gpu/check.sh, deploy/gpu/README.md): train once bare, then start
`tp up` with the host-process executor, run the same training as a job through it, check what
came back, print a short report (and write it as JSON), stop everything.

Run by check.sh, with the Python that runs TunePlane (its wheels on PYTHONPATH there):

    python deploy/gpu/check.py --python PY --work DIR --report FILE [--cpu] [--steps N] ...

Exit 0 when every check passed (a check that cannot be made in CPU mode is reported "not
checked (CPU mode)", never passed); 1 when one failed; 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import trl_step  # noqa: E402  (beside this file)
from checks import Report, judge  # noqa: E402

TP = [sys.executable, "-m", "entrypoints.cli.main"]
JOB_ENDED = {"succeeded", "failed", "cancelled"}
WORKLOAD = "gpucheck"


class Failed(Exception):
    """The run could not be made (not a failed check): exit 2 with the reason."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def say(text: str) -> None:
    print(f"==> {text}", file=sys.stderr, flush=True)


def _term_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent (this script) dies, however it dies
    (Linux's PR_SET_PDEATHSIG), so that no `tp up` outlives the run."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _stop_on_term(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through run()'s finally, which stops tp up


class Up:
    """`tp up` in a state directory of its own, on free ports; its node daemon runs members as
    host processes (TUNEPLANE_NODE_EXECUTOR=process, which `tp up` passes on)."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.state = work / "state"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**env, "TUNEPLANE_CONFIG_DIR": str(work / "config")}
        self.env.update(
            TUNEPLANE_NODE_GATEWAY_PORT=str(free_port()),
            TUNEPLANE_TELEMETRY_GATEWAY_PORT=str(free_port()),
            TUNEPLANE_PG_PORT=str(free_port()),
            TUNEPLANE_NODE_EXECUTOR="process",
            PYTHONUNBUFFERED="1",
        )
        self.log = work / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float) -> None:
        self.proc = subprocess.Popen(
            [*TP, "up", "--state-dir", str(self.state), "--port", str(self.port)],
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of check.sh reaches tp up through stop() only
            preexec_fn=_term_with_parent,  # and a check.py killed with -9 still stops it
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Ctrl-C stops it." in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise Failed(f"tp up exited {self.proc.returncode}: {self.tail()}")
            time.sleep(0.3)
        raise Failed(f"tp up was not ready in {timeout:.0f} s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2500:]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tp(self, *args: str, cwd: Path | None = None, ok: bool = True) -> str:
        proc = subprocess.run(
            [*TP, *args], cwd=cwd, env=self.env, capture_output=True, text=True, timeout=120
        )
        if ok and proc.returncode != 0:
            raise Failed(f"tp {' '.join(args)} exited {proc.returncode}: {proc.stderr[-1500:]}")
        return proc.stdout

    def api(self) -> httpx.Client:
        token = (self.state / "admin-token").read_text().strip()
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )


def bare(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The training script run bare: the baseline of the step time."""
    report = work / "bare-report.json"
    cmd = [args.python, str(HERE / "train.py"), "--metrics-dir", str(work / "bare-metrics")]
    cmd += ["--report", str(report), *_size(args)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # TunePlane's wheels: not
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.train_timeout)
    if proc.returncode != 0:
        raise Failed(f"the bare training run exited {proc.returncode}: {proc.stderr[-1500:]}")
    return dict(json.loads(report.read_text()))


def _size(args: argparse.Namespace) -> list[str]:
    # CPU mode: one thread in both runs (the member's cgroup gives it one CPU; two threads on a
    # busy machine wait on each other)
    out = ["--size", "cpu", "--threads", "1"] if args.cpu else ["--size", "gpu"]
    return out + (["--steps", str(args.steps)] if args.steps else [])


def profile_for(api: httpx.Client, wanted: str | None, cpu: bool) -> tuple[str, str | None]:
    """The profile to submit with and the GPU model it names: one GPU of the model `tp up`
    gave pool ``local`` (the host's GPUs, as its daemon detects them). No GPU at all: one CPU
    (CPU mode)."""
    if wanted:
        return wanted, None if wanted.startswith("cpu") else wanted.split(":")[0]
    fleet = api.get("/v1/fleet").raise_for_status().json()
    pools = fleet.get("pools", []) if isinstance(fleet, dict) else fleet
    pool = next((p for p in pools if p.get("name") == "local"), {})
    if pool.get("gpu_model") and pool.get("gpus_per_node"):
        return f"{pool['gpu_model']}:1", str(pool["gpu_model"])
    if not cpu:
        raise Failed(f"pool local has no GPU (tp up found none on this host): {pool}")
    return "cpu:1", None


def wait_node(api: httpx.Client, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        links = api.get("/v1/node-links").raise_for_status().json()
        if any(link.get("node") == "local" for link in links):
            return
        time.sleep(0.5)
    raise Failed(f"the local node daemon did not connect in {timeout:.0f} s")


def submit(up: Up, args: argparse.Namespace, work: Path, profile: str) -> str:
    """The training script as a custom/custom job; its id."""
    ws = work / "ws"
    up.tp("init", str(ws))
    exp = ws / WORKLOAD
    exp.mkdir()
    shutil.copy(HERE / "train.py", exp / "train.py")
    command = " ".join(["python3 train.py", *_size(args)])  # its report: in its outputs
    (exp / "experiment.toml").write_text(
        f'name = "{WORKLOAD}"\nmethod = "custom/custom"\nruntime = "{args.runtime}"\n\n'
        f"[params]\ncommand = {json.dumps(command)}\n"
    )
    out = up.tp("submit", WORKLOAD, "--profile", profile, "--yes", cwd=ws)
    for word in out.split():
        if word.startswith("job-"):
            return word
    raise Failed(f"tp submit printed no job id: {out[-800:]}")


def host_uuids(fake: str | None) -> list[str]:
    """The UUIDs of this host's GPUs as TunePlane's own probe reads them: the recording
    ``fake`` names (CPU mode), else NVML, else nvidia-smi."""
    from adapters.gpu.nvml import open_probe

    probe = open_probe(fake)
    try:
        return [device.uuid for device in probe.inventory().devices]
    finally:
        probe.close()


def member_report(state: Path) -> dict[str, Any] | None:
    """train.py's report, from the member's outputs directory on this host (the node daemon's
    outputs/, one directory per member)."""
    found = sorted((state / "node" / "outputs").glob("**/train-report.json"))
    return dict(json.loads(found[-1].read_text())) if found else None


def follow(api: httpx.Client, job_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = dict(api.get(f"/v1/jobs/{job_id}").raise_for_status().json())
        if job["state"] in JOB_ENDED:
            return job
        time.sleep(1)
    raise Failed(f"job {job_id} did not end in {timeout:.0f} s")


def series(api: httpx.Client, job_id: str, want: int, timeout: float) -> dict[str, Any]:
    """The job's metrics once ``want`` points of train/loss arrived (the collector ships
    after the member wrote them) or the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        summary = dict(api.get(f"/v1/jobs/{job_id}/metrics").raise_for_status().json())
        loss = [s for s in summary["series"] if s["tag"] == "train/loss"]
        if (loss and loss[0]["count"] >= want) or time.monotonic() > deadline:
            return summary
        time.sleep(1)


def raw(api: httpx.Client, job_id: str, one: dict[str, Any]) -> list[dict[str, Any]]:
    """Every raw point of one series, page by page (the raw inspector)."""
    points: list[dict[str, Any]] = []
    params: dict[str, Any] = {
        "attempt": one["attempt"], "member": one["member"], "source": one["source"],
        "tag": one["tag"], "limit": 5000,
    }  # fmt: skip
    while True:
        page = api.get(f"/v1/jobs/{job_id}/metrics/raw", params=params).raise_for_status().json()
        points += page["points"]
        if page.get("next_start") is None:
            return points
        params.update(start=page["next_start"], after_offset=page["next_after_offset"])


CONTRACT = "tests/contract/test_gpu_probe_contract.py"


def contract() -> dict[str, Any]:
    """The real adapters' GPU probe contract (NVML, nvidia-smi) on this host's GPUs: the test
    the CI machine skips for want of a GPU, run here by pytest alone (--noconftest)."""
    cmd = [sys.executable, "-m", "pytest", "--noconftest", "-q", "-rs", "-p", "no:cacheprovider"]
    cmd += [CONTRACT, "-k", "real_adapters"]
    done = subprocess.run(cmd, cwd=HERE.parent.parent, capture_output=True, text=True, timeout=120)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return {"rc": done.returncode, "summary": lines[-1] if lines else "", "tail": lines[-12:]}


def run(args: argparse.Namespace, report: Report) -> None:
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    say(f"bare training run ({'CPU' if args.cpu else 'GPU'}) for the baseline")
    report.bare = bare(args, work)
    if not args.cpu:
        say("the real NVML and nvidia-smi adapters against the probe contract")
        report.contract = contract()
    env = dict(os.environ)
    # the job's runtime is the training Python's environment: its bin/ first on members' PATH
    where = Path(args.python).parent
    env["TUNEPLANE_NODE_RUNTIMES"] = f"{args.runtime}={where},{trl_step.RUNTIME}={where}"
    if args.cpu:
        env.setdefault("TUNEPLANE_GPU_SAMPLE_SECONDS", "0.5")  # a run of seconds gets samples
    up = Up(work, env)
    report.up_log = str(up.log)
    try:
        say("starting tp up (private PostgreSQL, gateways, local daemon --executor process)")
        up.start(args.up_timeout)
        with up.api() as api:
            token = (up.state / "admin-token").read_text().strip()
            up.tp("login", "--server", up.url, "--token", token)
            wait_node(api, 60)
            profile, report.gpu_model = profile_for(api, args.profile, args.cpu)
            report.profile = profile
            say(f"submitting the training job ({profile})")
            job_id = submit(up, args, work, profile)
            report.job_id = job_id
            report.job = follow(api, job_id, args.train_timeout + 120)
            say(f"job {job_id} {report.job['state']}; reading its metrics")
            report.member = member_report(up.state)
            want = len(report.member["losses"]) if report.member else 1
            report.metrics = series(api, job_id, want, args.metrics_timeout)
            report.cli_metrics = json.loads(up.tp("job", "metrics", job_id, "--all", "--json"))
            loss = [s for s in report.metrics["series"] if s["tag"] == "train/loss"]
            report.raw_loss = raw(api, job_id, loss[0]) if loss else []
            gpu = [s for s in report.metrics["series"] if s["tag"] == "sys/gpu0/utilization"]
            report.raw_utilization = raw(api, job_id, gpu[0]) if gpu else []
            report.inventory = {  # where the node's GPU UUIDs are reported
                "fleet": api.get("/v1/fleet").json(),
                "node_links": api.get("/v1/node-links").json(),
                "host": host_uuids(report.fake_nvml),
            }
            report.logs = up.tp("job", "logs", job_id, ok=False)[-4000:]
            report.trl = run_trl(up, api, args, work, profile)
    finally:
        say("stopping tp up")
        up.stop()


def run_trl(
    up: Up, api: httpx.Client, args: argparse.Namespace, work: Path, profile: str
) -> dict[str, Any] | None:
    """The `trl/sft` recipe on the same profile, where the training Python has TRL (None: it
    has not, so the step is not made)."""
    versions = trl_step.host_versions(args.python, args.train_site)
    if versions is None:
        say("no TRL in the training Python (and no --train-wheels): the trl/sft step is not made")
        return None
    carried = f", carried in {args.train_site}" if args.train_site else ""
    say(f"trl/sft on runtime {trl_step.RUNTIME} (TRL {versions['frameworks']['trl']}{carried})")
    trl_step.register(up.tp, versions)
    job_id = trl_step.submit(up.tp, work / "ws", profile, args.train_site)
    job = follow(api, job_id, args.train_timeout + 120)
    summary = series(api, job_id, trl_step.STEPS, args.metrics_timeout)
    loss = [s for s in summary["series"] if s["tag"] == "train/loss"]
    return {
        "job_id": job_id,
        "state": job["state"],
        "reason": job.get("reason", ""),
        "steps": trl_step.STEPS,
        "loss_points": loss[0]["count"] if loss else 0,
        "log": up.tp("job", "logs", job_id, ok=False)[-3000:],
    }


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 20:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 20 steps")
    return int(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the Python that trains (has torch)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--steps", type=_positive)
    parser.add_argument("--profile")
    parser.add_argument("--runtime", default="busybox")
    parser.add_argument(
        "--train-site", help="TRL's own directory for the trl/sft job's members (PYTHONPATH)"
    )
    parser.add_argument("--max-ratio", type=float, default=1.02)
    parser.add_argument("--up-timeout", type=float, default=180)
    parser.add_argument("--train-timeout", type=float, default=240)
    parser.add_argument("--metrics-timeout", type=float, default=60)
    args = parser.parse_args()
    report = Report(mode="cpu" if args.cpu else "gpu", max_ratio=args.max_ratio)
    report.fake_nvml = os.environ.get("TUNEPLANE_FAKE_NVML") or None
    signal.signal(signal.SIGTERM, _stop_on_term)
    started = time.monotonic()
    code = 0
    try:
        run(args, report)
    except (Failed, httpx.HTTPError, OSError, subprocess.TimeoutExpired) as exc:
        report.error = str(exc)
        code = 2
    report.elapsed_s = round(time.monotonic() - started, 1)
    result = judge(report)
    args.report.write_text(json.dumps(result, indent=2))
    for check in result["checks"]:
        print(f"{check['status']:>20}  {check['name']}: {check['detail']}")
    for name, value in result["figures"].items():
        print(f"{'figure':>20}  {name}: {value}")
    if report.error:
        print(f"error: {report.error}", file=sys.stderr)
    print(f"report: {args.report}")
    return code or (0 if result["ok"] else 1)


if __name__ == "__main__":
    sys.exit(main())
