"""The runtime registry as a use case, on in-memory adapters: admins add runtimes pinned by
digest (others may not; built-in names stay built in; a re-add with other content needs
``replace``); a preview pins a registered runtime only to its digest; a recipe's framework
must be provided at a version its specifier accepts; a lock stale by framework version is
refused; a committed job keeps its pin when the runtime is replaced."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from adapters.docker.runtimes import PYTHON_NUMPY
from adapters.memory.backend import MemoryBackend
from adapters.recipes import load_recipes
from application import runtimes, submissions
from application.context import Context
from domain.capsule import StorageCapabilities
from domain.catalog import RecipeLock, RuntimeSpec, method_digest
from domain.errors import Conflict, Forbidden, InvalidInput
from tests.support.context import ADMIN, ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
IMAGE = "registry.example/ml/numpy:1"
MLP = "numpy/mlp-classification"
NUMPY = RuntimeSpec("np", IMAGE, "3.11", "single-process", "NumPy", digest=D1,
                    frameworks={"numpy": "1.26.4"})  # fmt: skip


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    backend = MemoryBackend(
        images={IMAGE: D1, PYTHON_NUMPY.image: D2},
        storage=StorageCapabilities(capsule=True),
    )
    return memory_context(tmp_path, backend)


async def test_admins_add_runtimes_and_everyone_lists_them(ctx: Context) -> None:
    with pytest.raises(Forbidden, match="may not add runtimes") as caught:
        await runtimes.add_runtime(ctx, ALICE, NUMPY)
    assert "ask an admin" in caught.value.fix
    added = await runtimes.add_runtime(ctx, ADMIN, NUMPY)
    assert added.outcome == "created" and added.runtime.revision == 1
    assert (added.runtime.added_by, added.runtime.added_at) == ("admin", ctx.clock.now())
    listed = await runtimes.list_runtimes(ctx)
    assert [r.name for r in listed] == [
        "busybox",
        "python",
        "python-numpy",
        "python-torch",
        "pytorch-trl",
        "verl",
        "np",
    ]
    assert [r.builtin for r in listed] == [True, True, True, True, True, True, False]
    assert (await runtimes.find_runtime(ctx, "np")).frameworks == {"numpy": "1.26.4"}
    with pytest.raises(InvalidInput, match="unknown runtime 'nope'") as unknown:
        await runtimes.find_runtime(ctx, "nope")
    assert "busybox, python, python-numpy, python-torch, pytorch-trl, verl, np" in unknown.value.fix


async def test_built_in_names_stay_built_in_and_re_adds_need_replace(ctx: Context) -> None:
    with pytest.raises(Conflict, match="runtime python is built in"):
        await runtimes.add_runtime(ctx, ADMIN, dataclasses.replace(NUMPY, name="python"))
    await runtimes.add_runtime(ctx, ADMIN, NUMPY)
    again = await runtimes.add_runtime(ctx, ADMIN, NUMPY)
    assert again.outcome == "unchanged" and again.runtime.revision == 1
    moved = dataclasses.replace(NUMPY, digest=D2, frameworks={"numpy": "2.0.0"})
    with pytest.raises(Conflict) as caught:
        await runtimes.add_runtime(ctx, ADMIN, moved)
    assert f"digest: '{D1}' -> '{D2}'" in caught.value.message
    assert "'1.26.4'" in caught.value.message and "--replace" in caught.value.fix
    replaced = await runtimes.add_runtime(ctx, ADMIN, moved, replace=True)
    assert replaced.outcome == "replaced" and replaced.runtime.revision == 2
    assert (await runtimes.find_runtime(ctx, "np")).digest == D2


async def test_a_registered_runtime_is_pinned_only_to_its_digest(ctx: Context) -> None:
    await runtimes.add_runtime(ctx, ADMIN, NUMPY)
    preview = await submissions.create_preview(ctx, ALICE, an_intent(runtime="np"))
    assert preview.spec.runtime.digest == D1
    assert preview.spec.runtime.frameworks == {"numpy": "1.26.4"}
    moved = dataclasses.replace(NUMPY, name="np-moved", digest=D2)  # the engine's IMAGE is D1
    await runtimes.add_runtime(ctx, ADMIN, moved)
    with pytest.raises(InvalidInput) as caught:
        await submissions.create_preview(ctx, ALICE, an_intent(runtime="np-moved"))
    assert f"pins {D2}, but image {IMAGE} is {D1}" in caught.value.message
    assert f"--digest {D1} --replace" in caught.value.fix
    assert caught.value.field == "intent.runtime"


async def test_a_recipe_s_framework_must_be_provided_at_an_accepted_version(
    ctx: Context,
) -> None:
    old = dataclasses.replace(NUMPY, name="numpy-old", frameworks={"numpy": "1.20.0"})
    await runtimes.add_runtime(ctx, ADMIN, old)
    intent = an_intent(method=MLP, params={}, runtime="numpy-old")
    with pytest.raises(InvalidInput) as caught:
        await submissions.create_preview(ctx, ALICE, intent)
    assert caught.value.message == (
        f"method {MLP} needs numpy>=1.24,<3; runtime numpy-old provides numpy 1.20.0"
    )
    with pytest.raises(InvalidInput, match="runtime busybox does not provide numpy"):
        await submissions.create_preview(ctx, ALICE, an_intent(method=MLP, params={},
                                                               runtime="busybox"))  # fmt: skip
    preview = await submissions.create_preview(ctx, ALICE, an_intent(method=MLP, params={}))
    assert preview.spec.runtime.name == "python-numpy"  # the recipe's default provides 1.24.2
    assert preview.spec.runtime.frameworks == {"numpy": "1.24.2"}


async def test_a_lock_stale_by_its_framework_version_is_refused(ctx: Context) -> None:
    (mlp,) = [m for m in load_recipes() if m.name == MLP]
    current = RecipeLock(mlp.name, mlp.version, method_digest(mlp), "numpy", "1.24.2")
    await submissions.create_preview(ctx, ALICE, an_intent(method=MLP, params={},
                                                           recipe_lock=current))  # fmt: skip
    await runtimes.add_runtime(ctx, ADMIN, NUMPY)  # numpy 1.26.4
    with pytest.raises(Conflict) as caught:
        intent = an_intent(method=MLP, params={}, recipe_lock=current, runtime="np")
        await submissions.create_preview(ctx, ALICE, intent)
    assert caught.value.message == (
        "recipe.lock.json is stale: it pins numpy 1.24.2; runtime np provides numpy 1.26.4"
    )
    assert "tp recipe upgrade" in caught.value.fix


async def test_a_committed_job_keeps_its_pin_when_the_runtime_is_replaced(ctx: Context) -> None:
    await runtimes.add_runtime(ctx, ADMIN, NUMPY)
    preview = await submissions.create_preview(ctx, ALICE, an_intent(runtime="np"))
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    moved = dataclasses.replace(NUMPY, image=PYTHON_NUMPY.image, digest=D2,
                                frameworks={"numpy": "1.24.2"})  # fmt: skip
    await runtimes.add_runtime(ctx, ADMIN, moved, replace=True)
    async with ctx.uow() as uow:
        job = await uow.jobs.get(receipt.job_id)
    assert job is not None and job.spec.runtime.digest == D1
    assert job.spec.runtime.frameworks == {"numpy": "1.26.4"}
    again = await submissions.create_preview(ctx, ALICE, an_intent(runtime="np"))
    assert again.spec.runtime.digest == D2  # new previews get the new pin
