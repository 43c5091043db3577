"""The in-pod checkpoint step of the Kubernetes backend (adapters/checkpoint_step.py), run as the
pod runs it: ``python3 -I -c <its source> JOB_DIR ATTEMPT -- COMMAND``, a real process over
temporary folders, the command printing the environment it got."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from adapters import checkpoint_step
from adapters.kubernetes.checkpoints import STEP
from domain import checkpoints
from domain.artifacts import Manifest
from domain.checkpoints import Checkpoint, newest_first

pytestmark = pytest.mark.unit

SHOW = "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))"


@dataclass
class Ran:
    code: int
    env: dict[str, str | None]
    said: str


def step(job: Path, attempt: int, index: int = 0, command: list[str] | None = None) -> Ran:
    show = [sys.executable, "-c", SHOW, "TUNEPLANE_CHECKPOINT_DIR", "TUNEPLANE_RESUME_FROM"]
    done = subprocess.run(
        [sys.executable, "-I", "-c", STEP, str(job), str(attempt), "--", *(command or show)],
        env={**os.environ, "TUNEPLANE_MEMBER_INDEX": str(index)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    env = json.loads(done.stdout) if done.returncode == 0 and command is None else {}
    return Ran(done.returncode, env, done.stderr)


def save(
    job: Path,
    attempt: int,
    name: str,
    step: int | None = None,
    complete: bool = True,
    files: dict[str, str] | None = None,
) -> Path:
    path = job / str(attempt) / name
    (path / "sub").mkdir(parents=True)
    for rel, text in (files or {"model.bin": f"weights of {name}"}).items():
        (path / rel.replace("__", "/")).write_text(text)
    if complete:
        (path / "COMPLETE").write_text("" if step is None else f"{step}\n")
    return path


def test_the_first_attempt_gets_its_folder_and_nothing_to_resume(tmp_path: Path) -> None:
    job = tmp_path / "job-1"  # missing: made (the kubelet makes the subPath; the step too)
    ran = step(job, 1)
    assert ran.code == 0, ran.said
    assert ran.env == {"TUNEPLANE_CHECKPOINT_DIR": f"{job}/1", "TUNEPLANE_RESUME_FROM": ""}
    assert (job / "1").is_dir()
    assert "no checkpoint yet" in ran.said


def test_the_newest_is_resumed_from_given_a_manifest_and_the_command_runs_as_is(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    save(job, 1, "checkpoint-2", 2)
    newest = save(job, 1, "checkpoint-4", 4, files={"model.bin": "w4", "sub__opt.pt": "adam"})
    ran = step(job, 2)
    assert ran.code == 0, ran.said
    assert ran.env["TUNEPLANE_RESUME_FROM"] == str(newest)
    assert ran.env["TUNEPLANE_CHECKPOINT_DIR"] == f"{job}/2"
    assert f"resuming from checkpoint checkpoint-4 of attempt 1, step 4: {newest}" in ran.said
    # the manifest beside it is domain.artifacts.Manifest's shape, every regular file hashed
    written = json.loads((job / "1" / ".checkpoint-4.tuneplane-manifest.json").read_text())
    manifest = Manifest.from_dict(written)
    assert [(f.path, f.size, f.sha256) for f in manifest.files] == [
        (rel, len(data), hashlib.sha256(data).hexdigest())
        for rel, data in (("COMPLETE", b"4\n"), ("model.bin", b"w4"), ("sub/opt.pt", b"adam"))
    ]
    assert (job / "1" / ".checkpoint-2.tuneplane-manifest.json").is_file()  # kept: given one
    # the command is exec'd with its arguments and its exit status is the member's
    count = [sys.executable, "-c", "import sys; sys.exit(len(sys.argv))", "a b", ""]
    assert step(job, 3, command=count).code == 3


def test_a_later_attempt_is_newer_whatever_its_step(tmp_path: Path) -> None:
    job = tmp_path / "job"
    save(job, 1, "checkpoint-900", 900)
    restarted = save(job, 2, "checkpoint-100", 100)  # attempt 2 started again from scratch
    assert step(job, 3).env["TUNEPLANE_RESUME_FROM"] == str(restarted)


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        (lambda p: (p / "model.bin").write_text("changed"), "model.bin changed"),
        (lambda p: (p / "model.bin").unlink(), "model.bin is missing"),
        (lambda p: (p / "sub" / "extra").write_text("x"), "sub/extra was added"),
        (
            lambda p: (p.parent / ".checkpoint-4.tuneplane-manifest.json").write_text("{"),
            "its manifest cannot be read",
        ),
    ],
)
def test_a_newest_that_does_not_verify_is_skipped_for_the_one_before(
    tmp_path: Path, tamper: object, why: str
) -> None:
    job = tmp_path / "job"
    before = save(job, 1, "checkpoint-2", 2)
    newest = save(job, 1, "checkpoint-4", 4)
    assert step(job, 2).env["TUNEPLANE_RESUME_FROM"] == str(newest)  # manifests written
    tamper(newest)  # type: ignore[operator]
    ran = step(job, 3)
    assert ran.code == 0, ran.said
    assert ran.env["TUNEPLANE_RESUME_FROM"] == str(before)
    assert "checkpoint checkpoint-4 of attempt 1 is skipped: " in ran.said and why in ran.said
    assert newest.is_dir()  # one of the two newest: kept, never resumed from while it differs


def test_none_verifies_then_none_is_resumed_from(tmp_path: Path) -> None:
    job = tmp_path / "job"
    only = save(job, 1, "checkpoint-4", 4)
    step(job, 2)
    (only / "model.bin").write_text("changed")
    ran = step(job, 3)
    assert ran.env["TUNEPLANE_RESUME_FROM"] == ""
    assert "no checkpoint verifies: starting from none" in ran.said


def test_member_zero_keeps_the_two_newest_and_collects_the_rest_others_only_read(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    for n in (1, 2, 3):
        save(job, 1, f"checkpoint-{n}", n)
    save(job, 1, "checkpoint-9", complete=False)  # cut short by the end of attempt 1
    (job / "1" / "stray.log").write_text("x")
    newest = save(job, 2, "checkpoint-4", 4)
    save(job, 2, "checkpoint-5", complete=False)
    before = sorted(str(p.relative_to(job)) for p in job.rglob("*"))
    other = step(job, 3, index=1)
    assert other.env["TUNEPLANE_RESUME_FROM"] == str(newest)
    assert sorted(str(p.relative_to(job)) for p in job.rglob("*") if p.name != "3") == before
    ran = step(job, 3, index=0)
    assert ran.env["TUNEPLANE_RESUME_FROM"] == str(newest)
    assert sorted(p.name for p in (job / "1").iterdir()) == [
        ".checkpoint-3.tuneplane-manifest.json",
        "checkpoint-3",
    ]
    assert sorted(p.name for p in (job / "2").iterdir()) == [
        ".checkpoint-4.tuneplane-manifest.json",
        "checkpoint-4",
    ]
    # the next attempt's member 0: attempt 1's folder, emptied, goes
    save(job, 3, "checkpoint-6", 6)
    step(job, 4)
    assert sorted(p.name for p in job.iterdir()) == ["2", "3", "4"]


def test_the_one_resumed_from_is_kept_beyond_the_two_newest(tmp_path: Path) -> None:
    job = tmp_path / "job"
    for n in (1, 2, 3):
        path = save(job, 1, f"checkpoint-{n}", n)
        manifest = checkpoint_step.manifest_of(str(path))  # as written when it completed
        (job / "1" / f".checkpoint-{n}.tuneplane-manifest.json").write_text(json.dumps(manifest))
    for n in (2, 3):
        (job / "1" / f"checkpoint-{n}" / "model.bin").write_text("changed")
    ran = step(job, 2)
    assert ran.env["TUNEPLANE_RESUME_FROM"] == str(job / "1" / "checkpoint-1")
    assert sorted(p.name for p in (job / "1").iterdir() if not p.name.startswith(".")) == [
        "checkpoint-1",
        "checkpoint-2",
        "checkpoint-3",
    ]


def test_only_member_zero_writes_manifests(tmp_path: Path) -> None:
    job = tmp_path / "job"
    newest = save(job, 1, "checkpoint-3", 3)
    assert step(job, 2, index=1).env["TUNEPLANE_RESUME_FROM"] == str(newest)
    assert not list(job.glob("1/.*"))
    assert step(job, 2, index=0).env["TUNEPLANE_RESUME_FROM"] == str(newest)
    assert [p.name for p in job.glob("1/.*")] == [".checkpoint-3.tuneplane-manifest.json"]


def test_links_bad_names_and_cut_short_saves_are_never_resumed_from_nor_followed(
    tmp_path: Path,
) -> None:
    job, outside = tmp_path / "job", tmp_path / "outside"
    save(tmp_path, 0, "elsewhere", 99)  # a complete checkpoint outside the job's folder
    (outside).mkdir()
    (outside / "secret").write_text("not yours")
    good = save(job, 1, "checkpoint-1", 1)
    (good / "link").symlink_to(outside / "secret")  # a file link: left out, not hashed
    (good / "sub" / "dirlink").symlink_to(outside)  # a folder link: not followed
    (job / "1" / "checkpoint-99").symlink_to(tmp_path / "0" / "elsewhere")
    marker_link = save(job, 1, "checkpoint-98", complete=False)
    (marker_link / "COMPLETE").symlink_to(tmp_path / "0" / "elsewhere" / "COMPLETE")
    save(job, 1, "bad name 97", 97)
    save(job, 1, "checkpoint-96", complete=False)
    ran = step(job, 2)
    assert ran.code == 0, ran.said
    assert ran.env["TUNEPLANE_RESUME_FROM"] == str(good)
    written = json.loads((job / "1" / ".checkpoint-1.tuneplane-manifest.json").read_text())
    assert [f["path"] for f in written["files"]] == ["COMPLETE", "model.bin"]
    assert sorted(p.name for p in (job / "1").iterdir()) == [
        ".checkpoint-1.tuneplane-manifest.json",
        "checkpoint-1",
    ]
    # collecting removed the links, never what they point at
    assert (outside / "secret").read_text() == "not yours"
    assert (tmp_path / "0" / "elsewhere" / "COMPLETE").is_file()
    assert (good / "link").is_symlink()  # inside a kept checkpoint: left as the workload made


def test_a_job_folder_that_cannot_hold_the_attempt_stops_before_the_command(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    job.write_text("a file, not a folder")
    ran = step(job, 1, command=[sys.executable, "-c", "print('ran')"])
    assert ran.code == checkpoint_step.EXIT
    assert "cannot be made" in ran.said and "checkpoint claim mounted" in ran.said
    bad = subprocess.run(
        [sys.executable, "-I", "-c", STEP, str(job), "0", "--", "true"], capture_output=True
    )
    assert bad.returncode == 2 and b"usage" in bad.stderr


def test_its_grammar_is_python_3_8s() -> None:
    """The member's image may hold an older Python than TunePlane's (the step says 3.8)."""
    ast.parse(STEP, feature_version=(3, 8))


def test_the_rules_are_the_domains() -> None:
    assert checkpoint_step.NAME.pattern == checkpoints._NAME.pattern
    assert checkpoint_step.MARKER_STEP.pattern == checkpoints._STEP.pattern
    assert (checkpoint_step.COMPLETE, checkpoint_step.KEEP, checkpoint_step.MAX_FILES) == (
        checkpoints.COMPLETE,
        checkpoints.KEEP,
        checkpoints.MAX_FILES,
    )


def test_the_order_is_the_domains(tmp_path: Path) -> None:
    cases = [(1, "checkpoint-900", "900"), (2, "checkpoint-100", ""), (2, "final", ""),
             (2, "checkpoint-50", "50"), (1, "x-7", "")]  # fmt: skip
    for n, (attempt, name, marker) in enumerate(cases):
        path = save(tmp_path, attempt, name)
        (path / "COMPLETE").write_text(marker)
        os.utime(path / "COMPLETE", ns=(n * 10**9, n * 10**9))
    found = checkpoint_step.complete(str(tmp_path), 3)
    ours = [(c.attempt, c.name) for c in found]
    domain = newest_first(
        [
            Checkpoint(
                "j",
                c.attempt,
                c.name,
                c.step,
                Manifest(()),
                datetime.fromtimestamp(c.completed / 1e9, UTC),
            )
            for c in reversed(found)
        ]
    )
    assert ours == [(c.attempt, c.name) for c in domain]
    assert ours[:2] == [(2, "final"), (2, "checkpoint-100")]


def sdk_save(job: Path, attempt: int, name: str, step_number: int) -> Path:
    """A checkpoint saved as a workload does, marked by the SDK in a process of its own with
    the environment a Kubernetes member with a checkpoint claim gets."""
    path = job / str(attempt) / name
    code = (
        "import sys; from pathlib import Path; from adapters.sdk import report\n"
        "p = Path(sys.argv[1]); (p / 'sub').mkdir(parents=True)\n"
        "(p / 'model.bin').write_text('weights'); (p / 'sub' / 'opt.pt').write_text('adam')\n"
        "(p / 'sub' / 'link').symlink_to(p / 'model.bin')\n"
        "assert report.checkpoint(p, int(sys.argv[2])) and report.errors() == 0"
    )
    env = {**os.environ, "TUNEPLANE_CHECKPOINT_MANIFESTS": "1"}
    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code, str(path), str(step_number)], env=env,
                   cwd=repo, check=True, timeout=60)  # fmt: skip
    return path


def test_the_sdk_writes_the_steps_manifest_as_a_checkpoint_completes(tmp_path: Path) -> None:
    job = tmp_path / "job"
    path = sdk_save(job, 1, "checkpoint-3", 3)
    written = json.loads((job / "1" / ".checkpoint-3.tuneplane-manifest.json").read_text())
    assert written == checkpoint_step.manifest_of(str(path))  # COMPLETE included, no link
    assert [f["path"] for f in written["files"]] == ["COMPLETE", "model.bin", "sub/opt.pt"]


def test_a_file_changed_after_the_sdk_marked_it_is_caught_by_the_next_attempt(
    tmp_path: Path,
) -> None:
    """Without the SDK's manifest the next attempt's step would make one from the changed files
    and trust them (its first sighting)."""
    job = tmp_path / "job"
    before = sdk_save(job, 1, "checkpoint-2", 2)
    newest = sdk_save(job, 1, "checkpoint-4", 4)
    (newest / "sub" / "opt.pt").write_text("overwritten after the save")
    ran = step(job, 2)
    assert ran.env["TUNEPLANE_RESUME_FROM"] == str(before)
    assert "checkpoint-4 of attempt 1 is skipped: it does not match its manifest: sub/opt.pt" in (
        ran.said
    )
