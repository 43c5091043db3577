"""The GPU probes against hostile input (adapters/gpu/nvml.py, gpu_records.py): a broken
recording is refused naming the file; a broken, missing or hanging nvidia-smi, or a GPU that
errors under NVML, leaves an empty inventory or readings of None, never an exception."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.gpu import records as gpu_records
from adapters.gpu.nvml import NoGpus, NvmlProbe, RecordedProbe, SmiProbe, cuda_version, open_probe
from adapters.gpu.records import GpuRecordError
from domain.errors import InvalidInput
from domain.gpus import GpuInventory, GpuReading
from tests.support.nvml_standin import NvmlStandIn

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvml"
A100 = (FIXTURES / "a100-sxm4-80gb-mig.xml").read_text()

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>
<nvidia_smi_log><gpu><product_name>&lol4;</product_name></gpu></nvidia_smi_log>"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>
<nvidia_smi_log><driver_version>&e;</driver_version></nvidia_smi_log>"""


def write(tmp: Path, name: str, data: str | bytes) -> Path:
    p = tmp / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def script(tmp: Path, body: str) -> str:
    p = tmp / "nvidia-smi"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


HOSTILE = {
    "truncated": A100[: len(A100) // 2],
    "garbled": A100.replace("<gpu id", "<gpu <id", 1),
    "nul": A100.replace("<driver_version>", "<driver_version>\x00", 1),
    "billion-laughs": BILLION_LAUGHS,
    "external-entity": EXTERNAL,
    "memory-not-a-number": A100.replace("<total>81920 MiB</total>", "<total>lots MiB</total>"),
    "uuid-missing": A100.replace("<uuid>GPU-513536b6", "<uuid>513536b6"),
    "other-root": "<?xml version='1.0'?><html><gpu/></html>",
    "not-nvidia-smi": "hello, world\n",
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_recording_is_refused_naming_the_file(tmp_path: Path, case: str) -> None:
    path = write(tmp_path, f"{case}.xml", HOSTILE[case])
    with pytest.raises(InvalidInput) as e:
        RecordedProbe(path)
    assert str(path) in e.value.message
    assert e.value.field == "TUNEPLANE_FAKE_NVML"
    assert "nvidia-smi -q -x" in (e.value.fix or "")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_nvidia_smi_printing_hostile_output_gives_no_gpus(tmp_path: Path, case: str) -> None:
    out = write(tmp_path, "out", HOSTILE[case])
    probe = SmiProbe(script(tmp_path, f'cat "{out}"'))
    assert probe.inventory() == GpuInventory()
    assert probe.read([0, 1]) == [GpuReading(0), GpuReading(1)]


def test_a_file_past_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    big = write(tmp_path, "big.xml", b"<nvidia_smi_log>" + b" " * gpu_records.MAX_BYTES)
    with pytest.raises(InvalidInput, match="more than"):
        RecordedProbe(big)


def test_a_missing_recording_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not a recorded nvidia-smi output"):
        open_probe(fake=tmp_path / "nope.xml")


def test_billion_laughs_is_not_expanded() -> None:
    with pytest.raises(GpuRecordError, match="entities"):
        gpu_records.parse(BILLION_LAUGHS)


def test_a_missing_nvidia_smi_gives_no_gpus(tmp_path: Path) -> None:
    probe = SmiProbe(str(tmp_path / "no-such-nvidia-smi"))
    assert probe.inventory() == GpuInventory()
    assert probe.read([3]) == [GpuReading(3)]


def test_a_hanging_nvidia_smi_is_killed_at_its_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    probe = SmiProbe(script(tmp_path, "exec sleep 600"), timeout=0.2)
    with caplog.at_level(logging.WARNING):
        assert probe.inventory() == GpuInventory()
    assert "killed" in caplog.text


def test_a_failing_nvidia_smi_gives_no_gpus(tmp_path: Path) -> None:
    probe = SmiProbe(script(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9"))
    assert probe.inventory() == GpuInventory()


def test_nvidia_smi_nvlink_section_marks_active_links(tmp_path: Path) -> None:
    links = "GPU 0: NVIDIA A100 (UUID: GPU-a)\n\t Link 0: <inactive>\nGPU 1: X (UUID: GPU-b)\n"
    links += "\t Link 0: 25 GB/s\n"
    assert gpu_records.parse_nvlink(links) == frozenset({1})
    out = write(tmp_path, "out.xml", A100)
    nv = write(tmp_path, "nv.txt", links.replace("GPU 1", "GPU 0").replace("GPU 0: NVIDIA", "Z"))
    probe = SmiProbe(script(tmp_path, f'[ "$1" = "-q" ] && exec cat "{out}"; exec cat "{nv}"'))
    assert [d.nvlink for d in probe.inventory().devices] == [True]


def test_no_fake_no_nvml_no_nvidia_smi_is_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    probe = open_probe()  # this machine has no libnvidia-ml
    assert isinstance(probe, NoGpus)
    assert probe.inventory() == GpuInventory()
    assert probe.inventory().source == ""


def test_the_fake_is_chosen_first_and_logged_as_a_fake(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        probe = open_probe(fake=FIXTURES / "h200.txt", nvidia_smi="/bin/false")
    assert isinstance(probe, RecordedProbe)
    assert "RECORDING" in caplog.text
    assert probe.inventory().source == "recorded"


def test_nvml_a_lost_gpu_reads_none_and_is_left_out_of_the_inventory() -> None:
    rec = gpu_records.parse((FIXTURES / "h200.txt").read_bytes())
    two = gpu_records.Recording(
        (rec.gpus[0], gpu_records.RecordedGpu(1, "GPU-b", "NVIDIA H200", 143771, power_w=80)),
        rec.driver, rec.cuda,
    )  # fmt: skip
    nvml = NvmlStandIn(two, broken=frozenset({0}))
    probe = NvmlProbe(nvml)
    assert [d.uuid for d in probe.inventory().devices] == ["GPU-b"]
    lost, fine = probe.read([0, 1])
    assert lost == GpuReading(0)
    assert fine.power_w == 80 and fine.utilization is None  # NotSupported → None
    probe.close()
    probe.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_nvml_errors_at_count_give_an_empty_inventory() -> None:
    class NoCount(NvmlStandIn):
        def nvmlDeviceGetCount(self) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    rec = gpu_records.parse((FIXTURES / "h200.txt").read_bytes())
    assert NvmlProbe(NoCount(rec)).inventory() == GpuInventory()


@pytest.mark.parametrize(
    ("v", "text"), [(13000, "13.0"), (12020, "12.2"), (13010, "13.1"), (0, "")]
)
def test_cuda_version(v: int, text: str) -> None:
    assert cuda_version(v) == text


CAPTURE = (FIXTURES / "h200-mig.txt").read_text()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([A100, CAPTURE]), st.integers(0, 30000), st.integers(0, 400), st.text())
def test_any_mangled_output_parses_or_is_refused_cleanly(
    base: str, at: int, cut: int, junk: str
) -> None:
    """A slice of a real output cut out and replaced by anything: a Recording or a
    GpuRecordError, never another exception."""
    text = base[:at] + junk + base[at + cut :]
    try:
        rec = gpu_records.parse(text)
    except GpuRecordError:
        return
    assert all(g.uuid.startswith("GPU-") and g.memory_mb >= 0 for g in rec.gpus)
