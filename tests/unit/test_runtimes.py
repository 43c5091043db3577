"""The runtime registry's rules as data: what a declaration may say (each refusal names the field
and the fix), a recipe's framework requirement against a runtime's version, a lock stale by its
framework version, and the contract lines the runner reads."""

from __future__ import annotations

import dataclasses

import pytest

from adapters.catalog import CUSTOM
from adapters.docker.runtimes import LOCAL_RUNTIMES, PYTHON_NUMPY
from domain import capsule
from domain.catalog import Method, ParamSpec, RecipeLock, RuntimePin, RuntimeSpec, method_digest
from domain.errors import Conflict, InvalidInput
from domain.runtimes import (
    check_runtime,
    digest_mismatch,
    parse_frameworks,
    pin_of,
    require_framework,
)

pytestmark = pytest.mark.unit
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
TRL = RuntimeSpec(
    "trl-gpu", "registry.example/ml/trl:0.12", "3.11", "torch-process-group", "TRL",
    digest=D1, frameworks={"trl": "0.12.0", "torch": "2.3.1+cu121"},
)  # fmt: skip
SFT = Method("trl/sft", "SFT", (), "trl-gpu", framework="trl", framework_requires=">=0.12,<1")


def test_a_sound_declaration_is_kept_and_the_digest_may_come_with_the_image() -> None:
    assert check_runtime(TRL) == TRL
    assert list(check_runtime(TRL).frameworks) == ["torch", "trl"]  # sorted by name
    inline = dataclasses.replace(TRL, image=f"registry.example/ml/trl@{D2}", digest=None)
    assert check_runtime(inline).digest == D2
    for builtin in LOCAL_RUNTIMES:  # the built-in ones keep the rules, less the digest
        assert check_runtime(builtin, require_digest=False) == builtin


@pytest.mark.parametrize(
    ("change", "message", "field", "fix"),
    [
        ({"process_model": "mpi"}, "process model 'mpi' is not one", "process_model",
         "single-process, torch-process-group, ray, cpu"),
        ({"digest": None}, "names no digest", "digest", "docker image inspect"),
        ({"digest": "sha256:abc"}, "is not a sha256 digest", "digest", "64 lower-case hex"),
        ({"image": f"repo/x@{D2}"}, f"pins {D2} but --digest is {D1}", "digest", "once"),
        ({"image": "Not An Image"}, "is not an image reference", "image", "registry.example"),
        ({"python": "3"}, "not a MAJOR.MINOR version", "python", "3.11"),
        ({"python": None}, "lists frameworks but no Python version", "python", "--python"),
        ({"frameworks": {"torch": "two"}}, "'two' is not a PEP 440 version",
         "frameworks.torch", "importlib.metadata"),
        ({"frameworks": {"bad name": "1"}}, "is not a distribution name",
         "frameworks.bad name", "pip"),
        ({"name": "Bad_Name"}, "is not a valid name", "name", "lower-case"),
        ({"description": "two\nlines"}, "without control characters", "description", "line"),
    ],
)  # fmt: skip
def test_each_refusal_names_the_field_and_the_fix(
    change: dict[str, object], message: str, field: str, fix: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_runtime(dataclasses.replace(TRL, **change))  # type: ignore[arg-type]
    assert message in caught.value.message
    assert caught.value.field == field and fix in caught.value.fix


def test_framework_flags_parse_and_refuse_what_is_not_name_equals_version() -> None:
    assert parse_frameworks(["torch=2.3.1", " trl = 0.12.0"], "--framework") == {
        "torch": "2.3.1",
        "trl": "0.12.0",
    }
    for bad, message in ((["torch"], "is not NAME=VERSION"), (["a=1", "a=2"], "given twice")):
        with pytest.raises(InvalidInput, match=message):
            parse_frameworks(bad, "--framework")


def test_a_recipe_s_framework_must_be_provided_at_a_version_it_accepts() -> None:
    require_framework(SFT, TRL)
    require_framework(CUSTOM, dataclasses.replace(TRL, frameworks={}))  # no framework: any
    old = dataclasses.replace(TRL, name="trl-old", frameworks={"trl": "0.9.6"})
    with pytest.raises(InvalidInput) as caught:
        require_framework(SFT, old)
    assert caught.value.message == (
        "method trl/sft needs trl>=0.12,<1; runtime trl-old provides trl 0.9.6"
    )
    assert "--runtime" in caught.value.fix and "tp runtime add" in caught.value.fix
    bare = dataclasses.replace(TRL, name="torch-only", frameworks={"torch": "2.3.1"})
    with pytest.raises(InvalidInput, match="runtime torch-only does not provide trl"):
        require_framework(SFT, bare)
    any_trl = dataclasses.replace(SFT, framework_requires="")
    require_framework(any_trl, dataclasses.replace(TRL, frameworks={"trl": "0.1"}))


def test_a_lock_is_stale_when_the_runtime_provides_another_framework_version() -> None:
    pin = pin_of(TRL, D1)
    lock = RecipeLock(SFT.name, SFT.version, method_digest(SFT), "trl", "0.12.0")
    lock.check(SFT, pin)
    newer = dataclasses.replace(pin, name="trl-next", frameworks={"trl": "0.13.0"})
    with pytest.raises(Conflict) as caught:
        lock.check(SFT, newer)
    assert caught.value.message == (
        "recipe.lock.json is stale: it pins trl 0.12.0; runtime trl-next provides trl 0.13.0"
    )
    assert "tp recipe upgrade" in caught.value.fix
    unpinned = RecipeLock(SFT.name, SFT.version, method_digest(SFT))
    with pytest.raises(Conflict, match="it pins no version of trl"):
        unpinned.check(SFT, pin)
    assert lock.to_dict()["framework_version"] == "0.12.0"
    assert "framework" not in unpinned.to_dict()


def test_a_declared_framework_changes_the_recipe_digest_and_no_framework_keeps_it() -> None:
    plain = dataclasses.replace(SFT, framework=None, framework_requires="")
    newer = dataclasses.replace(SFT, framework_requires=">=0.13")
    assert len({method_digest(SFT), method_digest(plain), method_digest(newer)}) == 3
    # a recipe without a framework keeps the digest it had before frameworks existed (so the
    # locks of such recipes stay current): this one's, computed by the code before them
    custom = Method("custom/custom", "x", (ParamSpec("command", "str", "h", required=True),),
                    "busybox")  # fmt: skip
    assert method_digest(custom) == (
        "sha256:d37c635875ba1161b0062d4483fb73d7c7631ba15c60485625416f8d9c11ec9b"
    )


def test_the_contract_lists_each_framework_and_the_runner_has_exits_for_them() -> None:
    pin = pin_of(PYTHON_NUMPY, D1)
    text = capsule.contract(pin).decode()
    assert text.splitlines() == [
        "name=python-numpy",
        f"image={D1}",
        "python=3.11",
        "process_model=single-process",
        "framework.numpy=1.24.2",
    ]
    assert "framework versions" in str(capsule.runner_failure(95))
    assert "another image" in str(capsule.runner_failure(96))
    old = RuntimePin("busybox", "b:1", D1, None, "single-process")  # a spec stored before
    assert RuntimePin(**old.to_dict()).frameworks == {}  # type: ignore[arg-type]


def test_a_digest_mismatch_names_both_digests_and_the_fix() -> None:
    err = digest_mismatch(TRL, D2, ["registry.example/ml/trl@" + D2])
    assert f"pins {D1}" in err.message and f"is {D2}" in err.message
    assert f"registry.example/ml/trl:0.12@{D1}" in err.fix  # load the pinned image
    assert (
        f"tp runtime add trl-gpu --image registry.example/ml/trl:0.12 --digest {D2} --replace"
        in (err.fix)
    )  # or re-register the new one
