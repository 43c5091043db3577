"""The Kubernetes API, as the backend uses it: JSON requests by path and watch streams, through
kubernetes-asyncio's ``ApiClient`` (its configuration loaders, authentication and TLS) and its
``Watch`` (its event decoding; an ``ERROR`` event becomes an ``ApiException`` with the Status's
code). Objects stay plain dicts: the backend reads a few fields of Jobs, RayJobs, Pods and
Kueue Workloads, and kubernetes-asyncio has no models for the custom ones.

Errors: the API server's ``Status`` answers become :class:`ApiError` (code, reason, message);
a server that cannot be reached becomes ``domain.errors.Unavailable`` naming it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

from domain.errors import Unavailable

Obj = dict[str, Any]
_CORE = {"pods", "services", "configmaps", "secrets"}
GROUPS = {
    "jobs": "batch/v1",
    "rayjobs": "ray.io/v1",
    "workloads": "kueue.x-k8s.io/v1beta1",
}
MERGE = "application/merge-patch+json"
CONNECTION_ERRORS = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


class ApiError(Exception):
    """A ``Status`` answer of the API server (``code`` 409 AlreadyExists, 404 NotFound, …)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class Gone(Exception):
    """410: the resourceVersion a watch asked for is no longer in the server's history."""


def path(plural: str, namespace: str, name: str | None = None, sub: str | None = None) -> str:
    base = "/api/v1" if plural in _CORE else f"/apis/{GROUPS[plural]}"
    out = f"{base}/namespaces/{namespace}/{plural}"
    if name is not None:
        out += f"/{name}"
    if sub is not None:
        out += f"/{sub}"
    return out


@dataclass
class Kube:
    api: ApiClient

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    @staticmethod
    async def connect(
        kubeconfig: str | None = None, context: str | None = None, *, in_cluster: bool = False
    ) -> Kube:
        """In a pod (``in_cluster``: ``KUBERNETES_SERVICE_HOST`` set; no kubeconfig named): its
        service account. Otherwise the kubeconfig file (``KUBECONFIG`` or ~/.kube/config)."""
        configuration = Configuration()
        if kubeconfig is None and in_cluster:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await kube_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        return Kube(ApiClient(configuration))

    @staticmethod
    def at(url: str) -> Kube:
        """A client of the server at ``url`` without credentials (tests' fake API server)."""
        configuration = Configuration(host=url)
        return Kube(ApiClient(configuration))

    async def close(self) -> None:
        await self.api.close()

    def unreachable(self, exc: BaseException) -> Unavailable:
        return Unavailable(
            f"cannot reach the Kubernetes API server at {self.server}:"
            f" {type(exc).__name__} {exc}".rstrip(),
            fix="check the network path to the API server and the kubeconfig's server address;"
            " TunePlane retries",
        )

    async def _raw(
        self,
        method: str,
        url: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        read_timeout: float | None = 60,
    ) -> aiohttp.ClientResponse:
        """``read_timeout``: silence after which the connection counts as dead (a watch sets
        it past the server's own timeoutSeconds, so a quiet watch is not cut)."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=read_timeout)
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                url, method, query_params=query or [], header_params=headers, body=body,
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=timeout,
            )  # fmt: skip
        except CONNECTION_ERRORS as exc:
            raise self.unreachable(exc) from None
        return response

    async def request(
        self,
        method: str,
        url: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """The decoded JSON answer of a 2xx; ApiError for a Status; Unavailable when the server
        is unreachable (or the answer was lost on the way)."""
        response = await self._raw(method, url, query, body, content_type)
        try:
            raw = await response.read()
        except CONNECTION_ERRORS as exc:
            raise self.unreachable(exc) from None
        finally:
            response.release()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        if 200 <= response.status < 300:
            return data if data is not None else raw
        data = data if isinstance(data, dict) else {}
        raise ApiError(
            response.status,
            str(data.get("reason") or response.reason or ""),
            str(data.get("message") or raw[:200].decode(errors="replace")),
        )

    async def text(
        self, url: str, query: list[tuple[str, str]] | None = None, follow: bool = False
    ) -> AsyncIterator[bytes]:
        """A plain-text stream (a pod's log; followed, it may be quiet for any time)."""
        response = await self._raw("GET", url, query, read_timeout=None if follow else 60)
        try:
            if response.status >= 300:
                await self._fail(response)
            async for chunk in response.content.iter_any():
                yield chunk
        except CONNECTION_ERRORS as exc:
            raise self.unreachable(exc) from None
        finally:
            response.release()

    @staticmethod
    async def _fail(response: aiohttp.ClientResponse) -> None:
        raw = await response.read()
        try:
            data = json.loads(raw)
        except ValueError:
            data = {}
        raise ApiError(response.status, str(data.get("reason", "")), str(data.get("message", "")))

    async def watch(
        self, url: str, selector: str, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[Obj]:
        """Events (``type``, ``object``) after ``resource_version``, with bookmarks, until the
        server ends the stream. Raises Gone on 410, ApiError on any other Status,
        Unavailable when the connection fails or drops."""

        async def call(**kw: Any) -> aiohttp.ClientResponse:
            query = [
                ("watch", "true"),
                ("allowWatchBookmarks", "true"),
                ("resourceVersion", kw["resource_version"]),
                ("timeoutSeconds", str(kw["timeout_seconds"])),
            ]
            if selector:
                query.append(("labelSelector", selector))
            return await self._raw("GET", url, query, read_timeout=timeout_seconds + 30)

        watch = Watch(return_type="object")
        try:
            async for event in watch.stream(
                call, resource_version=resource_version, timeout_seconds=timeout_seconds
            ):
                yield {"type": event["type"], "object": event["raw_object"]}
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(str(exc.reason)) from None
            raise ApiError(int(exc.status or 0), str(exc.reason or ""), "") from None
        except CONNECTION_ERRORS as exc:
            raise self.unreachable(exc) from None
        finally:
            await watch.close()
