"""The test tiers (tests/fixtures/tiers.py): the engine/slurm/browser markers follow the
fixtures a test uses, so `-m "not (engine or slurm or browser or slow)"` (deploy/dev/test.sh
--fast) leaves every such test out; under --no-engines, a test that reaches a component anyway
fails, naming the marker it lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import pytest
pytest_plugins = ["tests.fixtures.tiers"]

@pytest.fixture(scope="session")
def docker_host():
    return "unix:///engine.sock"

@pytest.fixture
def api_server(docker_host):  # reaches the engine through another fixture
    return docker_host

@pytest.fixture
def slurm_cluster():
    return "cluster"

@pytest.fixture
def browser():
    return "chromium"
"""

TESTS = """
import pytest
from tests.fixtures.tiers import refuse

def test_pure():
    pass

def test_through_the_api(api_server):
    pass

def test_on_slurm(slurm_cluster):
    pass

def test_in_a_browser(browser):
    pass

@pytest.mark.slurm
def test_starts_slurm_itself():
    refuse("slurm", "a Slurm cluster (slurm_cluster_started)")

def test_starts_slurm_unmarked():
    refuse("slurm", "a Slurm cluster (slurm_cluster_started)")
"""

FAST = "not (engine or slurm or browser or slow)"


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # a bare pytest starts faster
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_tiers_example=TESTS)
    return pytester


def selected(suite: pytest.Pytester, *args: str) -> set[str]:
    run = suite.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    return {line.split("::")[1] for line in run.outlines if "::" in line}


def test_the_markers_follow_the_fixtures_before_m_selects(suite: pytest.Pytester) -> None:
    assert selected(suite, "-m", FAST) == {"test_pure", "test_starts_slurm_unmarked"}
    assert selected(suite, "-m", "slurm and not engine") == {
        "test_on_slurm",
        "test_starts_slurm_itself",
    }


def test_no_engines_fails_a_test_that_reaches_a_component(suite: pytest.Pytester) -> None:
    run = suite.runpytest_subprocess("-p", "no:cacheprovider", "--no-engines", "-rA")
    run.assert_outcomes(passed=1, failed=2, errors=3)  # errors: failed fixture set-ups
    out = run.stdout.str()
    assert "PASSED test_tiers_example.py::test_pure" in out
    for name, marker in [
        ("test_through_the_api", "engine"),
        ("test_on_slurm", "slurm"),
        ("test_in_a_browser", "browser"),
    ]:
        assert f"ERROR test_tiers_example.py::{name} - Failed: --no-engines" in out
        assert f"must be marked `{marker}`" in out
    assert "FAILED test_tiers_example.py::test_starts_slurm_unmarked" in out


def test_each_xdist_worker_gets_its_own_share_of_the_rendezvous_ports() -> None:
    from tests.fixtures.server import worker_rendezvous_ports

    assert worker_rendezvous_ports({}) == "29500-29999"
    two = {"PYTEST_XDIST_WORKER_COUNT": "2"}
    shares = [worker_rendezvous_ports(dict(two, PYTEST_XDIST_WORKER=f"gw{i}")) for i in (0, 1)]
    assert shares == ["29500-29749", "29750-29999"]
