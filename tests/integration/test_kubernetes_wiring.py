"""The Kubernetes backend's configuration and wiring: the TOML file, the kubeconfig, and the
refusals that name the key and the fix (docs/kubernetes.md#configuration)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.kubernetes.config import load, parse
from domain.errors import InvalidInput
from entrypoints.kubernetes import CONFIG_ENV, kubernetes_backends
from entrypoints.settings import Settings
from tests.fixtures.kube_api import FakeKubeAPI

pytestmark = pytest.mark.integration

GOOD = """
[kubernetes]
kubeconfig = "{kubeconfig}"
rendezvous_port = 29400

[kubernetes.collector]
image = "registry.example/tuneplane@sha256:{cd}"
gateway = "tuneplane-telemetry.tuneplane.svc:7443"
ca_configmap = "tuneplane-ca"

[kubernetes.pools.h200]
namespace = "ml"
queue = "team-a"
node_selector = {{ "cloud.example/gpu" = "h200" }}

[kubernetes.pools.cpu]
namespace = "batch"
queue = "cpu"
"""


class _Signer:
    async def issue(self, scope: object, now: object, lifetime_seconds: int) -> str:
        return "token"


async def test_a_configured_control_plane_gets_a_kubernetes_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = FakeKubeAPI()
    await api.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                "users": [{"name": "tp", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tp"}}],
                "current-context": "fake",
            }
        )
    )
    config = tmp_path / "kubernetes.toml"
    config.write_text(GOOD.format(kubeconfig=kubeconfig, cd="cd" * 32))
    monkeypatch.setenv(CONFIG_ENV, str(config))
    wiring = kubernetes_backends(Settings.from_env(), _Signer())
    try:
        backends = await anext(wiring)
        backend = backends["kubernetes"]
        assert await backend.held() == {}  # listed through the kubeconfig's server
        listed = {path for method, path, _ in api.requests if method == "GET"}
        assert {"/api/v1/namespaces/ml/pods", "/apis/batch/v1/namespaces/batch/jobs"} <= listed
    finally:
        await wiring.aclose()
        await api.close()


async def test_without_a_config_there_is_no_kubernetes_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    wiring = kubernetes_backends(Settings.from_env(), _Signer())
    assert await anext(wiring) == {}
    await wiring.aclose()


def test_the_config_is_parsed_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "k.toml"
    path.write_text(GOOD.format(kubeconfig="/k", cd="cd" * 32))
    options = load(path)
    assert options.namespaces == ["batch", "ml"]
    assert options.pools["h200"].node_selector == {"cloud.example/gpu": "h200"}
    assert options.pools["cpu"].gpu_resource == "nvidia.com/gpu"
    assert options.rendezvous_port == 29400 and options.collector is not None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "kubernetes"),
        ({"kubernetes": {}}, "kubernetes.pools"),
        ({"kubernetes": {"pools": {"a": {"queue": "q"}}}}, "kubernetes.pools.a.namespace"),
        (
            {"kubernetes": {"pools": {"a": {"namespace": "ML", "queue": "q"}}}},
            "kubernetes.pools.a.namespace",
        ),
        ({"kubernetes": {"pools": {"a": {"namespace": "ml"}}}}, "kubernetes.pools.a.queue"),
        (
            {
                "kubernetes": {
                    "pools": {"a": {"namespace": "ml", "queue": "q", "node_selector": {"k": 1}}}
                }
            },
            "kubernetes.pools.a.node_selector",
        ),
        (
            {
                "kubernetes": {
                    "rendezvous_port": 0,
                    "pools": {"a": {"namespace": "ml", "queue": "q"}},
                }
            },
            "kubernetes.rendezvous_port",
        ),
    ],
)
def test_a_bad_config_names_the_key_and_the_fix(data: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse(data)
    assert info.value.field == field and info.value.fix


def test_an_unreadable_config_says_which_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read the Kubernetes config"):
        load(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[kubernetes\n")
    with pytest.raises(InvalidInput, match="is not TOML"):
        load(bad)
