"""`--profile` values resolved against pools: forms, whole-node multiples, roles, errors."""

from __future__ import annotations

import pytest

from domain.catalog import check_name
from domain.errors import InvalidInput
from domain.fleet import Pool
from domain.requests import Profile, RoleSpec, fits_pool, resolve_roles

pytestmark = pytest.mark.unit

A = Pool("a", "main", "node", 8, 96, 1_048_576, "h200")
B = Pool("b", "main", "node", 4, 32, 262_144, "h100")
B2 = Pool("b2", "main", "node", 4, 32, 262_144, "h100")
CPU = Pool("local", "main", "local", 0, 4, 8192)
POOLS = [A, B, CPU]


def one(text: str, pools: list[Pool] = POOLS, profiles: list[Profile] | None = None) -> RoleSpec:
    (role,) = resolve_roles([text], pools, profiles or [])
    return role


def test_gpus_within_one_node() -> None:
    r = one("h200:2")
    assert (r.name, r.pool, r.members, r.resources.gpus) == ("main", "a", 1, 2)
    assert r.resources.cpus == 24 and r.resources.memory_mb == 262_144


def test_a_model_alone_is_one_whole_node() -> None:
    r = one("h200")
    assert (r.members, r.resources.gpus, r.resources.cpus) == (1, 8, 96)


def test_above_one_node_becomes_whole_node_members() -> None:
    r = one("h200:24")
    assert (r.members, r.resources.gpus, r.gpus) == (3, 8, 24)
    assert r.describe() == "3×8 h200 GPUs in pool a"


def test_above_one_node_must_be_a_whole_node_multiple() -> None:
    with pytest.raises(InvalidInput) as e:
        one("h200:12")
    assert "whole-node multiple" in e.value.message
    assert e.value.fix == "ask for h200:8 or h200:16"
    assert e.value.field == "intent.profiles[0]"


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("cpu:0.0000001", "ask for cpu:0.01"),  # issue 18, defect 8: was no limit at all
        ("cpu:0.001", "ask for cpu:0.01"),  # runc refused it at start
        ("cpu:0.015", "ask for cpu:0.01 or cpu:0.02"),
        ("cpu:1.005", "ask for cpu:1 or cpu:1.01"),
    ],
)
def test_cpus_come_in_steps_of_ten_millicores(text: str, fix: str) -> None:
    with pytest.raises(InvalidInput) as e:
        one(text)
    assert "steps of 0.01" in e.value.message and e.value.fix == fix
    assert e.value.field == "intent.profiles[0]"
    assert one("cpu:0.01").resources.cpus == 0.01 and one("cpu:1.50").resources.cpus == 1.5


def test_a_member_below_the_smallest_limits_is_refused_whatever_its_form() -> None:
    tiny_memory = Pool("tiny", "main", "local", 0, 4, 20)  # cpu:1 would get 5 MiB
    with pytest.raises(InvalidInput, match="5 MiB of memory, below the smallest limit of 6 MiB"):
        one("cpu:1", [tiny_memory])
    assert one("cpu:2", [tiny_memory]).resources.memory_mb == 10
    starved = Pool("s", "main", "node", 8, 0.04, 1_048_576, "h200")  # 0.005 CPU per GPU
    with pytest.raises(InvalidInput, match=r"0\.005 CPUs, below the smallest limit"):
        one("h200:1", [starved])
    assert one("h200:2", [starved]).resources.cpus == 0.01


def test_cpu_requests_take_a_memory_share() -> None:
    r = one("cpu:1")
    assert (r.pool, r.resources.cpus, r.resources.memory_mb, r.resources.gpus) == (
        "local", 1.0, 2048, 0,
    )  # fmt: skip
    with pytest.raises(InvalidInput, match="a node of pool local has 4") as e:
        one("cpu:6")
    assert e.value.fix == "ask for at most cpu:4, or for cpu:4 or cpu:8"


def test_above_one_node_cpu_requests_are_gangs_of_whole_nodes() -> None:
    r = one("cpu:12")
    assert (r.members, r.resources.cpus, r.resources.memory_mb) == (3, 4, 8192)


def test_named_profiles_stand_for_requests() -> None:
    r = one("big", profiles=[Profile("big", "a/h200:16")])
    assert (r.profile, r.pool, r.members) == ("big", "a", 2)


def test_several_pools_of_a_model_need_the_pool_named() -> None:
    with pytest.raises(InvalidInput) as e:
        one("h100:2", [A, B, B2])
    assert e.value.message == "profile 'h100:2' matches several pools: b, b2"
    assert e.value.fix == "name the pool, e.g. b/h100:2"
    assert one("b2/h100:2", [A, B, B2]).pool == "b2"


def test_unknown_model_lists_what_is_offered() -> None:
    with pytest.raises(InvalidInput) as e:
        one("h900:8")
    assert e.value.fix.startswith("requests offered here: cpu:N, h100:N, h200:N")


def test_each_form_is_offered_once_and_cpu_only_with_a_cpu_pool() -> None:
    """Issue 19, defect 4: a pool stored with GPU model "cpu" (refused now) made the fix read
    "cpu:N, cpu:N", and cpu:N was offered where no CPU pool serves it."""
    stored = Pool("g", "main", "node", 8, 96, 1_048_576, "cpu")  # as an older server kept it
    with pytest.raises(InvalidInput) as e:
        one("cpu:1", [A, stored])
    assert e.value.fix.startswith("requests offered here: h200:N (")
    with pytest.raises(InvalidInput) as e:
        one("h900:8", [CPU, stored])
    assert e.value.fix.startswith("requests offered here: cpu:N (")


@pytest.mark.parametrize("model", ["cpu", "CPU", "Cpu"])
def test_a_gpu_pool_cannot_be_of_model_cpu(model: str) -> None:
    with pytest.raises(InvalidInput) as e:
        Pool("g", "main", "node", 8, 96, 1_048_576, model).check()
    assert e.value.field == "gpu_model" and "cpu:N" in e.value.message
    assert "CPU pool" in e.value.fix and "h200" in e.value.fix
    assert Pool("g", "main", "node", 8, 96, 1_048_576, "cpu-x1").check()  # a name like it is one


def test_roles_must_be_named_and_unique_and_share_a_backend() -> None:
    roles = resolve_roles(["train=h200:8", "rollout=h100:2"], POOLS, [])
    assert [(r.name, r.pool, r.gpus) for r in roles] == [("train", "a", 8), ("rollout", "b", 2)]
    with pytest.raises(InvalidInput, match="no role name"):
        resolve_roles(["h200:8", "rollout=h100:2"], POOLS, [])
    with pytest.raises(InvalidInput, match="given twice"):
        resolve_roles(["x=h200:8", "x=h100:2"], POOLS, [])
    with pytest.raises(InvalidInput, match="different backends: local, node"):
        resolve_roles(["train=h200:8", "eval=cpu:1"], POOLS, [])


@pytest.mark.parametrize("text", ["", "h200:", "H200:8", "h200:1.5", "h200:0", "=h200"])
def test_malformed_requests_name_the_field(text: str) -> None:
    with pytest.raises(InvalidInput) as e:
        resolve_roles([text], POOLS, [])
    assert e.value.field in ("intent.profiles", "intent.profiles[0]")


def test_never_fits_a_pool_too_small() -> None:
    r = one("h200:32")
    assert fits_pool(r, A, 4) is None
    assert fits_pool(r, A, 3) == (
        "role main needs 4×8 h200 GPUs in pool a; pool a has only 3 nodes"
    )


def test_a_trailing_newline_is_not_part_of_a_valid_name() -> None:
    """`$` also matches before a final newline: a pool named "pool-a\\n" was accepted."""
    with pytest.raises(InvalidInput, match="not a valid name"):
        check_name("pool-a\n", "pool name", "name")
    with pytest.raises(InvalidInput):
        resolve_roles(["local\n/cpu:1"], POOLS, [])


@pytest.mark.parametrize(
    ("text", "suggested"),
    [("cpu1", "cpu:1"), ("cpu0.5", "cpu:0.5"), ("h2008", "h200:8"), ("local/cpu2", "local/cpu:2")],
)
def test_a_request_without_its_colon_is_not_a_profile_and_the_fix_names_it(
    text: str, suggested: str
) -> None:
    """`--profile cpu1` answered "no pool of cpu1 GPUs": it is no profile, and the fix
    suggests the request it resembles."""
    with pytest.raises(InvalidInput) as e:
        one(text)
    assert e.value.message == (
        f"profile {text!r} is not a profile name, a CPU request (cpu:N) or a GPU model of any"
        " pool here"
    )
    assert e.value.fix.startswith(f"did you mean {suggested}? (requests offered here: cpu:N")
    assert "GPUs" not in e.value.message


def test_a_name_like_no_request_lists_what_is_offered() -> None:
    with pytest.raises(InvalidInput) as e:
        one("bigone")
    assert "is not a profile name" in e.value.message
    assert e.value.fix.startswith("requests offered here: cpu:N, h100:N, h200:N")
