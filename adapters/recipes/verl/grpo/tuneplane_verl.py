"""verl's driver-side checkpoint hook for `verl/grpo` (``trainer.checkpoint_callback_class``,
verl 0.9.1's v1 trainer): each checkpoint verl saved is marked complete for TunePlane (the
SDK's ``report.checkpoint``: every file synced, ``COMPLETE`` written last), so that a later
attempt resumes from it (docs/checkpoints.md, docs/recipes.md).

verl calls ``on_save`` on its driver after every rank's shards, the data loader's state and
``latest_checkpointed_iteration.txt`` were written: the checkpoint is whole. An asynchronous
save (``actor.checkpoint.async_save``, Megatron) is still being written when the hook fires, so
it is not marked (and never resumed from): said once on stderr. The class duck-types verl's
``CheckpointCallback`` (verl instantiates it with ``config=`` and calls ``on_save`` with
keywords), so importing it needs no verl; it never raises into training.
"""

from __future__ import annotations

import sys
from typing import Any

import report  # the SDK, beside this file in the capsule (the recipe's include)


class MarkComplete:
    def __init__(self, config: Any = None) -> None:
        self.config = config
        self._said_async = False

    def on_save(
        self,
        trainer: Any = None,
        global_step: int | None = None,
        checkpoint_dir: str = "",
        async_save: bool = False,
        **kwargs: Any,
    ) -> None:
        if async_save:
            if not self._said_async:
                self._said_async = True
                print(f"tuneplane-recipe: {checkpoint_dir} is saved asynchronously: not marked "
                      "complete, and not resumed from by a retry", file=sys.stderr)  # fmt: skip
            return
        report.checkpoint(checkpoint_dir, global_step)
