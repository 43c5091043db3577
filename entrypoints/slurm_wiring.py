"""The Slurm backend from the environment (docs/slurm.md, "Configuration"): enabled when
``TUNEPLANE_SLURM_URL`` is set, absent otherwise. Kept apart from ``settings.py`` and
``container.py`` so that the Slurm settings stay in one place.

* ``TUNEPLANE_SLURM_URL``: ``unix:/path/slurmrestd.sock`` (rest_auth/local) or
  ``http(s)://host:port``;
* ``TUNEPLANE_SLURM_API_VERSION``: ``auto`` (default: discovered from ``/openapi/v3``),
  ``v0.0.38``, ``v0.0.40``, ``v0.0.41`` or ``v0.0.42``;
* ``TUNEPLANE_SLURM_USER`` and ``TUNEPLANE_SLURM_TOKEN`` (or ``TUNEPLANE_SLURM_TOKEN_FILE``):
  JWT auth (``X-SLURM-USER-NAME``, ``X-SLURM-USER-TOKEN``);
* ``TUNEPLANE_SLURM_SHARED_DIR`` (required): a directory every Slurm node and the control
  plane see;
* ``TUNEPLANE_SLURM_PARTITIONS``: ``pool=partition,...`` (default: a pool is named after its
  partition);
* ``TUNEPLANE_SLURM_ACCOUNTING``: ``1`` to ask slurmdbd (``/slurmdb/...``) about jobs Slurm
  no longer reports.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from domain.errors import InvalidInput


def _fail(message: str, fix: str) -> SystemExit:
    return SystemExit(f"error: {message} (fix: {fix})")


def partitions_of(raw: str) -> dict[str, str]:
    """``pool=partition,pool2=partition2`` → {pool: partition}."""
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        pool, eq, partition = item.partition("=")
        if not eq or not pool.strip() or not partition.strip():
            raise _fail(
                f"TUNEPLANE_SLURM_PARTITIONS item {item!r} is not POOL=PARTITION",
                "write it as pool=partition,pool2=partition2",
            )
        out[pool.strip()] = partition.strip()
    return out


def backend_from_env(env: dict[str, str] | None = None) -> SlurmBackend | None:
    """The configured Slurm backend, or None when ``TUNEPLANE_SLURM_URL`` is not set. Bad
    settings stop the process with what to fix."""
    env = dict(os.environ) if env is None else env
    url = env.get("TUNEPLANE_SLURM_URL", "").strip()
    if not url:
        return None
    shared = env.get("TUNEPLANE_SLURM_SHARED_DIR", "").strip()
    if not shared or not Path(shared).is_absolute():
        raise _fail(
            "the Slurm backend needs TUNEPLANE_SLURM_SHARED_DIR, an absolute directory",
            "set it to a directory that every Slurm node and this control plane mount",
        )
    token = env.get("TUNEPLANE_SLURM_TOKEN") or None
    token_file = env.get("TUNEPLANE_SLURM_TOKEN_FILE")
    if token is None and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise _fail(
                f"TUNEPLANE_SLURM_TOKEN_FILE {token_file} cannot be read: {exc.strerror}",
                "point it at a file holding the JWT (`scontrol token`)",
            ) from None
    endpoint = SlurmEndpoint(
        url=url,
        version=env.get("TUNEPLANE_SLURM_API_VERSION", "auto").strip() or "auto",
        user=env.get("TUNEPLANE_SLURM_USER") or None,
        token=token,
    )
    try:
        client = SlurmClient(endpoint)
    except InvalidInput as exc:
        raise _fail(exc.message, exc.fix or "") from None
    Path(shared).mkdir(parents=True, exist_ok=True)
    return SlurmBackend(
        client,
        Path(shared),
        partitions=partitions_of(env.get("TUNEPLANE_SLURM_PARTITIONS", "")),
        accounting=env.get("TUNEPLANE_SLURM_ACCOUNTING", "") in ("1", "true", "yes"),
    )


async def slurm_resource() -> AsyncIterator[SlurmBackend | None]:
    backend = backend_from_env()
    try:
        yield backend
    finally:
        if backend is not None:
            await backend.close()
