"""The Kubernetes execution backend (docs/kubernetes.md).

An attempt becomes one workload, an indexed batch Job or a RayJob as its runtime's process model
says (``render.py``), created suspended in the pool's namespace with the pool's Kueue LocalQueue:
Kueue admits it. Each member's ``launch`` makes sure the attempt's objects exist (created once,
by deterministic name: a repeated or retried launch finds them), records its member id on the
workload and, with a collector configured, adds its collector's member file (with its token) to
the attempt's Secret. A member's handle is ``NAMESPACE/KIND/NAME/INDEX``.

Status comes from informers (list, then watch, resumed by resourceVersion, re-listed on 410)
over the workloads, their pods and Kueue's Workloads; ``observe`` reads them (``status.py``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from adapters.kubernetes import status
from adapters.kubernetes.client import MERGE, ApiError, Kube, path
from adapters.kubernetes.config import KubernetesOptions, PoolTarget
from adapters.kubernetes.informer import Informer
from adapters.kubernetes.init_containers import METRICS_DIR
from adapters.kubernetes.names import (
    ANN_ATTEMPT,
    ANN_MEMBER,
    LABEL_NAME,
    Handle,
    Kind,
    object_name,
    selector,
)
from adapters.kubernetes.render import owned_by, render_attempt, render_capsule
from domain.capsule import StorageCapabilities
from domain.catalog import RuntimePin, RuntimeSpec
from domain.errors import Conflict, InvalidInput, NotFound, Unavailable
from domain.ports import Clock, LaunchRequest, Observation
from domain.runtimes import pin_of, repository
from domain.telemetry import MemberScope
from domain.telemetry_ports import TokenSigner

Obj = dict[str, Any]
PLURAL: dict[Kind, str] = {"job": "jobs", "rayjob": "rayjobs"}
WATCHED = ("jobs", "rayjobs", "pods", "workloads")


class KubernetesBackend:
    """``ExecutionBackend`` named ``kubernetes``."""

    name = "kubernetes"
    # the capsule travels in a ConfigMap, checked by an init container and the runner; outputs
    # stay in the pods (no shared storage is assumed)
    storage = StorageCapabilities(capsule=True, shared_mounts=False, shared_outputs=False)

    def __init__(
        self,
        options: KubernetesOptions,
        kube: Kube,
        *,
        tokens: TokenSigner | None = None,
        clock: Clock | None = None,
        token_lifetime: timedelta = timedelta(days=30),
        sync_wait: float = 10.0,
    ) -> None:
        self.options = options
        self.kube = kube
        self.tokens = tokens if options.collector is not None else None
        self.clock = clock
        self.token_lifetime = token_lifetime
        self.sync_wait = sync_wait
        self.informers: dict[tuple[str, str], Informer] = {}
        self._made: dict[tuple[str, str], Obj] = {}  # workloads whose objects all exist

    async def close(self) -> None:
        for informer in self.informers.values():
            await informer.stop()
        self.informers.clear()
        await self.kube.close()

    # -- informers ------------------------------------------------------------------------------

    def informer(self, namespace: str, plural: str) -> Informer:
        key = (namespace, plural)
        if key not in self.informers:
            sel = "" if plural == "workloads" else selector()  # Kueue labels none of ours
            inf = Informer(
                self.kube, path(plural, namespace), sel, self.options.watch_timeout_seconds
            )
            self.informers[key] = inf
            inf.start()
        return self.informers[key]

    async def _synced(self, namespace: str) -> dict[str, Informer]:
        out = {p: self.informer(namespace, p) for p in WATCHED}
        for inf in out.values():
            await inf.wait_synced(self.sync_wait)
        return out

    # -- ExecutionBackend -----------------------------------------------------------------------

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        """``REPO@DIGEST`` as registered: kubelets pull exactly that image. Runtimes without a
        registry digest (the built-in ones, built in a local engine) cannot run here."""
        if runtime.digest is None:
            raise InvalidInput(
                f"runtime {runtime.name!r} has no registry digest: Kubernetes nodes pull images"
                " by digest",
                fix="push the image to a registry the cluster reaches and register it with"
                " `tp runtime add NAME --image REPO@sha256:…`",
                field="intent.runtime",
            )
        return pin_of(runtime, f"{repository(runtime.image)}@{runtime.digest}")

    def target(self, request: LaunchRequest) -> PoolTarget:
        pool = request.spec.roles[0].pool
        target = self.options.pools.get(pool)
        if target is None:
            raise InvalidInput(
                f"pool {pool} is not mapped to a Kueue LocalQueue",
                fix=f"add [kubernetes.pools.{pool}] with namespace and queue to the Kubernetes"
                " config (docs/kubernetes.md#configuration)",
                field="intent.profiles",
            )
        return target

    async def launch(self, request: LaunchRequest) -> str:
        target = self.target(request)
        name = object_name(request.attempt_id)
        kind, workload, owned = render_attempt(
            name=name, spec=request.spec, job_id=request.job_id, attempt_id=request.attempt_id,
            attempt=request.attempt, target=target, collector=self.options.collector,
            rendezvous_port=self.options.rendezvous_port,
            grace=self.options.termination_grace_seconds,
        )  # fmt: skip
        created = self._made.get((target.namespace, name))
        if created is None:  # first launch of this attempt here: make (or find) everything
            capsule = None
            if request.capsule is not None:
                capsule = render_capsule(name, target.namespace, request.capsule)
            created = await self._ensure(PLURAL[kind], workload, request.attempt_id)
            for obj in owned + ([capsule] if capsule else []):
                plural = {"Service": "services", "Secret": "secrets", "ConfigMap": "configmaps"}
                await self._ensure(plural[obj["kind"]], owned_by(obj, created), request.attempt_id)
            self._made[(target.namespace, name)] = created
        handle = Handle(target.namespace, kind, name, request.member_index)
        key = f"{ANN_MEMBER}{request.member_index}"
        if (created["metadata"].get("annotations") or {}).get(key) != request.member_id:
            patch = {"metadata": {"annotations": {key: request.member_id}}}
            url = path(PLURAL[kind], target.namespace, name)
            await self._call("PATCH", url, body=patch, content_type=MERGE)
        if self.tokens is not None:
            await self._add_token(request, name, target.namespace)
        return str(handle)

    async def _call(self, method: str, url: str, **kw: Any) -> Any:
        try:
            return await self.kube.request(method, url, **kw)
        except ApiError as exc:
            raise self._refused(exc, url) from None

    @staticmethod
    def _refused(exc: ApiError, url: str) -> Exception:
        if exc.code in (400, 422):
            return InvalidInput(
                f"the API server refused {url}: {exc.message}",
                fix="check the profile's resources and the pool's Kubernetes config",
            )
        if exc.code in (401, 403):
            return Unavailable(
                f"the API server does not allow TunePlane {url}: {exc.message}",
                fix="apply deploy/kubernetes/rbac.yaml in this namespace (docs/kubernetes.md)",
            )
        if exc.code == 404:
            return InvalidInput(
                f"the API server does not serve {url}: {exc.message}",
                fix="install the CRD it needs (KubeRay for RayJobs, Kueue for Workloads), or"
                " create the namespace",
            )
        return Unavailable(f"the API server answered {url}: {exc}")

    async def _ensure(self, plural: str, obj: Obj, attempt_id: str) -> Obj:
        """Create ``obj`` unless it exists (409: it was created before, maybe by a launch whose
        answer was lost); the stored one, which must belong to ``attempt_id``."""
        meta = obj["metadata"]
        url = path(plural, meta["namespace"])
        try:
            created: Obj = await self.kube.request("POST", url, body=obj)
            return created
        except ApiError as exc:
            if exc.code != 409:
                raise self._refused(exc, url) from None
        stored: Obj = await self._call("GET", path(plural, meta["namespace"], meta["name"]))
        labels = stored.get("metadata", {}).get("labels") or {}
        owner = (stored.get("metadata", {}).get("annotations") or {}).get(ANN_ATTEMPT)
        if labels.get(LABEL_NAME) != meta["labels"][LABEL_NAME] or (
            ANN_ATTEMPT in (meta.get("annotations") or {}) and owner != attempt_id
        ):
            raise Conflict(
                f"{plural} {meta['namespace']}/{meta['name']} exists but is not attempt"
                f" {attempt_id}'s",
                fix=f"delete it (kubectl -n {meta['namespace']} delete {plural} {meta['name']})",
            )
        return stored

    async def _add_token(self, request: LaunchRequest, name: str, namespace: str) -> None:
        assert self.tokens is not None and self.clock is not None
        secret_url = path("secrets", namespace, f"{name}-collector")
        key = f"member-{request.member_index}.json"
        secret = await self._call("GET", secret_url)
        if key in (secret.get("data") or {}):
            return
        scope = MemberScope(
            request.job_id, request.attempt_id, request.member_id, request.member_index
        )
        token = await self.tokens.issue(
            scope, self.clock.now(), int(self.token_lifetime.total_seconds())
        )
        member = {
            "job": request.job_id,
            "attempt": request.attempt_id,
            "member": request.member_id,
            "index": request.member_index,
            "token": token,
            "metrics_dir": METRICS_DIR,
            "ended": False,
        }
        data = {key: base64.b64encode(json.dumps(member).encode()).decode()}
        await self._call("PATCH", secret_url, body={"data": data}, content_type=MERGE)

    async def observe(self, handle: str) -> Observation:
        h = Handle.parse(handle)
        informers = await self._synced(h.namespace)
        plural = PLURAL[h.kind]
        if not informers[plural].served:
            raise Unavailable(f"the API server does not serve {plural}", fix="install its CRD")
        workload = informers[plural].items.get(h.name)
        pods = [
            p
            for p in informers["pods"].items.values()
            if (p["metadata"].get("labels") or {}).get(LABEL_NAME) == h.name
        ]
        kueue = _workload_of(informers["workloads"].items.values(), h.kind, h.name)
        queue = ((workload or {}).get("metadata", {}).get("labels") or {}).get(
            "kueue.x-k8s.io/queue-name", "?"
        )
        served = informers["workloads"].served
        if h.kind == "job":
            return status.observe_job(workload, pods, kueue, h.index, queue, served)
        return status.observe_rayjob(workload, pods, kueue, h.index, queue, served)

    async def stop(self, handle: str, grace_seconds: float) -> None:
        """Delete the member's workload in the foreground: its pods get SIGTERM and their
        grace period, and the workload stays (deleting) until they are gone. A gang stops as a
        whole; stopping it again changes nothing."""
        h = Handle.parse(handle)
        url = path(PLURAL[h.kind], h.namespace, h.name)
        grace = str(max(0, int(grace_seconds)))
        query = [("propagationPolicy", "Foreground"), ("gracePeriodSeconds", grace)]
        await self._delete(url, query)

    async def _delete(self, url: str, query: list[tuple[str, str]]) -> None:
        try:
            await self.kube.request("DELETE", url, query=query)
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone already; being deleted
                raise self._refused(exc, url) from None

    async def release(self, handle: str) -> None:
        h = Handle.parse(handle)
        self._made.pop((h.namespace, h.name), None)
        url = path(PLURAL[h.kind], h.namespace, h.name)
        await self._delete(url, [("propagationPolicy", "Background")])

    async def held(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for namespace in self.options.namespaces:
            informers = await self._synced(namespace)
            for kind, plural in PLURAL.items():
                for obj in informers[plural].items.values():
                    notes = obj["metadata"].get("annotations") or {}
                    for key, member_id in notes.items():
                        if key.startswith(ANN_MEMBER) and key[len(ANN_MEMBER) :].isdigit():
                            index = int(key[len(ANN_MEMBER) :])
                            h = Handle(namespace, kind, obj["metadata"]["name"], index)
                            out[member_id] = str(h)
        return out

    async def logs(self, handle: str, follow: bool) -> AsyncIterator[bytes]:
        h = Handle.parse(handle)
        informers = await self._synced(h.namespace)
        pods = [
            p
            for p in informers["pods"].items.values()
            if (p["metadata"].get("labels") or {}).get(LABEL_NAME) == h.name
        ]
        if h.kind == "job":
            pod = status.newest([p for p in pods if status.pod_index(p) == h.index])
            container = "trainer"
        elif h.index == 0:
            pod, container = status.newest([p for p in pods if status.is_head(p)]), "ray-head"
        else:
            pod, container = status.ray_worker(pods, h.index), "ray-worker"
        if pod is None:
            raise NotFound(f"member {h.index} of {h.name} has no pod", fix="it was released")
        query = [("container", container)] + ([("follow", "true")] if follow else [])
        url = path("pods", h.namespace, pod["metadata"]["name"], "log")
        try:
            async for chunk in self.kube.text(url, query, follow):
                yield chunk
        except ApiError as exc:
            if exc.code == 404:
                gone = pod["metadata"]["name"]
                raise NotFound(f"pod {gone} is gone", fix="it was released") from None
            raise self._refused(exc, url) from None


def _workload_of(workloads: Any, kind: Kind, name: str) -> Obj | None:
    """Kueue's Workload for our Job or RayJob: the one it owns (Kueue names them
    ``job-<name>-<hash>``; the owner reference is what counts)."""
    want = {"job": "Job", "rayjob": "RayJob"}[kind]
    found = [
        w
        for w in workloads
        if any(
            r.get("kind") == want and r.get("name") == name
            for r in w["metadata"].get("ownerReferences") or []
        )
    ]
    return status.newest(found)
