"""The local execution backend (Docker Engine API via aiodocker) and its locally built runtimes."""

from adapters.container_engine.engine import DEFAULT_DOCKER_HOST
from adapters.docker.backend import DockerBackend
from adapters.docker.images import BuildProgress, build_runtime
from adapters.docker.runtimes import LOCAL_RUNTIMES

__all__ = [
    "DEFAULT_DOCKER_HOST",
    "LOCAL_RUNTIMES",
    "BuildProgress",
    "DockerBackend",
    "build_runtime",
]
