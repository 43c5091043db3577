"""One control plane per backend for the parity suite (tests/e2e/test_backend_parity.py): how a
2-member job is submitted, driven and cancelled from outside on each. The suite itself only talks
to the API and the CLI; a rig adds what only that backend can do (kill a container, scancel, play
the Kubernetes controllers on the fake API server)."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.nodes import NodeCluster
from tests.fixtures.server import TP, Servers
from tests.fixtures.slurm import SlurmCluster
from tests.support import http

FINAL = {"succeeded", "failed", "cancelled"}


def wait_for(what: str, probe: Any, limit: float = 120) -> Any:
    """``probe()``'s first truthy answer; ``limit`` bounds a hang, it measures nothing."""
    deadline = time.monotonic() + limit
    while not (found := probe()):
        assert time.monotonic() < deadline, f"no {what} after {limit}s: {found!r}"
        time.sleep(0.2)
    return found


@dataclass
class Rig:
    backend: str
    servers: Servers
    cli: Cli
    profile: str  # a profile that makes two members

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return http.request(
            method, self.servers.url + path, headers=self.servers.headers, timeout=30, **kw
        )

    def json(self, path: str) -> Any:
        resp = self.api("GET", path)
        assert resp.status_code == 200, f"GET {path}: {resp.status_code} {resp.text}"
        return resp.json()

    def submit(self, command: str) -> str:
        out = self.cli(
            "submit", "parity", "--profile", self.profile, "--set", f"command={command}", "--yes"
        )
        return job_id_in(out.stdout)

    def job(self, job_id: str) -> dict[str, Any]:
        return self.json(f"/v1/jobs/{job_id}")  # type: ignore[no-any-return]

    def wait(self, job_id: str, states: set[str], limit: float = 180) -> dict[str, Any]:
        return wait_for(  # type: ignore[no-any-return]
            f"{job_id} in {states}",
            lambda: (j := self.job(job_id))["state"] in states and j,
            limit,
        )

    def log(self, job_id: str, member: int) -> tuple[int, str]:
        resp = self.api("GET", f"/v1/jobs/{job_id}/logs", params={"member": member})
        return resp.status_code, resp.text

    # -- what differs per backend --------------------------------------------------------------

    def drive(self, job_id: str, scenario: str, workload: Workload) -> None:
        """Let the job run (``ok``: to success, ``fail``: member 1 exits 3, ``signal``: member
        1 kills itself with SIGKILL, ``long``: keep running); only the Kubernetes rig has to
        play the cluster for it."""

    def outside_cancel(self, job: dict[str, Any]) -> None:
        """End member 0 behind TunePlane's back, as an operator would on this backend."""
        raise NotImplementedError

    def spool_is_durable(self) -> bool:
        """Whether the collector's spool outlives the member (``durable_spool``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop what the rig started beside the control plane."""


@dataclass
class Workload:
    """What the parity job's members write: TensorBoard events and JSONL (files of the
    experiment, copied into the metrics directory), an output file, and a line on stdout."""

    events: bytes
    jsonl: str
    steps: int
    lines: int

    COMMAND = (
        'i="${TUNEPLANE_MEMBER_INDEX:-?}"; '
        'echo "parity-member-$i metrics=${TUNEPLANE_METRICS_DIR:-unset}'
        ' outputs=${TUNEPLANE_OUTPUT_DIR:-unset}"; '
        'if [ -n "${TUNEPLANE_METRICS_DIR:-}" ]; then '
        'cp events.bin "$TUNEPLANE_METRICS_DIR/events.out.tfevents.1.parity$i" && '
        'cp eval.jsonl "$TUNEPLANE_METRICS_DIR/eval.jsonl" || exit 4; fi; '
        'if [ -n "${TUNEPLANE_OUTPUT_DIR:-}" ]; then '
        'echo "result of member $i" > "$TUNEPLANE_OUTPUT_DIR/result-$i.txt" || exit 5; fi; '
        'echo "parity-done-$i"'
    )
    # member 1 fails (exit 3, or SIGKILL), member 0 runs on until the gang rule stops it
    FAIL = 'i=$TUNEPLANE_MEMBER_INDEX; echo "parity-member-$i"; [ "$i" = 1 ] && exit 3; sleep 600'
    SIGNAL = (
        'i=$TUNEPLANE_MEMBER_INDEX; echo "parity-member-$i"; '
        '[ "$i" = 1 ] && kill -KILL $$; sleep 600'
    )
    LONG = 'echo "parity-member-${TUNEPLANE_MEMBER_INDEX:-?} long"; sleep 600'


def engine_call(docker_host: str, method: str, path: str) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=docker_host.removeprefix("unix://"))
    with httpx.Client(transport=transport, base_url="http://engine", timeout=30) as client:
        return client.request(method, path)


@dataclass
class DockerRig(Rig):
    """local and node: every member is a container ``tp-<member id>`` on the test's engine."""

    docker_host: str = ""
    cluster: NodeCluster | None = None

    def outside_cancel(self, job: dict[str, Any]) -> None:
        member = job["attempts"][-1]["members"][0]["id"]
        resp = engine_call(self.docker_host, "POST", f"/containers/tp-{member}/kill")
        assert resp.status_code == 204, resp.text  # docker kill: SIGKILL

    def spool_is_durable(self) -> bool:
        if self.cluster is None:
            raise AssertionError("the local backend has no collector, hence no spool")
        spools = [d.state_dir / "collector" / "spool" for d in self.cluster.daemons.values()]
        return bool(spools) and all((s / "spool.sqlite").exists() for s in spools)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()


@dataclass
class SlurmRig(Rig):
    slurm: SlurmCluster | None = None
    shared: Path = Path()
    spool_root: Path = Path()  # TUNEPLANE_SLURM_COLLECTOR_SPOOL: the nodes' local disk

    def spool_is_durable(self) -> bool:
        # each member's collector spools in <root>/tp-<attempt>-<rank>, removed once drained
        return any(self.spool_root.glob("tp-*"))

    def outside_cancel(self, job: dict[str, Any]) -> None:
        assert self.slurm is not None
        path = self.shared / job["attempts"][-1]["id"] / "slurm-job-id"
        slurm_id = wait_for(f"{path}", lambda: path.exists() and path.read_text().strip())
        subprocess.run(["scancel", slurm_id], env=self.slurm.env(), check=True, timeout=60)


NS = "ml"


@dataclass
class KubeRig(Rig):
    """The fake API server (tests/fixtures/kube_api.py), Kueue, the Job controller and the
    kubelet played by the test, and each pod's collector sidecar run as the kubelet would run
    it: ``tp collector`` with the pod's member file (from the attempt's Secret, its metrics
    directory mapped to the host directory standing for the pod's ``emptyDir``), shipping over
    TLS to a real telemetry gateway."""

    fake: Any = None  # tests.e2e.test_kubernetes_e2e.ThreadedFake
    telemetry: NodeCluster | None = None  # only its telemetry gateway runs
    root: Path = Path()
    sidecars: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _last_volumes: dict[str, Any] = field(default_factory=dict)  # the last pod template's

    def _workload(self, job_id: str) -> str:
        def find() -> str | None:
            for job in self.fake.do(self.fake.api.all, "jobs", NS):
                if job["metadata"].get("annotations", {}).get("tuneplane.io/job") == job_id:
                    return str(job["metadata"]["name"])
            return None

        return wait_for(f"the Job of {job_id}", find)  # type: ignore[no-any-return]

    def _pod(self, name: str, index: int) -> str:
        return f"{name}-{index}-x{index}"

    def pod_volumes(self, job_id: str) -> dict[str, Any]:
        name = self._workload(job_id)
        job = self.fake.do(self.fake.api.get, "jobs", NS, name)
        return {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}

    def spool_is_durable(self) -> bool:
        volume = self._last_volumes.get("collector-state", {})
        return "emptyDir" not in volume

    def drive(self, job_id: str, scenario: str, workload: Workload) -> None:
        from tests.support.kube_controllers import Controllers

        name = self._workload(job_id)
        self._last_volumes = self.pod_volumes(job_id)
        controllers = Controllers(self.fake.api)
        self.fake.do(controllers.admit, name)
        self.fake.do(controllers.pods, name, 2)
        self.wait(job_id, {"running"} | FINAL)
        if scenario == "long":
            for i in range(2):
                self.fake.api.logs[(NS, self._pod(name, i))] = f"parity-member-{i} long\n".encode()
            return
        if scenario in ("fail", "signal"):
            code = 3 if scenario == "fail" else 137  # exit 3, or killed by SIGKILL
            for i in range(2):
                self.fake.api.logs[(NS, self._pod(name, i))] = f"parity-member-{i}\n".encode()
            self.fake.do(controllers.exit, name, 1, code)  # member 0 runs on
            failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                      "message": "Job has reached the specified backoff limit"}  # fmt: skip
            self.fake.do(
                self.fake.api.merge, "jobs", NS, name, {"status": {"conditions": [failed]}}
            )
            return
        metrics = "collector-token" in self._last_volumes
        for i in range(2):
            where = self._run_member(name, i, workload) if metrics else "unset"
            text = f"parity-member-{i} metrics={where} outputs=unset\nparity-done-{i}\n"
            self.fake.api.logs[(NS, self._pod(name, i))] = text.encode()
        if metrics:  # the pods end once their sidecars shipped (within the termination grace)
            wait_for("both members' metrics", lambda: _shipped(self, job_id, workload), 120)
        for i in range(2):
            self.fake.do(controllers.exit, name, i, 0)
        self.fake.do(controllers.complete, name)
        self._stop_sidecars()

    def _run_member(self, name: str, index: int, workload: Workload) -> str:
        """The training container's files and the pod's collector sidecar."""
        secret = wait_for(
            f"member {index}'s collector file",
            lambda: (
                (self.fake.do(self.fake.api.get, "secrets", NS, f"{name}-collector") or {})
                .get("data", {})
                .get(f"member-{index}.json")
            ),
        )
        member = json.loads(base64.b64decode(secret))
        pod = self.root / self._pod(name, index)
        metrics, members, spool = pod / "metrics", pod / "members", pod / "spool"
        for d in (metrics, members, spool):
            d.mkdir(parents=True)
        shown = member["metrics_dir"]  # the container's path; the host's directory stands for it
        member["metrics_dir"] = str(metrics)
        (members / f"{member['member']}.json").write_text(json.dumps(member))
        (metrics / f"events.out.tfevents.1.parity{index}").write_bytes(workload.events)
        (metrics / "eval.jsonl").write_text(workload.jsonl)
        assert self.telemetry is not None
        log = (pod / "collector.log").open("wb")
        self.sidecars.append(
            subprocess.Popen(
                [TP, "collector", "--spool", str(spool), "--members", str(members),
                 "--gateway", f"127.0.0.1:{self.telemetry.telemetry_port}",
                 "--ca", str(self.telemetry.ca), "--poll", "0.2"],
                env=self.telemetry.env, stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        return str(shown)

    def _stop_sidecars(self) -> None:
        for proc in self.sidecars:
            proc.terminate()
        for proc in self.sidecars:
            proc.wait(15)
        self.sidecars.clear()

    def outside_cancel(self, job: dict[str, Any]) -> None:
        """``kubectl delete pod`` of member 0: the kubelet stops its container (SIGTERM: 143)
        while the pod is deleting; with ``backoffLimit: 0`` the Job controller fails the Job."""
        name = self._workload(job["id"])
        pod = self._pod(name, 0)
        done = {"terminated": {"exitCode": 143, "reason": "Error"}}  # SIGTERM, as the kubelet
        status = {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": done}]}
        deleting = {"deletionTimestamp": "2026-01-01T00:01:00Z"}
        self.fake.do(self.fake.api.merge, "pods", NS, pod, {"metadata": deleting, "status": status})
        failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                  "message": "Job has reached the specified backoff limit"}  # fmt: skip
        self.fake.do(self.fake.api.merge, "jobs", NS, name, {"status": {"conditions": [failed]}})

    def close(self) -> None:
        self._stop_sidecars()
        if self.telemetry is not None:
            self.telemetry.stop_telemetry()


def _shipped(rig: Rig, job_id: str, workload: Workload) -> bool:
    return expected_series(rig.json(f"/v1/jobs/{job_id}/metrics"), workload) is None


def expected_series(summary: dict[str, Any], workload: Workload) -> str | None:
    """None when every member's TensorBoard and JSONL points are all there; else what is not."""
    counts = {  # the workload's own files (a node's collector adds its system series)
        (s["member"], s["tag"]): s["count"]
        for s in summary["series"]
        if not s["source"].startswith("system#")
    }
    want = {
        (m, tag): n
        for m in (0, 1)
        for tag, n in (("train/loss", workload.steps), ("eval/acc", workload.lines))
    }
    return None if counts == want else f"series {counts}, want {want}"
