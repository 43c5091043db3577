"""The workload-side reporting module: what it writes, who writes, and that it never raises."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.sdk import report
from adapters.telemetry.jsonl import JsonlParser

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TUNEPLANE_METRICS_DIR", str(tmp_path / "metrics"))
    monkeypatch.delenv("RANK", raising=False)
    report.close()
    report.configure(all_ranks=False)
    report._state["directory"] = None
    yield tmp_path / "metrics"
    report.close()


def lines(directory: Path, rank: int = 0) -> list[dict[str, object]]:
    text = (directory / f"report-rank{rank}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_a_line_per_call_that_the_collector_reads_back(fresh: Path) -> None:
    report.log({"train/loss": 0.5, "train/acc": 1, "flag": True, "name": "x"}, step=3)
    report.log({"train/loss": math.nan}, step=4, wall_time=1.7e9)
    got = lines(fresh)
    assert got[0]["step"] == 3 and got[0]["metrics"] == {"train/loss": 0.5, "train/acc": 1.0}
    assert got[1]["wall_time"] == 1.7e9
    parsed = JsonlParser().feed((fresh / "report-rank0.jsonl").read_bytes(), 0)
    assert parsed.corrupt == 0 and parsed.consumed == (fresh / "report-rank0.jsonl").stat().st_size
    values = [(s.tag, s.step, s.value) for r in parsed.records for s in r.scalars]
    assert values[:2] == [("train/loss", 3, 0.5), ("train/acc", 3, 1.0)]
    assert values[2][0] == "train/loss" and math.isnan(values[2][2])


def test_only_rank_zero_writes_unless_told(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    report.log({"x": 1.0}, step=0)
    assert not (fresh / "report-rank3.jsonl").exists()
    report.configure(all_ranks=True)
    report.log({"x": 1.0}, step=0)
    assert lines(fresh, 3)[0]["metrics"] == {"x": 1.0}


def test_it_never_raises_into_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    report.configure(directory=blocker / "sub")
    before = report.errors()
    report.log({"x": 1.0}, step=0)
    report.log({"x": 1.0}, step="not a step")  # type: ignore[arg-type]
    assert report.errors() == before + 2
    assert capsys.readouterr().err.count("tuneplane report") <= 1


def test_threads_write_whole_lines(fresh: Path) -> None:
    def work(k: int) -> None:
        for step in range(200):
            report.log({f"t{k}": step * 1.5, "pad": "y" * 10}, step=step)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = lines(fresh)
    assert len(got) == 1600 and all(set(line) == {"step", "wall_time", "metrics"} for line in got)


def test_a_checkpoint_is_marked_complete_last_and_read_back_as_the_domain_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from domain.checkpoints import COMPLETE, marker_step

    monkeypatch.setenv("TUNEPLANE_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.delenv("TUNEPLANE_RESUME_FROM", raising=False)
    assert report.resume_from() is None
    where = report.checkpoint_dir() / "checkpoint-1200"
    (where / "sub").mkdir(parents=True)
    (where / "weights.bin").write_bytes(b"\1" * 100)
    (where / "sub" / "optimizer.bin").write_bytes(b"\2" * 10)
    assert report.checkpoint(where, 1200)
    assert marker_step((where / COMPLETE).read_text()) == 1200
    assert sorted(p.name for p in where.iterdir()) == ["COMPLETE", "sub", "weights.bin"]
    assert report.checkpoint(where) and (where / COMPLETE).read_text() == ""  # again: no step
    monkeypatch.setenv("TUNEPLANE_RESUME_FROM", str(where))
    assert report.resume_from() == where


def test_marking_a_checkpoint_never_raises_into_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = report.errors()
    assert not report.checkpoint(tmp_path / "nothing-here", 3)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert not report.checkpoint(a_file, 3)
    assert report.errors() == before + 2
    assert not (tmp_path / "nothing-here").exists()
