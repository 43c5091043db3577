"""The fleet file: the example in docs/fleet.md loads and applies; the server's start applies
TUNEPLANE_FLEET_FILE, then gives an empty system its defaults (over in-memory adapters)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from adapters.memory import MemoryStore, MemoryUnitOfWork
from application import fleet, policy
from application.context import Context
from domain.errors import InvalidInput
from entrypoints import fleet_config
from entrypoints.server import prepare_fleet
from entrypoints.settings import Settings
from tests.support.context import memory_context

pytestmark = pytest.mark.unit
DOC = Path(__file__).parents[2] / "docs" / "fleet.md"


def example(tmp_path: Path) -> Path:
    block = re.search(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/fleet.md has no TOML example"
    path = tmp_path / "fleet.toml"
    path.write_text(block.group(1))
    return path


def empty_context(tmp_path: Path) -> Context:
    store = MemoryStore()
    return dataclasses.replace(memory_context(tmp_path), uow=lambda: MemoryUnitOfWork(store))


def settings(tmp_path: Path, fleet_file: Path | None) -> Settings:
    return dataclasses.replace(
        Settings.from_env(), state_dir=tmp_path / "state", fleet_file=fleet_file
    )


async def test_the_documented_example_applies_on_top_of_the_defaults(tmp_path: Path) -> None:
    ctx = empty_context(tmp_path)
    await prepare_fleet(ctx, settings(tmp_path, None))  # what `tp up` makes: pool local
    await prepare_fleet(ctx, settings(tmp_path, example(tmp_path)))  # then the file
    pools = {p.pool.name: p for p in await fleet.list_fleet(ctx)}
    assert sorted(pools) == ["a", "b", "cpu", "local"]
    assert (pools["a"].pool.fleet, pools["local"].pool.fleet) == ("dc1", "local")
    assert [n.node.name for n in pools["a"].nodes] == ["a-0", "a-1", "a-2", "a-3"]
    assert [n.node.name for n in pools["b"].nodes] == ["gpu-h100-01", "gpu-h100-02"]
    profiles = {e.name: e for e in await fleet.list_profiles(ctx)}
    assert (profiles["big"].members, profiles["tiny"].pool) == (2, "cpu")
    assert {"local/cpu:N", "cpu/cpu:N", "h200:N", "h100"} <= set(profiles)
    queues = {u.queue.name: u.queue for u in await policy.list_queues(ctx)}
    assert sorted(queues) == ["default", "eval", "research"]
    assert (queues["research"].priority, queues["research"].gpu_quota) == (10, 24)
    # applying again at the next start changes nothing
    again = fleet_config.load(example(tmp_path)).to_config()
    from application.fleet_config import apply_fleet_config

    result = await apply_fleet_config(ctx, again)
    assert (result.created, result.changed) == ((), ())


async def test_a_bad_fleet_file_stops_the_start_naming_the_entry(tmp_path: Path) -> None:
    ctx = empty_context(tmp_path)
    path = example(tmp_path)
    path.write_text(path.read_text().replace("gpus_per_node = 8\ncpus_per_node = 64",
                                             "gpus_per_node = 99\ncpus_per_node = 64"))  # fmt: skip
    with pytest.raises(InvalidInput) as err:
        await prepare_fleet(ctx, settings(tmp_path, path))
    assert err.value.field == "pools[1].gpus_per_node"
    assert err.value.message.startswith("pools[1].gpus_per_node: pool b")
    assert await fleet.list_fleet(ctx) == []  # nothing written, not even the defaults
    path.write_text("[[pools]]\nname = 'x'\nbackend = 'node'\n")
    with pytest.raises(InvalidInput) as missing:
        await prepare_fleet(ctx, settings(tmp_path, path))
    assert missing.value.field == "pools[0]" and "cpus_per_node" in missing.value.message


def test_settings_and_host_resources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUNEPLANE_FLEET_FILE", str(tmp_path / "f.toml"))
    assert Settings.from_env().fleet_file == tmp_path / "f.toml"
    monkeypatch.delenv("TUNEPLANE_FLEET_FILE")
    assert Settings.from_env().fleet_file is None
    cpus, memory_mb = fleet_config.host_resources()
    assert cpus >= 1 and memory_mb >= 1
