"""Names, labels and handles of the Kubernetes backend (docs/kubernetes.md). Pure.

Every object of one attempt is named after the attempt, deterministically, so that creating it
again (a retried launch, a restarted control plane) finds the first one instead of making a
second: creation is idempotent by name. A member's handle names its object and its index.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from domain.errors import InvalidInput

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "tuneplane"
LABEL_NAME = "tuneplane.io/name"  # the attempt's object name, on every object and pod
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ANN_JOB = "tuneplane.io/job"
ANN_ATTEMPT = "tuneplane.io/attempt"
ANN_POOL = "tuneplane.io/pool"
ANN_MEMBER = "tuneplane.io/member."  # + index: the member id (written by each member's launch)
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"  # set by the Job controller
RAY_NODE_TYPE = "ray.io/node-type"  # head | worker, set by KubeRay on the pods it makes

Kind = Literal["job", "rayjob"]
KINDS: tuple[Kind, ...] = ("job", "rayjob")
_SAFE = re.compile(r"^[a-z][a-z0-9-]{0,34}[a-z0-9]$")


def object_name(attempt_id: str) -> str:
    """``tp-<attempt id>`` when that is a short DNS-1035 label (Services and pod hostnames
    need one, and KubeRay appends suffixes), else ``tp-`` and 16 hex digits of its sha256.

    At most 39 characters: ``<name>-<index>`` stays a valid hostname for 32 members, and
    KubeRay's ``<name>-<5 chars>-head-svc`` stays within 63."""
    if _SAFE.match(attempt_id):
        return f"tp-{attempt_id}"
    return "tp-" + hashlib.sha256(attempt_id.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Handle:
    namespace: str
    kind: Kind
    name: str
    index: int

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}/{self.index}"

    @staticmethod
    def parse(text: str) -> Handle:
        parts = text.split("/")
        if len(parts) != 4 or parts[1] not in KINDS or not parts[3].isdigit():
            raise InvalidInput(
                f"{text!r} is not a Kubernetes member handle",
                fix="handles look like NAMESPACE/job|rayjob/NAME/INDEX",
            )
        kind: Kind = "job" if parts[1] == "job" else "rayjob"
        return Handle(parts[0], kind, parts[2], int(parts[3]))


def selector() -> str:
    """The label selector of everything this backend creates (and the pods made from it)."""
    return f"{MANAGED_BY}={MANAGER}"
