"""Optional extras: clients that only some deployments need, so the wheels a GPU machine gets
stay small (deploy/gpu/README.md). ``pip install 'tuneplane[s3]'`` adds the AWS SDK (the S3
blob store), ``'tuneplane[kubernetes]'`` the Kubernetes client (the Kubernetes backend);
``.[dev]`` has both. Their imports are made only where the feature is configured, after
``require`` said the extra is there."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from domain.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Extra:
    module: str  # what the feature imports
    distribution: str  # what pip installs
    feature: str  # what needs it
    setting: str  # what configures it


EXTRAS = {
    "s3": Extra("aiobotocore", "aiobotocore", "the S3 blob store", "TUNEPLANE_BLOB_STORE=s3://…"),
    "kubernetes": Extra(
        "kubernetes_asyncio",
        "kubernetes-asyncio",
        "the Kubernetes backend",
        "TUNEPLANE_KUBERNETES_CONFIG",
    ),
}


def installed(extra: str) -> bool:
    """Whether the extra's module can be imported (a module blocked in ``sys.modules`` with
    None, as the tests do, counts as absent)."""
    try:
        return importlib.util.find_spec(EXTRAS[extra].module) is not None
    except (ImportError, ValueError):  # a parent package missing; a half-initialised module
        return False


def require(extra: str) -> None:
    """Refuse, naming the extra to install, when ``extra`` is not installed."""
    if installed(extra):
        return
    what = EXTRAS[extra]
    raise InvalidInput(
        f"{what.feature} is configured ({what.setting}), but its optional dependency "
        f"{what.distribution} is not installed",
        fix=f"pip install 'tuneplane[{extra}]', or configure no {what.feature[4:]}",
    )
