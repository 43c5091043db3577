"""The init containers of a member's pod (docs/kubernetes.md#the-job-capsule,
#the-collector-token): the capsule's check and unpacking, and the collector's native sidecar.
Pure functions, as the rest of the renderer."""

from __future__ import annotations

import shlex
from typing import Any

from adapters.kubernetes.config import Collector
from adapters.kubernetes.names import INDEX_ANNOTATION
from domain.submission import JobSpec

Obj = dict[str, Any]
METRICS_DIR = "/tuneplane/metrics"
TOKENS_DIR = "/var/run/tuneplane/collector"
CA_DIR = "/var/run/tuneplane/ca"
CAPSULE_KEY = "capsule.tar"
CAPSULE_SRC = "/var/run/tuneplane/capsule-tar"


def index_env(name: str) -> Obj:
    path = f"metadata.annotations['{INDEX_ANNOTATION}']"
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def collector_sidecar(c: Collector, index_from_pod: bool, fixed_index: int) -> Obj:
    script = "\n".join(
        [
            "set -eu",
            f'f="{TOKENS_DIR}/member-$TUNEPLANE_MEMBER_INDEX.json"',
            'until [ -s "$f" ]; do sleep 1; done  # written by the member\'s launch',
            "m=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[\"member\"])'"
            ' "$f")',
            "mkdir -p /run/tuneplane/members /run/tuneplane/spool",
            'cp "$f" "/run/tuneplane/members/$m.json"',
            "exec tp collector --spool /run/tuneplane/spool --members /run/tuneplane/members"
            f" --gateway {shlex.quote(c.gateway)} --ca {CA_DIR}/ca.crt",
        ]
    )
    index = (
        index_env("TUNEPLANE_MEMBER_INDEX")
        if index_from_pod
        else {"name": "TUNEPLANE_MEMBER_INDEX", "value": str(fixed_index)}
    )
    return {
        "name": "collector",
        "image": c.image,
        "restartPolicy": "Always",  # a native sidecar: runs beside the training container
        "command": ["/bin/sh", "-c", script],
        "env": [index],
        "volumeMounts": [
            {"name": "collector-token", "mountPath": TOKENS_DIR, "readOnly": True},
            {"name": "collector-ca", "mountPath": CA_DIR, "readOnly": True},
            {"name": "metrics", "mountPath": METRICS_DIR, "readOnly": True},
            {"name": "collector-state", "mountPath": "/run/tuneplane"},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }


def capsule_init(spec: JobSpec, blob: str) -> Obj:
    want = blob.removeprefix("sha256:")
    script = "\n".join(
        [
            "set -eu",
            f"got=$(sha256sum {CAPSULE_SRC}/{CAPSULE_KEY} | cut -d' ' -f1)",
            f'if [ "$got" != "{want}" ]; then',
            f'  echo "tuneplane-capsule: the capsule tar hashes to $got, not {want}" >&2',
            "  exit 91",
            "fi",
            f"tar -xf {CAPSULE_SRC}/{CAPSULE_KEY} -C /",
        ]
    )
    return {
        "name": "capsule",
        "image": spec.runtime.digest,
        "command": ["/bin/sh", "-c", script],
        "volumeMounts": [
            {"name": "capsule-tar", "mountPath": CAPSULE_SRC, "readOnly": True},
            {"name": "tuneplane", "mountPath": "/tuneplane"},
        ],
    }
