"""The dependency rules fail on a violation (CI runs them on the repository: lint-imports, ruff).

The allow-list contract type of our own (tests/support/import_contracts.py) is run on a small
package made here; the ban on clock reads in domain/ and application/ (domain/ruff.toml) is run
by ruff on code given as if it were in those directories.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support.import_contracts import ThirdPartyAllowList

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_allow_list_names_each_import_outside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "tp_probe_core"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.py").write_text(
        "import json\nimport packaging.version\nfrom tp_probe_core import x\n"
    )
    (pkg / "x.py").write_text("import datetime\n\nimport tenacity\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("tp_probe_core", include_external_packages=True, cache_dir=None)
    contract = ThirdPartyAllowList(
        name="core",
        session_options={"root_packages": ["tp_probe_core"]},
        contract_options={"source_modules": ["tp_probe_core"], "allowed": ["packaging"]},
    )
    check = contract.check(graph, verbose=False)
    assert not check.kept
    assert check.metadata["broken"] == [
        {"importer": "tp_probe_core.x", "imported": "tenacity", "lines": [3]}
    ]
    allowing = ThirdPartyAllowList(
        name="core",
        session_options={"root_packages": ["tp_probe_core"]},
        contract_options={
            "source_modules": ["tp_probe_core"],
            "allowed": ["packaging", "tenacity"],
        },
    )
    assert allowing.check(graph, verbose=False).kept


@pytest.mark.parametrize(
    ("where", "banned"),
    [
        ("domain/probe.py", True),
        ("application/probe.py", True),
        ("adapters/probe.py", False),  # adapters/system.py is the clock
    ],
)
def test_clock_reads_are_banned_in_the_core_only(where: str, banned: bool) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    code = "from datetime import UTC, datetime\n\nNOW = datetime.now(UTC)\n"
    done = subprocess.run(
        [ruff, "check", "--no-cache", "--output-format", "concise", "--stdin-filename", where, "-"],
        input=code,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert ("TID251 `datetime.datetime.now` is banned" in done.stdout) is banned, done.stdout
