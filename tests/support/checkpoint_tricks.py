"""A workload's tricks against whoever reads its checkpoint directory (tests of the local
harvest and of a node's uploads)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from adapters.checkpoint_dirs import FilesystemCheckpoints
from domain.checkpoints import Found


class SwappedAfterListing(FilesystemCheckpoints):
    """A workload's trick: each checkpoint's directory swapped for a link to ``elsewhere`` (a
    directory of the host with files of the same names) right after the listing."""

    def __init__(self, root: Path, elsewhere: Path) -> None:
        super().__init__(root)
        self.elsewhere = elsewhere

    async def complete(self, job_id: str, attempt: int) -> list[Found]:
        found = await super().complete(job_id, attempt)
        for f in found:
            shutil.rmtree(f.root)
            os.symlink(self.elsewhere, f.root, target_is_directory=True)
        return found
