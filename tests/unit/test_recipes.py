"""Built-in recipes: declared in adapters/recipes, loaded with their integration artifact;
their parameters land at their config paths; every declared violation names the parameter and
the fix; a recipe that needs the Job Capsule is refused on a backend without it, and gets its
artifact and config.json in the capsule where there is one."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from adapters.memory.backend import MemoryBackend
from adapters.recipes import load_recipe, load_recipes
from application import submissions
from domain.capsule import StorageCapabilities
from domain.catalog import resolve_params
from domain.errors import InvalidInput
from tests.support.context import ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit
MLP = "numpy/mlp-classification"


def mlp():  # type: ignore[no-untyped-def]
    (method,) = [m for m in load_recipes() if m.name == MLP]
    return method


def test_the_mlp_recipe_is_declared_with_its_artifact() -> None:
    m = mlp()
    assert m.default_runtime == "python-numpy" and m.primary_metrics == (
        "train/loss",
        "train/accuracy",
    )
    assert m.entry == ("python3", "/tuneplane/capsule/artifact/train.py")
    assert [name for name, _ in m.artifact] == ["train.py"] and m.needs == ("capsule",)
    params = resolve_params(m, {"steps": "50", "activation": "tanh"})
    assert m.config(params) == {
        "train": {"steps": 50, "batch_size": 256, "seed": 7},
        "optimizer": {"lr": 0.01},
        "model": {"hidden": 64, "activation": "tanh"},
        "data": {"samples": 2048},
    }


@pytest.mark.parametrize(
    ("given", "message", "fix"),
    [
        ({"steps": "many"}, "parameter 'steps' must be a int", "--set steps=<int>"),
        ({"steps": 0}, "'steps' is 0, below its minimum 1", "at least 1"),
        ({"learning_rate": 2.0}, "'learning_rate' is 2.0, above its maximum 1.0", "at most 1.0"),
        ({"activation": "gelu"}, "'activation' is 'gelu', not one of its choices", "relu, tanh"),
        ({"hiden": 3}, "has no parameter 'hiden'", "hidden"),
        ({"steps": 1.5}, "must be a int", "steps"),
    ],
)
def test_every_violation_names_the_parameter_and_the_fix(
    given: dict[str, object], message: str, fix: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_params(mlp(), given)  # type: ignore[arg-type]
    assert message in caught.value.message and fix in caught.value.fix


def test_a_broken_recipe_is_refused_with_its_file(tmp_path: Path) -> None:
    bad = tmp_path / "numpy" / "broken"
    bad.mkdir(parents=True)
    (bad / "recipe.toml").write_text('name = "numpy/broken"\n[[params]]\nname = "x"\nkind = 1\n')
    with pytest.raises(InvalidInput, match=r"recipe .*broken/recipe\.toml is not valid"):
        load_recipe(bad)
    (bad / "recipe.toml").write_text(
        'name = "other/name"\ndescription = "d"\ndefault_runtime = "r"\n'
    )
    with pytest.raises(InvalidInput, match="is named 'other/name', not 'numpy/broken'"):
        load_recipe(bad)


async def test_a_backend_without_the_capsule_is_refused_for_the_recipe(tmp_path: Path) -> None:
    ctx = memory_context(tmp_path, MemoryBackend())  # offers no capsule
    intent = an_intent(method=MLP, params={}, runtime="python-numpy")
    with pytest.raises(InvalidInput, match=f"method {MLP} needs capsule; backend local"):
        await submissions.create_preview(ctx, ALICE, intent)


async def test_the_capsule_carries_the_artifact_and_its_config(tmp_path: Path) -> None:
    backend = MemoryBackend(storage=StorageCapabilities(capsule=True))
    ctx = memory_context(tmp_path, backend)
    intent = an_intent(method=MLP, params={"steps": 12}, runtime="python-numpy")
    preview = await submissions.create_preview(ctx, ALICE, intent)
    assert preview.spec.command == mlp().entry and preview.spec.capsule is not None
    tar = await ctx.blobs.read(preview.spec.capsule.blob)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        names = {m.name for m in t}
        config = json.loads(t.extractfile("tuneplane/capsule/config.json").read())  # type: ignore[union-attr]
        sums = t.extractfile("tuneplane/capsule/SHA256SUMS").read().decode()  # type: ignore[union-attr]
    assert "tuneplane/capsule/artifact/train.py" in names and config["train"]["steps"] == 12
    assert "  artifact/train.py\n" in sums and "  config.json\n" in sums


def test_the_recipe_digest_covers_its_declaration_and_its_artifact() -> None:
    import dataclasses

    from domain.catalog import method_digest

    m = mlp()
    assert method_digest(m) == method_digest(mlp())
    touched = dataclasses.replace(m, artifact=(("train.py", m.artifact[0][1] + b"\n"),))
    wider = dataclasses.replace(m, params=(dataclasses.replace(m.params[0], maximum=10**6),
                                           *m.params[1:]))  # fmt: skip
    assert len({method_digest(x) for x in (m, touched, wider)}) == 3


def test_a_stale_lock_is_refused_with_the_fix() -> None:
    from domain.catalog import Catalog, RecipeLock, method_digest
    from domain.errors import Conflict
    from domain.submission import resolve

    m = mlp()
    RecipeLock(m.name, m.version, method_digest(m)).check(m)  # current: fine
    old = RecipeLock(m.name, m.version, "sha256:" + "0" * 64)
    with pytest.raises(Conflict) as caught:
        old.check(m)
    assert "recipe.lock.json is stale" in caught.value.message
    assert "tp recipe upgrade" in caught.value.fix
    intent = an_intent(method=MLP, params={}, recipe_lock=old)
    with pytest.raises(Conflict):
        resolve(intent, Catalog((m,)), None, (), "local", "default")  # type: ignore[arg-type]
