"""Built-in recipes: declared in adapters/recipes, loaded with their integration artifact;
their parameters land at their config paths; every declared violation names the parameter and
the fix; a recipe that needs the Job Capsule is refused on a backend without it, and gets its
artifact and config.json in the capsule where there is one."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from pathlib import Path

import pytest

from adapters.memory.backend import MemoryBackend
from adapters.recipes import load_recipe, load_recipes
from application import submissions
from domain.capsule import StorageCapabilities
from domain.catalog import Method, ParamValue, resolve_params
from domain.errors import InvalidInput
from tests.support.archives import member_bytes
from tests.support.context import ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit
MLP = "numpy/mlp-classification"


def mlp() -> Method:
    (method,) = [m for m in load_recipes() if m.name == MLP]
    return method


def test_the_mlp_recipe_is_declared_with_its_artifact() -> None:
    m = mlp()
    assert m.default_runtime == "python-numpy" and m.primary_metrics == (
        "train/loss",
        "train/accuracy",
    )
    assert m.entry == ("python3", "/tuneplane/capsule/artifact/train.py")
    # its own files, the shared TensorBoard writer and the SDK
    assert [name for name, _ in m.artifact] == ["report.py", "tb_events.py", "train.py"]
    assert m.needs == ("capsule",)
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
    given: dict[str, ParamValue], message: str, fix: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_params(mlp(), given)
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
    assert ctx.blobs is not None
    intent = an_intent(method=MLP, params={"steps": 12}, runtime="python-numpy")
    preview = await submissions.create_preview(ctx, ALICE, intent)
    assert preview.spec.command == mlp().entry and preview.spec.capsule is not None
    tar = await ctx.blobs.read(preview.spec.capsule.blob)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        names = {m.name for m in t}
        config = json.loads(member_bytes(t, "tuneplane/capsule/config.json"))
        sums = member_bytes(t, "tuneplane/capsule/SHA256SUMS").decode()
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


# -- the post-training recipes (trl/*, verl/*) -------------------------------------------------

POST_TRAINING = ("trl/dpo", "trl/grpo", "trl/sft", "verl/grpo")


def recipe(name: str) -> Method:
    (method,) = [m for m in load_recipes() if m.name == name]
    return method


def test_every_recipe_loads_with_its_framework_and_shared_files() -> None:
    by_name = {m.name: m for m in load_recipes()}
    assert set(by_name) == {MLP, "pytorch/image-classification", *POST_TRAINING}
    assert (by_name[MLP].framework, by_name[MLP].framework_requires) == ("numpy", ">=1.24,<3")
    cnn = by_name["pytorch/image-classification"]
    assert (cnn.framework, cnn.framework_requires, cnn.default_runtime) == (
        "torch",
        ">=1.13.0a0",
        "python-torch",
    )
    assert [name for name, _ in cnn.artifact] == ["cnn.py", "report.py", "tb_events.py"]
    for name in POST_TRAINING:
        m = by_name[name]
        files = [file for file, _ in m.artifact]
        assert m.framework == name.split("/")[0] and m.framework_requires.startswith(">=")
        assert {"tuneplane_recipe.py", "tiny_lm.py"} <= set(files), files
        if m.framework == "trl":  # they mark their checkpoints with the SDK (docs/checkpoints.md)
            assert "report.py" in files
        assert m.entry[1] == f"/tuneplane/capsule/artifact/{m.entry[1].rsplit('/', 1)[1]}"
        assert m.entry[1].rsplit("/", 1)[1] in files and m.primary_metrics and m.params
        assert "capsule" in m.needs and m.default_runtime in ("pytorch-trl", "verl")
    assert by_name["verl/grpo"].needs == ("capsule", "shared_outputs")
    assert "train/reward" in by_name["trl/grpo"].primary_metrics
    assert "critic/score/mean" in by_name["verl/grpo"].primary_metrics


def _write_recipe(root: Path, body: str, files: dict[str, str] | None = None) -> Path:
    directory = root / "fw" / "m"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "recipe.toml").write_text(
        'name = "fw/m"\ndescription = "d"\ndefault_runtime = "r"\n' + body
    )
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return directory


@pytest.mark.parametrize(
    ("body", "files", "message"),
    [
        ('colour = "red"\n', {}, "unknown keys ['colour']"),
        ('include = ["../outside.py"]\n', {}, "include '../outside.py' is not a file below"),
        ('include = ["sdk/../../x.py"]\n', {}, "include 'sdk/../../x.py' is not a file below"),
        ('include = ["sdk/report.py"]\n', {}, "include 'sdk/report.py' is not a file below"),
        ('include = ["_lib/x.py"]\n', {"_lib/x.py": "", "fw/m/x.py": ""}, "clashes with"),
        ('[framework]\nrequires = ">=1"\n', {}, "KeyError('name')"),
        ('[framework]\nname = "f"\nversion = "1"\n', {}, "[framework] has unknown keys"),
        ('[framework]\nname = "f"\nrequires = "1.x"\n', {}, "is not a PEP 440 specifier"),
        ('[[params]]\nname = "n"\ntype = "int"\ndefault = 0\nminimum = 1\n', {},
         "'n' is 0, below its minimum 1"),
        ('[[params]]\nname = "c"\ntype = "str"\ndefault = "z"\nchoices = ["a"]\n', {},
         "'c' is 'z', not one of its choices"),
        ('[[params]]\nname = "t"\ntype = "list"\n', {}, "has type 'list'"),
        # a NaN bound passes every value (issue 19, defect 1)
        ('[[params]]\nname = "f"\ntype = "float"\nmaximum = nan\n', {}, "not a finite number"),
        ('[[params]]\nname = "f"\ntype = "float"\nminimum = "0"\n', {}, "not a finite number"),
        ('[[params]]\nname = "f"\ntype = "float"\ndefault = nan\n', {}, "not a finite number"),
    ],
)  # fmt: skip
def test_a_recipe_declaration_is_checked_at_load(
    tmp_path: Path, body: str, files: dict[str, str], message: str
) -> None:
    directory = _write_recipe(tmp_path, body, files)
    with pytest.raises(InvalidInput) as caught:
        load_recipe(directory)
    assert message in caught.value.message
    assert "fw/m/recipe.toml" in caught.value.message or "method fw/m" in caught.value.message


def test_overlapping_config_paths_are_refused(tmp_path: Path) -> None:
    body = ('[[params]]\nname = "a"\ntype = "int"\nconfig = "x.y"\n'
            '[[params]]\nname = "b"\ntype = "int"\nconfig = "x.y.z"\n')  # fmt: skip
    with pytest.raises(InvalidInput, match=r"config paths 'x\.y' and 'x\.y\.z' overlap"):
        load_recipe(_write_recipe(tmp_path, body))


def test_an_included_file_is_part_of_the_artifact_and_of_the_digest(tmp_path: Path) -> None:
    from domain.catalog import method_digest

    directory = _write_recipe(
        tmp_path, 'include = ["_lib/shared.py"]\n', {"_lib/shared.py": "A = 1\n", "fw/m/run.py": ""}
    )
    first = load_recipe(directory)
    assert [name for name, _ in first.artifact] == ["run.py", "shared.py"]
    (tmp_path / "_lib" / "shared.py").write_text("A = 2\n")
    assert method_digest(load_recipe(directory)) != method_digest(first)


def test_the_framework_is_in_the_digest_only_where_declared() -> None:
    import dataclasses

    from domain.catalog import method_digest

    m = mlp()
    newer = dataclasses.replace(m, framework_requires=">=2")
    assert method_digest(newer) != method_digest(m)
    bare = dataclasses.replace(m, framework=None, framework_requires="")
    assert method_digest(bare) != method_digest(m)


async def test_a_post_training_capsule_carries_the_artifact_and_its_config(tmp_path: Path) -> None:
    from adapters.docker.runtimes import PYTORCH_TRL

    digest = "sha256:" + "7" * 64  # the recipe's default runtime, built in: pinned at preview
    backend = MemoryBackend(
        images={PYTORCH_TRL.image: digest}, storage=StorageCapabilities(capsule=True)
    )
    ctx = memory_context(tmp_path, backend)
    assert ctx.blobs is not None
    params = {"num_generations": "4", "reward_funcs": "length"}
    intent = an_intent(method="trl/grpo", params=params)
    preview = await submissions.create_preview(ctx, ALICE, intent)
    assert preview.spec.command == ("python3", "/tuneplane/capsule/artifact/grpo.py")
    assert preview.spec.capsule is not None and preview.spec.runtime.digest == digest
    assert preview.spec.runtime.frameworks["trl"] == PYTORCH_TRL.frameworks["trl"] == "1.16.0"
    with tarfile.open(fileobj=io.BytesIO(await ctx.blobs.read(preview.spec.capsule.blob))) as t:
        names = {m.name for m in t}
        config = json.loads(member_bytes(t, "tuneplane/capsule/config.json"))
        shipped = member_bytes(t, "tuneplane/capsule/artifact/tiny_lm.py")
    for file in ("grpo.py", "rewards.py", "tiny_lm.py", "trl_common.py", "tuneplane_recipe.py"):
        assert f"tuneplane/capsule/artifact/{file}" in names
    assert shipped == dict(recipe("trl/grpo").artifact)["tiny_lm.py"]
    assert config["args"]["num_generations"] == 4 and config["reward"] == {"funcs": "length"}
    assert config["model"] == {"name": "tiny-llama", "dtype": "auto"}


async def test_a_default_runtime_the_server_lacks_is_named_with_the_fix(tmp_path: Path) -> None:
    from adapters.catalog import default_catalog
    from adapters.docker.runtimes import LOCAL_RUNTIMES

    backend = MemoryBackend(storage=StorageCapabilities(capsule=True, shared_outputs=True))
    ctx = memory_context(tmp_path, backend)
    without = tuple(r for r in LOCAL_RUNTIMES if r.name != "verl")  # a server built without it
    ctx = dataclasses.replace(ctx, catalog=default_catalog(without))
    with pytest.raises(InvalidInput) as caught:
        await submissions.create_preview(ctx, ALICE, an_intent(method="verl/grpo", params={}))
    assert caught.value.message == (
        "method verl/grpo runs on runtime 'verl' by default, and this server has no runtime of"
        " that name"
    )
    assert caught.value.field == "intent.runtime"
    assert "with verl >=0.9.1,<0.10" in caught.value.fix
    assert (
        "busybox, python, python-numpy" in caught.value.fix and "tp runtime add" in caught.value.fix
    )
    # a wrong parameter is still named first: a typo never waits for the runtime
    typo = an_intent(method="verl/grpo", params={"rollout_m": "4"})
    with pytest.raises(InvalidInput, match="method verl/grpo has no parameter 'rollout_m'"):
        await submissions.create_preview(ctx, ALICE, typo)


def _violations() -> list[tuple[str, str, str, str]]:
    """(recipe, parameter, --set value, what the refusal says) for every declared type, range
    and choice of the post-training recipes."""
    cases = []
    for m in load_recipes():
        if m.name not in POST_TRAINING:
            continue
        for p in m.params:
            if p.type in ("int", "float", "bool"):
                cases.append((m.name, p.name, "x1", f"parameter {p.name!r} must be a {p.type}"))
            if p.type == "int":
                cases.append((m.name, p.name, "1.5", f"parameter {p.name!r} must be a int"))
            if p.minimum is not None:
                low = str(p.minimum - (1 if p.type == "int" else 1e-3 * max(1, abs(p.minimum))))
                cases.append((m.name, p.name, low, "below its minimum"))
            if p.maximum is not None:
                cases.append((m.name, p.name, str(p.maximum * 2 + 1), "above its maximum"))
            if p.choices:
                cases.append((m.name, p.name, "no-such-choice", "not one of its choices"))
    return cases


@pytest.mark.parametrize(("name", "param", "value", "message"), _violations())
async def test_every_declared_limit_of_the_post_training_recipes_is_enforced_at_preview(
    tmp_path: Path, name: str, param: str, value: str, message: str
) -> None:
    ctx = memory_context(tmp_path, MemoryBackend(storage=StorageCapabilities(capsule=True)))
    intent = an_intent(method=name, params={param: value}, runtime="python")
    with pytest.raises(InvalidInput) as caught:
        await submissions.create_preview(ctx, ALICE, intent)
    assert message in caught.value.message and repr(param) in caught.value.message
    assert caught.value.field == f"intent.params.{param}"
    assert param in caught.value.fix or caught.value.fix.startswith("choose one of: ")


def test_docs_list_every_post_training_parameter_at_its_config_path() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "recipes.md").read_text()
    for name in POST_TRAINING:
        for p in recipe(name).params:
            assert f"| `{p.name}` | {p.type} |" in doc and f"| `{p.config}` |" in doc, p.name
        for metric in recipe(name).primary_metrics:
            assert f"`{metric}`" in doc, metric
