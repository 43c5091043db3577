"""`tp runtime build NAME`: build a runtime image locally, with a progress bar."""

from __future__ import annotations

import asyncio

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from adapters.docker.images import BuildProgress, build_runtime
from entrypoints.settings import Settings


def build(name: str, *, force: bool = False) -> int:
    settings = Settings.from_env()
    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(f"{name}: starting", total=None)

        def report(p: BuildProgress) -> None:
            bar.update(
                task,
                description=f"{p.runtime}: {p.stage} {p.message}"[:90],
                completed=p.done,
                total=p.total,
            )

        image_id = asyncio.run(
            build_runtime(
                settings.docker_host,
                name,
                report,
                force=force,
                cache_dir=settings.build.image_cache,
                mirror=settings.build.debian_mirror,
            )
        )
    print(image_id)
    return 0
