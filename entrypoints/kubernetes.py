"""The Kubernetes backend's wiring (docs/kubernetes.md#configuration): enabled when
``TUNEPLANE_KUBERNETES_CONFIG`` names its TOML file, else absent (a profile of a Kubernetes pool
then gets "backend 'kubernetes' is not enabled on this control plane"). Its client is an optional
extra (``pip install 'tuneplane[kubernetes]'``, adapters/extras.py), imported only when
configured."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from datetime import timedelta

from adapters.extras import require
from adapters.system import SystemClock
from domain.errors import TunePlaneError
from domain.ports import ExecutionBackend
from domain.telemetry_ports import TokenSigner
from entrypoints.settings import Settings
from entrypoints.settings_loader import SettingExit

log = logging.getLogger(__name__)
CONFIG_ENV = "TUNEPLANE_KUBERNETES_CONFIG"


async def kubernetes_backends(
    settings: Settings, tokens: TokenSigner
) -> AsyncGenerator[dict[str, ExecutionBackend], None]:
    """``{"kubernetes": backend}`` when configured, else ``{}``. A config that cannot be read
    or a kubeconfig that cannot be loaded stops the process with the fix."""
    path = settings.kubernetes.config
    if path is None:
        yield {}
        return
    try:
        require("kubernetes")
        from adapters.kubernetes.backend import KubernetesBackend
        from adapters.kubernetes.client import Kube
        from adapters.kubernetes.config import load

        options = load(path)
        kube = await Kube.connect(
            options.kubeconfig, options.context, in_cluster=bool(settings.kubernetes.service_host)
        )
    except TunePlaneError as exc:
        raise SettingExit(exc.message, exc.fix or "", CONFIG_ENV) from None
    except Exception as exc:  # kubernetes-asyncio's ConfigException and friends
        raise SettingExit(
            f"cannot load the Kubernetes credentials: {exc}",
            "run in a pod with a service account, or set kubeconfig in the file that "
            "TUNEPLANE_KUBERNETES_CONFIG names, or KUBECONFIG",
            CONFIG_ENV,
        ) from None
    backend = KubernetesBackend(
        options,
        kube,
        tokens=tokens,
        clock=SystemClock(),
        token_lifetime=timedelta(seconds=settings.collector_token_seconds),
    )
    log.info("kubernetes backend: %s, pools %s", kube.server, ", ".join(sorted(options.pools)))
    try:
        yield {"kubernetes": backend}
    finally:
        await backend.close()
