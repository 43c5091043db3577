"""deploy/ for Kubernetes: the Helm chart renders, with Helm's own engine (its Go SDK, v4, through
the `helm-python-sdk` wheel: no helm binary is packaged for these machines), to manifests that
pass `helm lint --strict` and Kubernetes' own OpenAPI schemas (`kubernetes-validate`, strict:
an unknown field is an error); the RBAC manifest and the chart grant the same least privilege,
and the example configs are what the backend and Kueue expect."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from adapters.kubernetes.config import load, parse

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "tuneplane"
DEPLOY = ROOT / "deploy" / "kubernetes"
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
NAMESPACED = {"Deployment", "Service", "ServiceAccount", "ConfigMap", "Role", "RoleBinding", "Job"}


def rendered(values: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm template tp CHART --namespace tuneplane` with ``values``, by Helm's engine."""
    chart = helm_python.Chart.load(CHART)
    try:
        files = chart.render(values, name="tp", namespace="tuneplane", is_install=True)
    finally:
        chart.close()
    return [d for _, text in sorted(files.items()) for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return rendered({"telemetry": {"caCert": CA}})


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_every_manifest_is_a_named_object(docs: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Service",
            "Deployment",
            "Service",
            "Job",
        ]
    )
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"], d
        if d["kind"] in NAMESPACED:
            assert d["metadata"]["namespace"], d


def test_the_deployments_run_tp_with_the_database_secret(docs: list[dict[str, Any]]) -> None:
    commands = {}
    for dep in by_kind(docs, "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        assert (
            dep["spec"]["selector"]["matchLabels"].items()
            <= dep["spec"]["template"]["metadata"]["labels"].items()
        )
        (container,) = pod["containers"]
        commands[container["name"]] = container["command"][:3]
        env = {e["name"]: e for e in container["env"]}
        assert env["TUNEPLANE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "tuneplane-database",
            "key": "url",
        }
    assert commands == {"api": ["tp", "serve", "--host"], "gateway": ["tp", "gateway", "telemetry"]}
    api = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "tp-api")
    assert api["spec"]["template"]["spec"]["serviceAccountName"] == "tp"


def test_every_api_replica_reads_one_secrets_key_file(docs: list[dict[str, Any]]) -> None:
    api = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "tp-api")
    pod = api["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    path = Path(env["TUNEPLANE_SECRETS_KEY_FILE"])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "tuneplane-secrets-key"
    assert volume["secret"]["items"] == [{"key": "secrets.key", "path": path.name}]
    assert volume["secret"]["defaultMode"] == 0o400 and mount["readOnly"] is True


def test_the_backend_config_in_the_chart_is_one_the_backend_reads(
    docs: list[dict[str, Any]],
) -> None:
    import tomllib

    config = next(d for d in docs if d["metadata"]["name"] == "tp-kubernetes")
    options = parse(tomllib.loads(config["data"]["kubernetes.toml"]))
    assert options.pools["h200"].queue == "team-a"
    ca = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "tuneplane-ca"]
    assert [(c["metadata"]["namespace"], c["data"]["ca.crt"]) for c in ca] == [("ml", CA)]


def test_the_chart_and_the_rbac_manifest_grant_the_same_least_privilege(
    docs: list[dict[str, Any]],
) -> None:
    manifest = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]
    (role,) = by_kind(manifest, "Role")
    (chart_role,) = by_kind(docs, "Role")
    assert chart_role["rules"] == role["rules"]
    verbs = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert verbs[("", "pods")] == {"get", "list", "watch"}  # pods are never created or deleted
    assert verbs[("kueue.x-k8s.io", "workloads")] == {"get", "list", "watch"}
    assert not any(v & {"*", "escalate", "bind", "impersonate"} for v in verbs.values())
    assert not by_kind(manifest, "ClusterRole") and not by_kind(docs, "ClusterRole")
    (binding,) = by_kind(docs, "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tp", "namespace": "tuneplane"}
    ]


def test_without_a_ca_no_ca_configmap_is_rendered() -> None:
    assert not [d for d in rendered({}) if d["metadata"]["name"] == "tuneplane-ca"]


def test_the_examples_agree_with_each_other() -> None:
    options = load(DEPLOY / "kubernetes.toml")
    kueue = [d for d in yaml.safe_load_all((DEPLOY / "kueue-example.yaml").read_text()) if d]
    flavors = {
        d["metadata"]["name"]: d["spec"]["nodeLabels"] for d in by_kind(kueue, "ResourceFlavor")
    }
    queues = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind(kueue, "LocalQueue")
    }
    for name, pool in options.pools.items():
        assert (pool.namespace, pool.queue) in queues, name
        assert dict(pool.node_selector) in flavors.values(), name
    (cq,) = by_kind(kueue, "ClusterQueue")
    used = {f["name"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]}
    assert used == set(flavors)


KUBERNETES = kubernetes_validate.latest_version()  # the schemas the wheel ships


@pytest.mark.parametrize("values", [{}, {"telemetry": {"caCert": CA}}], ids=["bare", "with-ca"])
def test_the_chart_lints_and_every_manifest_passes_the_kubernetes_schema(
    values: dict[str, Any],
) -> None:
    linted = helm_python.lint(CHART, values, strict=True, namespace="tuneplane")
    assert linted["errors"] == [], linted
    rbac = [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d]
    for doc in [*rendered(values), *rbac]:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_schema_check_refuses_a_manifest_kubernetes_would(docs: list[dict[str, Any]]) -> None:
    api = copy.deepcopy(by_kind(docs, "Deployment")[0])  # the module's docs stay as rendered
    api["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError, match="'two' is not of type"):
        kubernetes_validate.validate(api, KUBERNETES, strict=True)
    api["spec"]["replicas"] = 2
    api["spec"]["template"]["spec"]["containers"][0]["comand"] = ["tp"]  # a typo: unknown field
    with pytest.raises(kubernetes_validate.ValidationError, match="comand"):
        kubernetes_validate.validate(api, KUBERNETES, strict=True)
