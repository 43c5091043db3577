"""The node daemon's members' directories never expose its state directory (its credential)."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.errors import InvalidInput
from entrypoints.node_daemon import _outputs_root

pytestmark = pytest.mark.unit


def test_outputs_default_to_a_directory_inside_the_state_directory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    root = _outputs_root(None, state)
    assert root == state.resolve() / "outputs" and root.is_dir()


def test_an_outputs_dir_elsewhere_is_made(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    assert _outputs_root(tmp_path / "big" / "outputs", state).is_dir()


@pytest.mark.parametrize("given", [".", "..", "../.."])
def test_an_outputs_dir_holding_the_state_directory_is_refused(tmp_path: Path, given: str) -> None:
    state = tmp_path / "a" / "state"
    state.mkdir(parents=True)
    with pytest.raises(InvalidInput, match="--outputs-dir") as err:
        _outputs_root(state / given, state)
    assert err.value.field == "outputs_dir" and "credential" in err.value.message
