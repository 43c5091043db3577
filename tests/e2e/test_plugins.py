"""Plugins end to end: the real `tp` CLI against a real server, PostgreSQL and container
engine. The example plugin (docs/examples/plugins/exact-match) is published (again: accepted;
changed under its version: refused), listed and read, installed into an experiment, carried by
the preview into the Job Capsule and run by the job; a disabled version and a tampered blob
store are refused at preview with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from domain.plugins import open_package
from entrypoints.cli.errors import CONFLICT
from entrypoints.cli.plugins import read_package
from tests.e2e.test_walkthrough import Cli, job_id_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "docs/examples/plugins/exact-match"
TRAIN = """\
printf 'paris\\nrome\\nberlin\\nmadrid\\n' > predictions.txt
printf 'paris\\nrome\\nbern\\nmadrid\\n' > references.txt
sh /tuneplane/capsule/plugins/exact-match/score.sh predictions.txt references.txt
"""


def blobs(state: Path) -> set[Path]:
    return {p for p in (state / "blobs" / "sha256").rglob("*") if p.is_file()}


def test_publish_install_submit_disable(cli: Cli, tmp_path: Path) -> None:
    plugin = tmp_path / "exact-match"
    shutil.copytree(EXAMPLE, plugin)
    digest = open_package(read_package(plugin)).digest
    before = blobs(tmp_path / "state")
    published = cli("plugin", "publish", str(plugin))
    assert f"published exact-match@1.0.0 {digest}" in published.stdout
    (blob,) = blobs(tmp_path / "state") - before
    again = cli("plugin", "publish", str(plugin))
    assert "already published with these files" in again.stdout and digest in again.stdout
    (plugin / "score.sh").write_text((plugin / "score.sh").read_text() + "# changed\n")
    refused = cli("plugin", "publish", str(plugin), ok=False)
    assert refused.returncode == CONFLICT and "bump the version" in refused.stderr
    assert digest in refused.stderr

    listed = cli("plugin", "ls").stdout
    assert "evaluation" in listed and "exact-match" in listed and "workload" in listed
    assert "read-outputs, write-outputs" in listed
    groups = json.loads(cli("plugin", "ls", "--group", "evaluation", "--json").stdout)["groups"]
    assert [p["name"] for p in groups[0]["plugins"]] == ["exact-match"]
    info = cli("plugin", "info", "exact-match@1.0.0").stdout
    assert digest in info and "score.sh" in info and "workload: inside the job's" in info
    assert "1.0.0" in cli("plugin", "info", "exact-match").stdout

    cli("new", "scorer", "--method", "custom/custom")
    (cli.cwd / "scorer" / "train.sh").write_text(TRAIN)
    installed = cli("plugin", "install", "exact-match@1.0.0", "scorer")
    assert digest in installed.stdout
    toml = (cli.cwd / "scorer" / "experiment.toml").read_text()
    assert f'"exact-match" = {{ version = "1.0.0", digest = "{digest}" }}' in toml
    cli("validate", "scorer")

    cli("submit", "scorer", "--profile", "cpu:1", "--preview")
    (saved,) = (cli.cwd / ".tuneplane-data" / "submissions").glob("pv-*.json")
    spec = json.loads(saved.read_text())["preview"]["spec"]
    (use,) = spec["plugins"]
    assert (use["name"], use["version"], use["digest"]) == ("exact-match", "1.0.0", digest)
    out = cli("submit", "--commit", str(saved))
    job_id = job_id_in(out.stdout)
    job = cli.wait_state(job_id, {"succeeded", "failed"})
    logs = cli("job", "logs", job_id).stdout
    assert job["state"] == "succeeded", logs
    assert "exact-match: 3/4 = 0.750" in logs
    artifacts = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)
    assert "eval/exact-match.json" in {f["path"] for f in artifacts["members"][0]["files"]}

    reason = "misreads CRLF files; use 1.0.1"
    cli("plugin", "disable", "exact-match@1.0.0", "--reason", reason)
    off = cli("submit", "scorer", "--profile", "cpu:1", "--preview", ok=False)
    assert off.returncode == CONFLICT and reason in off.stderr, off.stderr
    assert "disabled for new submissions" in off.stderr
    checked = cli("validate", "scorer", ok=False)
    assert checked.returncode != 0 and reason in checked.stderr
    assert cli.status(job_id)["state"] == "succeeded"  # a committed job keeps its plugin
    cli("plugin", "enable", "exact-match@1.0.0")

    data = bytearray(blob.read_bytes())
    data[data.find(b"awk -v out")] ^= 0x20  # one byte of score.sh, in the blob store
    blob.write_bytes(bytes(data))
    tampered = cli("submit", "scorer", "--profile", "cpu:1", "--preview", ok=False)
    assert tampered.returncode == CONFLICT and "failed its integrity check" in tampered.stderr
    shutil.copytree(EXAMPLE, tmp_path / "again")
    cli("plugin", "publish", str(tmp_path / "again"))  # the same files: the blob is whole again
    cli("submit", "scorer", "--profile", "cpu:1", "--preview")

    rc = tmp_path / "rc"
    shutil.copytree(EXAMPLE, rc)
    toml_file = rc / "plugin.toml"
    toml_file.write_text(toml_file.read_text().replace('"1.0.0"', '"1.1.0-rc.1"'))
    cli("plugin", "publish", str(rc))
    versions = cli("plugin", "info", "exact-match").stdout
    assert versions.index("1.1.0-rc.1") < versions.index("1.0.0")  # newest first
    assert "@1.0.0" in cli("plugin", "install", "exact-match", "scorer").stdout  # a release
    cli("plugin", "disable", "exact-match@1.0.0", "--reason", reason)
    moved = cli("plugin", "install", "exact-match", "scorer").stdout
    assert "@1.1.0-rc.1" in moved and "(was 1.0.0)" in moved
    refused = cli("plugin", "install", "exact-match@1.0.0", "scorer", ok=False)
    assert refused.returncode == CONFLICT and reason in refused.stderr
