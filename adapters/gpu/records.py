"""What ``nvidia-smi`` prints about a host's GPUs, parsed into one record: the fallback probe
reads it live, the fake replays it from a file (``adapters/gpu/nvml.py``).

Two inputs, one result:

- ``nvidia-smi -q -x`` (XML; what ``SmiProbe`` runs), parsed with ``defusedxml`` (no DTD
  entities: a billion-laughs or external-entity file is refused, not expanded);
- a capture in the format of nvidia_gpu_exporter's ``internal/captures`` (sections of
  ``nvidia-smi -q`` text and ``nvidia-smi nvlink -s``, each under a ``# $ nvidia-smi …``
  header): real H100 and H200 machines published that way (tests/fixtures/nvml/README.md).

``nvidia-smi nvlink -s`` output (a section of a capture, or run by ``SmiProbe``) says which
GPUs have an active NVLink; ``-q -x`` does not.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

MAX_BYTES = 16 * 1024 * 1024  # a 16-GPU host's -q -x is ~0.5 MB; more is not nvidia-smi's
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%]*)\s*$")


class GpuRecordError(ValueError):
    """The text is not an nvidia-smi output this parser understands (the message says why)."""


@dataclass(frozen=True, slots=True)
class RecordedGpu:
    index: int
    uuid: str
    name: str
    memory_mb: int
    mig: bool = False
    nvlink: bool = False
    # the sample the output holds (None: "N/A", absent, or not a number)
    utilization: float | None = None
    memory_used_mb: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None


@dataclass(frozen=True, slots=True)
class Recording:
    gpus: tuple[RecordedGpu, ...]
    driver: str = ""
    cuda: str = ""


def number(text: str | None, unit: str = "") -> float | None:
    """``"81920 MiB"`` → 81920.0; None for "N/A", "[N/A]", "", or another unit."""
    if text is None:
        return None
    m = _NUMBER.match(text)
    if m is None or (unit and m.group(2) and m.group(2) != unit):
        return None
    return float(m.group(1))


def parse(data: bytes | str) -> Recording:
    """Either input (XML, or a capture with a ``-q`` section); GpuRecordError if neither."""
    if len(data) > MAX_BYTES:
        raise GpuRecordError(f"the output is {len(data)} bytes, more than {MAX_BYTES}")
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    if "\x00" in text:
        raise GpuRecordError("the output holds NUL bytes: it is not nvidia-smi's")
    head = text.lstrip()[:512]
    if head.startswith("<?xml") or head.startswith("<nvidia_smi_log") or "<!DOCTYPE" in head:
        return parse_xml(text)
    return parse_capture(text)


# -- XML (nvidia-smi -q -x) ------------------------------------------------------------------


def parse_xml(text: str, nvlink: frozenset[int] = frozenset()) -> Recording:
    try:
        root = fromstring(text, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as e:
        raise GpuRecordError(
            f"the XML declares entities, which nvidia-smi never does ({e!r})"
        ) from None
    except ET.ParseError as e:
        raise GpuRecordError(f"the XML is not well-formed ({e})") from None
    if root.tag != "nvidia_smi_log":
        raise GpuRecordError(f"the XML's root is <{root.tag}>, not <nvidia_smi_log>")
    gpus = tuple(_xml_gpu(i, g, i in nvlink) for i, g in enumerate(root.findall("gpu")))
    return Recording(gpus, _field(root, "driver_version"), _field(root, "cuda_version"))


def _field(e: ET.Element, path: str) -> str:
    found = e.find(path)
    return (found.text or "").strip() if found is not None else ""


def _xml_gpu(index: int, g: ET.Element, nvlink: bool) -> RecordedGpu:
    power = next(
        (
            v
            for p in (
                "gpu_power_readings/power_draw",
                "gpu_power_readings/instant_power_draw",
                "gpu_power_readings/average_power_draw",
                "power_readings/power_draw",
            )
            if (v := number(_field(g, p), "W")) is not None
        ),
        None,
    )
    return _gpu(
        index,
        uuid=_field(g, "uuid"),
        name=_field(g, "product_name"),
        total=_field(g, "fb_memory_usage/total"),
        mig=_field(g, "mig_mode/current_mig"),
        nvlink=nvlink,
        utilization=number(_field(g, "utilization/gpu_util"), "%"),
        used=number(_field(g, "fb_memory_usage/used"), "MiB"),
        power=power,
        temperature=number(_field(g, "temperature/gpu_temp"), "C"),
    )


def _gpu(
    index: int,
    *,
    uuid: str,
    name: str,
    total: str,
    mig: str,
    nvlink: bool,
    utilization: float | None,
    used: float | None,
    power: float | None,
    temperature: float | None,
) -> RecordedGpu:
    memory = number(total, "MiB")
    if not uuid.startswith("GPU-"):
        raise GpuRecordError(f"GPU {index}'s UUID {uuid[:60]!r} does not start with GPU-")
    if not name:
        raise GpuRecordError(f"GPU {index} has no product name")
    if memory is None or memory < 0:
        raise GpuRecordError(f"GPU {index}'s memory total {total[:60]!r} is not a number of MiB")
    return RecordedGpu(
        index, uuid, name, int(memory), mig.strip().lower() == "enabled", nvlink,
        utilization, used, power, temperature,
    )  # fmt: skip


# -- nvidia-smi nvlink -s ----------------------------------------------------------------------

_NVLINK_GPU = re.compile(r"^GPU (\d+): ")
_NVLINK_ACTIVE = re.compile(r"^\s*Link \d+: \d+(?:\.\d+)? [GM]B/s")


def parse_nvlink(text: str) -> frozenset[int]:
    """The indices of the GPUs ``nvidia-smi nvlink -s`` shows with at least one link up (a link
    down reads ``<inactive>``; MIG mode and GPUs without NVLink print no links)."""
    active: set[int] = set()
    gpu: int | None = None
    for line in text.splitlines():
        if m := _NVLINK_GPU.match(line):
            gpu = int(m.group(1))
        elif gpu is not None and _NVLINK_ACTIVE.match(line):
            active.add(gpu)
    return frozenset(active)


# -- captures (sections of nvidia-smi -q text) -------------------------------------------------

_SECTION = re.compile(r"^# \$ \S*nvidia-smi(?P<args>.*)$", re.MULTILINE)
Tree = dict[str, "str | Tree"]
# "Product Name   : NVIDIA H200" is a key and its value; "GPU 00000000:83:00.0" is a block
_KEY_VALUE = re.compile(r"^(.*?)\s+:\s*(.*)$")


def sections(text: str) -> dict[str, str]:
    """A capture's sections by their nvidia-smi arguments (``-q``, ``nvlink -s``); the last of
    a repeated command wins (a capture's load state follows its idle one)."""
    found: dict[str, str] = {}
    marks = list(_SECTION.finditer(text))
    for m, nxt in zip(marks, [*marks[1:], None], strict=False):
        body = text[m.end() : nxt.start() if nxt else len(text)]
        body = body.split("\n", 2)[-1] if body.startswith("\n#") else body  # the fence line
        found[m.group("args").strip()] = re.sub(r"\n#{20,}\n#[^\n]*$", "", body.rstrip())
    return found


def parse_capture(text: str) -> Recording:
    parts = sections(text)
    query = parts.get("-q")
    if query is None:
        if "NVSMI LOG" in text:  # a bare `nvidia-smi -q`, not a capture
            query = text
        else:
            raise GpuRecordError(
                "neither nvidia-smi -q -x XML nor a capture with an `nvidia-smi -q` section"
            )
    return parse_query(query, parse_nvlink(parts.get("nvlink -s", "")))


def _tree(lines: list[str]) -> Tree:
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for line in lines:
        if not line.strip() or line.lstrip().startswith("="):
            continue
        depth = len(line) - len(line.lstrip(" "))
        m = _KEY_VALUE.match(line.strip())
        key, sep, value = (m.group(1), ":", m.group(2)) if m else (line.strip(), "", "")
        while stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1]
        key = key.strip()
        if sep and value.strip():
            parent.setdefault(key, value.strip())
        else:
            child: Tree = {}
            if key not in parent:  # a repeated block (MIG Device, Process) keeps its first
                parent[key] = child
            stack.append((depth, child))
    return root


def _get(tree: Tree, *path: str) -> str:
    node: str | Tree = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return ""
        node = node[key]
    return node if isinstance(node, str) else ""


def parse_query(text: str, nvlink: frozenset[int] = frozenset()) -> Recording:
    """``nvidia-smi -q`` (text): top-level versions, then one ``GPU <bus id>`` block each."""
    tree = _tree(text.splitlines())
    blocks = [v for k, v in tree.items() if k.startswith("GPU ") and isinstance(v, dict)]
    gpus = []
    for i, g in enumerate(blocks):
        power = next(
            (
                v
                for p in ("Power Draw", "Instantaneous Power Draw", "Average Power Draw")
                for section in ("GPU Power Readings", "Power Readings")
                if (v := number(_get(g, section, p), "W")) is not None
            ),
            None,
        )
        gpus.append(
            _gpu(
                i,
                uuid=_get(g, "GPU UUID"),
                name=_get(g, "Product Name"),
                total=_get(g, "FB Memory Usage", "Total"),
                mig=_get(g, "MIG Mode", "Current"),
                nvlink=i in nvlink,
                utilization=number(_get(g, "Utilization", "GPU"), "%"),
                used=number(_get(g, "FB Memory Usage", "Used"), "MiB"),
                power=power,
                temperature=number(_get(g, "Temperature", "GPU Current Temp"), "C"),
            )
        )
    if not blocks and "Attached GPUs" not in tree:
        raise GpuRecordError("the `nvidia-smi -q` text has no Attached GPUs line")
    return Recording(tuple(gpus), _get(tree, "Driver Version"), _get(tree, "CUDA Version"))


def with_nvlink(rec: Recording, active: frozenset[int]) -> Recording:
    return replace(rec, gpus=tuple(replace(g, nvlink=g.index in active) for g in rec.gpus))
