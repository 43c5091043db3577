"""Which parser reads which file: TensorBoard event files and JSONL; anything else is ignored."""

from __future__ import annotations

from pathlib import Path

from adapters.telemetry.columns import SourceParser
from adapters.telemetry.events import TfEventsParser
from adapters.telemetry.jsonl import JsonlParser


def parser_for(path: Path) -> SourceParser | None:
    name = path.name
    if "tfevents" in name:
        return TfEventsParser()
    if name.endswith(".jsonl"):
        return JsonlParser()
    return None
