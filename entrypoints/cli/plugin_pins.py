"""Pin a plugin in an experiment's ``experiment.toml`` (``[plugins]``), keeping the rest of the
file as the user wrote it (comments, order, layout): the pin's line is replaced or added, the
table made if missing, and the result read back to check that it says exactly that."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from domain.documents import toml_loads
from domain.errors import InvalidInput
from domain.plugins import PluginPin
from entrypoints.cli.workspace import EXPERIMENT_FILE, load_experiment, parse_experiment

_HEADER = re.compile(r"^\s*\[\s*plugins\s*\]\s*(#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")


def pin_line(pin: PluginPin) -> str:
    return f'"{pin.name}" = {{ version = "{pin.version}", digest = "{pin.digest}" }}'


def _key_re(name: str) -> re.Pattern[str]:
    quoted = re.escape(name)
    return re.compile(rf"""^\s*(?:"{quoted}"|'{quoted}'|{quoted})\s*=""")


def with_pin(text: str, pin: PluginPin) -> str:
    """``text`` (an experiment.toml) with ``pin`` in its ``[plugins]`` table."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if start is None:
        body = text if not text or text.endswith("\n") else text + "\n"
        return f"{body}\n[plugins]\n{pin_line(pin)}\n"
    end = next((i for i in range(start + 1, len(lines)) if _ANY_HEADER.match(lines[i])), len(lines))
    key = _key_re(pin.name)
    found = next((i for i in range(start + 1, end) if key.match(lines[i])), None)
    if found is not None:
        lines[found] = pin_line(pin)
    else:
        last = max([start, *(i for i in range(start + 1, end) if lines[i].strip())])
        lines.insert(last + 1, pin_line(pin))
    return "\n".join(lines) + "\n"


def write_pin(directory: Path, pin: PluginPin) -> PluginPin | None:
    """Pin ``pin`` in ``directory``/experiment.toml; return the pin it replaced, if any."""
    exp = load_experiment(str(directory))
    before = next((p for p in exp.plugins if p.name == pin.name), None)
    file = directory / EXPERIMENT_FILE
    text = with_pin(file.read_text(), pin)
    try:
        after = parse_experiment(directory, toml_loads(text))
    except (tomllib.TOMLDecodeError, InvalidInput):
        after = None
    if after is None or pin not in after.plugins:
        raise InvalidInput(
            f"{file}: cannot add the pin of {pin.name} by itself (its [plugins] table is "
            "written in a way this command does not edit)",
            fix=f"add this line under [plugins] by hand: {pin_line(pin)}",
            field="plugins",
        )
    file.write_text(text)
    return before
