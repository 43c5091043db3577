"""The Kubernetes backend end to end: a real `tp serve` process configured with
TUNEPLANE_KUBERNETES_CONFIG (its kubeconfig naming the fake API server) and a fleet file with a
`kubernetes` pool; the real `tp` CLI registers a runtime by registry digest and submits; the
test plays Kueue, the Job controller and the kubelet on the fake (docs/kubernetes.md)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.kube_api import FakeKubeAPI
from tests.support.kube_controllers import Controllers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
T = TypeVar("T")
DIGEST = "sha256:" + "ab" * 32
FLEET = """
[[pools]]
name = "local"
backend = "local"
cpus_per_node = 4
memory_mb_per_node = 8192
nodes = ["local"]

[[pools]]
name = "k8s"
backend = "kubernetes"
cpus_per_node = 8
memory_mb_per_node = 16384
nodes = 2
"""
CONFIG = """
[kubernetes]
kubeconfig = "{kubeconfig}"

[kubernetes.pools.k8s]
namespace = "ml"
queue = "team-a"
"""


class ThreadedFake:
    """The fake API server on its own event loop and thread: the test's blocking CLI calls do
    not stop it from answering the API process."""

    def __init__(self) -> None:
        self.api = FakeKubeAPI()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> str:
        self.thread.start()
        return asyncio.run_coroutine_threadsafe(self.api.start(), self.loop).result(30)

    def do(self, fn: Callable[..., T], *args: Any) -> T:
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(fn(*args))
            except Exception as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(call)
        return done.result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.api.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture
def fake() -> Iterator[ThreadedFake]:
    f = ThreadedFake()
    f.start()
    yield f
    f.stop()


def until(what: str, probe: Callable[[], T | None], limit: float = 60) -> T:
    deadline = time.monotonic() + limit  # a bound on a hang, not a measured time
    while (found := probe()) is None:
        assert time.monotonic() < deadline, f"no {what} after {limit}s"
        time.sleep(0.1)
    return found


async def test_a_job_on_a_kubernetes_pool_is_admitted_by_kueue_and_succeeds(
    api_servers_factory: Any, fake: ThreadedFake, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": fake.api.url}}],
                "users": [{"name": "tp", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tp"}}],
                "current-context": "fake",
            }
        )
    )
    config, fleet = tmp_path / "kubernetes.toml", tmp_path / "fleet.toml"
    config.write_text(CONFIG.format(kubeconfig=kubeconfig))
    fleet.write_text(FLEET)
    server = await api_servers_factory(
        1, TUNEPLANE_KUBERNETES_CONFIG=str(config), TUNEPLANE_FLEET_FILE=str(fleet)
    )
    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", server.url, "--token", server.token)
    cli("init", str(tmp_path / "ws"))
    cli.cwd = tmp_path / "ws"

    image = "registry.example/busybox:1.36"
    cli("runtime", "add", "bb-k8s", "--image", image, "--digest", DIGEST)
    cli("new", "hello", "--method", "custom/custom", "--runtime", "bb-k8s")
    out = cli("submit", "hello", "--profile", "k8s/cpu:1", "--yes").stdout
    job_id = job_id_in(out)

    job = until("Job", lambda: next(iter(fake.do(fake.api.all, "jobs", "ml")), None))
    name = job["metadata"]["name"]
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert trainer["image"] == f"registry.example/busybox@{DIGEST}"
    assert cli.status(job_id)["state"] == "starting"

    controllers = Controllers(fake.api)
    fake.do(controllers.admit, name)
    fake.do(controllers.pods, name, 1)
    cli.wait_state(job_id, {"running"})
    fake.api.logs[("ml", f"{name}-0-x0")] = b"hello from kubernetes\n"
    fake.do(controllers.exit, name, 0, 0)
    fake.do(controllers.complete, name)
    final = cli.wait_state(job_id, {"succeeded", "failed"})
    assert final["state"] == "succeeded", final
    assert final["spec"]["backend"] == "kubernetes"
    assert "hello from kubernetes" in cli("job", "logs", job_id).stdout
    until("release", lambda: True if not fake.do(fake.api.all, "jobs", "ml") else None)
