"""What the operator tells the Kubernetes backend (docs/kubernetes.md#configuration).

Read from a TOML file (``TUNEPLANE_KUBERNETES_CONFIG``) by :func:`parse`; every refusal names
the key and the fix.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from domain.errors import InvalidInput

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$"
)


@dataclass(frozen=True, slots=True)
class PoolTarget:
    """Where a TunePlane pool's members go: a namespace, a Kueue LocalQueue in it, and the node
    labels of the pool's Kueue ResourceFlavor (put in the pods' nodeSelector, so Kueue can only
    assign that flavor and the scheduler only those nodes)."""

    namespace: str
    queue: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    priority_class: str | None = None  # a Kueue WorkloadPriorityClass
    # a PersistentVolumeClaim in the namespace that keeps checkpoints across attempts, or None:
    # members get no checkpoint directory (docs/checkpoints.md#the-kubernetes-backend-built)
    checkpoint_claim: str | None = None


@dataclass(frozen=True, slots=True)
class Collector:
    """The telemetry sidecar: TunePlane's image, the gateway, and a ConfigMap with its CA."""

    image: str
    gateway: str  # HOST:PORT of the telemetry gateway, as pods reach it
    ca_configmap: str  # holds ca.crt, in each namespace members run in


@dataclass(frozen=True, slots=True)
class KubernetesOptions:
    pools: Mapping[str, PoolTarget]
    kubeconfig: str | None = None  # None: the in-cluster service account
    context: str | None = None
    collector: Collector | None = None  # None: members get no collector (no metrics shipped)
    rendezvous_port: int = 29500
    termination_grace_seconds: int = 30
    watch_timeout_seconds: int = 300  # the server ends each watch after this; we resume

    @property
    def namespaces(self) -> list[str]:
        return sorted({p.namespace for p in self.pools.values()})


def _str(table: Mapping[str, Any], key: str, where: str, required: bool = True) -> str | None:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidInput(
            f"{where}.{key} must be a non-empty string",
            fix=f'set {key} = "…" under [{where}]',
            field=f"{where}.{key}",
        )
    return value


def _claim(table: Mapping[str, Any], where: str, default: str | None) -> str | None:
    """``checkpoint_claim``: a PersistentVolumeClaim's name (a pool's own, else the default)."""
    claim = _str(table, "checkpoint_claim", where, False)
    if claim is None:
        return default
    if not _DNS_SUBDOMAIN.match(claim):
        raise InvalidInput(
            f"{where}.checkpoint_claim {claim!r} is not a PersistentVolumeClaim name",
            fix="use lower-case letters, digits, '-' and '.' (a DNS subdomain), e.g."
            ' checkpoint_claim = "tuneplane-checkpoints"',
            field=f"{where}.checkpoint_claim",
        )
    return claim


def parse(data: Mapping[str, Any]) -> KubernetesOptions:
    """The options from the file's ``[kubernetes]`` table."""
    top = data.get("kubernetes")
    if not isinstance(top, dict):
        raise InvalidInput(
            "the Kubernetes config has no [kubernetes] table",
            fix="see docs/kubernetes.md#configuration for an example",
            field="kubernetes",
        )
    pools_in = top.get("pools")
    if not isinstance(pools_in, dict) or not pools_in:
        raise InvalidInput(
            "the Kubernetes config maps no pool",
            fix="add [kubernetes.pools.NAME] with namespace and queue for each pool",
            field="kubernetes.pools",
        )
    claim = _claim(top, "kubernetes", None)
    pools: dict[str, PoolTarget] = {}
    for name, table in pools_in.items():
        where = f"kubernetes.pools.{name}"
        if not isinstance(table, dict):
            raise InvalidInput(f"{where} is not a table", fix="write it as [{where}]", field=where)
        namespace = _str(table, "namespace", where) or ""
        if not _DNS_LABEL.match(namespace):
            raise InvalidInput(
                f"{where}.namespace {namespace!r} is not a namespace name",
                fix="use lower-case letters, digits and '-' (a DNS label)",
                field=f"{where}.namespace",
            )
        selector = table.get("node_selector", {})
        if not isinstance(selector, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
        ):
            raise InvalidInput(
                f"{where}.node_selector must map label names to strings",
                fix='write it as node_selector = { "example.com/gpu" = "h200" }',
                field=f"{where}.node_selector",
            )
        pools[name] = PoolTarget(
            namespace=namespace,
            queue=_str(table, "queue", where) or "",
            node_selector=dict(selector),
            gpu_resource=_str(table, "gpu_resource", where, False) or "nvidia.com/gpu",
            priority_class=_str(table, "priority_class", where, False),
            checkpoint_claim=_claim(table, where, claim),
        )
    collector = None
    if isinstance(top.get("collector"), dict):
        c = top["collector"]
        where = "kubernetes.collector"
        collector = Collector(
            image=_str(c, "image", where) or "",
            gateway=_str(c, "gateway", where) or "",
            ca_configmap=_str(c, "ca_configmap", where) or "",
        )
    port = top.get("rendezvous_port", 29500)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidInput(
            f"kubernetes.rendezvous_port {port!r} is not a TCP port",
            fix="use 1 to 65535 (29500 is torchrun's default)",
            field="kubernetes.rendezvous_port",
        )
    return KubernetesOptions(
        pools=pools,
        kubeconfig=_str(top, "kubeconfig", "kubernetes", False),
        context=_str(top, "context", "kubernetes", False),
        collector=collector,
        rendezvous_port=port,
        termination_grace_seconds=int(top.get("termination_grace_seconds", 30)),
    )


def load(path: Path) -> KubernetesOptions:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise InvalidInput(
            f"cannot read the Kubernetes config {path}: {exc.strerror}",
            fix="point TUNEPLANE_KUBERNETES_CONFIG at a readable TOML file",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not TOML: {exc}", fix="fix the file's syntax") from None
    return parse(data)
