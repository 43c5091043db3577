"""``python -m entrypoints.images_cli build NAME``: deploy/images/build.sh's runtime image build,
``adapters.docker.images.main`` with the settings (``DOCKER_HOST``, ``TUNEPLANE_IMAGE_CACHE``,
``TUNEPLANE_DEBIAN_MIRROR``) as its defaults."""

from __future__ import annotations

import sys

from adapters.docker.images import main as images_main
from entrypoints.settings import default_docker_host
from entrypoints.settings_loader import load
from entrypoints.settings_sections import BuildSettings


def main(argv: list[str] | None = None) -> int:
    build = load(BuildSettings)
    return images_main(
        argv,
        docker_host=default_docker_host(),
        cache_dir=build.image_cache,
        mirror=build.debian_mirror,
    )


if __name__ == "__main__":
    sys.exit(main())
