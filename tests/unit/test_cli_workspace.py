"""Offline parts of `tp init`, `tp new` and `tp validate`: workspace files, experiment.toml
parsing (errors name the file, the key and the fix), and params checked against a method
declaration given as data (the JSON shape of GET /v1/methods/{name})."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from domain.errors import InvalidInput
from entrypoints.cli import errors
from entrypoints.cli.main import run
from entrypoints.cli.submissions import parse_sets
from entrypoints.cli.validation import check_params, method_from_json, params_template
from entrypoints.cli.workspace import find_workspace, load_experiment, parse_experiment

pytestmark = pytest.mark.unit

DECL: dict[str, Any] = {
    "name": "trl/sft",
    "description": "supervised fine-tuning",
    "default_runtime": "trl",
    "params": [
        {"name": "model", "type": "str", "help": "base model", "required": True, "default": None,
         "choices": [], "minimum": None, "maximum": None},
        {"name": "lr", "type": "float", "help": "learning rate", "required": False,
         "default": 0.0001, "choices": [], "minimum": 0.0, "maximum": 1.0},
        {"name": "epochs", "type": "int", "help": "epochs", "required": False, "default": 1,
         "choices": [], "minimum": 1, "maximum": 100},
        {"name": "precision", "type": "str", "help": "dtype", "required": False,
         "default": "bf16", "choices": ["bf16", "fp32"], "minimum": None, "maximum": None},
        {"name": "packing", "type": "bool", "help": "pack sequences", "required": False,
         "default": False, "choices": [], "minimum": None, "maximum": None},
    ],
}  # fmt: skip


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TUNEPLANE_CONFIG_DIR", str(tmp_path / "cfg"))  # not logged in
    monkeypatch.delenv("TUNEPLANE_SERVER", raising=False)
    monkeypatch.delenv("TUNEPLANE_TOKEN", raising=False)
    w = tmp_path / "ws"
    assert run(["init", str(w)]) == 0
    monkeypatch.chdir(w)
    return w


def write(ws: Path, text: str, name: str = "e") -> Path:
    (ws / name).mkdir(exist_ok=True)
    (ws / name / "experiment.toml").write_text(text)
    return ws / name


def test_init_makes_a_workspace_and_is_idempotent(ws: Path) -> None:
    assert (ws / ".git").is_dir()
    assert (ws / ".gitignore").read_text() == ".tuneplane-data/\n"
    assert (ws / "tuneplane.toml").is_file() and (ws / "README.md").is_file()
    (ws / "README.md").write_text("mine\n")
    (ws / ".gitignore").write_text("*.pyc")
    assert run(["init", str(ws)]) == 0
    assert (ws / "README.md").read_text() == "mine\n"
    assert (ws / ".gitignore").read_text() == "*.pyc\n.tuneplane-data/\n"
    assert run(["init", str(ws)]) == 0
    assert (ws / ".gitignore").read_text() == "*.pyc\n.tuneplane-data/\n"
    (ws / "sub" / "deep").mkdir(parents=True)
    assert find_workspace(ws / "sub" / "deep") == ws.resolve()


def test_new_creates_a_runnable_custom_experiment_offline(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["new", "hello", "--method", "custom/custom", "--runtime", "busybox"]) == 0
    assert "not logged in" in capsys.readouterr().err
    exp = load_experiment("hello")
    assert (exp.name, exp.method, exp.runtime, exp.profile) == (
        "hello", "custom/custom", "busybox", None,
    )  # fmt: skip
    assert exp.params == {"command": "sh train.sh"} and exp.env == {}
    done = subprocess.run(["sh", "train.sh"], cwd=ws / "hello", capture_output=True, text=True)
    assert done.returncode == 0 and "step 3/3" in done.stdout
    assert run(["new", "hello", "--method", "custom/custom"]) == errors.USAGE  # exists
    assert "already exists" in capsys.readouterr().err
    assert run(["new", "Hello", "--method", "custom/custom"]) == errors.USAGE
    assert run(["validate", "hello", "--offline"]) == 0


def test_new_outside_a_workspace_says_tp_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(["new", "x", "--method", "custom/custom"]) == errors.USAGE
    assert "tp init" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ('method = "m"', "name", "missing required key 'name'"),
        ('name = "x"', "method", "missing required key 'method'"),
        ('name = 3\nmethod = "m"', "name", "must be a string"),
        ('name = "Bad_Name"\nmethod = "m"', "name", "not a valid experiment name"),
        ('name = "x"\nmethod = "m"\nlr = 1', "lr", "unknown key 'lr'"),
        ('name = "x"\nmethod = "m"\nparams = 3', "params", "must be a table"),
        ('name = "x"\nmethod = "m"\n[params]\nxs = [1, 2]', "params.xs", "is a list"),
        ('name = "x"\nmethod = "m"\n[env]\nA = 1', "env.A", "must be a string"),
        ('name = "x"\nmethod = "m"\n[env]\nTUNEPLANE_X = "1"', "env.TUNEPLANE_X", "not allowed"),
        # the server's input limits (domain/input_limits.py), which the preview refused with 400
        (
            'name = "x"\nmethod = "m"\n[params]\ncommand = "echo a\\u0000b"',
            "params.command",
            "holds a NUL character",
        ),
        ('name = "x"\nmethod = "m"\n[env]\nA = "x\\u0000"', "env.A", "holds a NUL character"),
        (
            'name = "x"\nmethod = "m"\n[params]\nx = 100000000000000000000',
            "params.x",
            "outside the signed 64-bit range",
        ),
    ],
)
def test_experiment_errors_name_the_file_and_the_key(
    ws: Path, capsys: pytest.CaptureFixture[str], text: str, key: str, words: str
) -> None:
    write(ws, text)
    with pytest.raises(InvalidInput) as info:
        load_experiment("e")
    assert info.value.field == key and words in info.value.message
    assert str(ws / "e" / "experiment.toml") in info.value.message and info.value.fix
    assert run(["validate", "e", "--offline"]) == errors.USAGE
    err = capsys.readouterr().err
    assert f"field: {key}" in err and "fix: " in err


def test_toml_syntax_errors_and_missing_files(ws: Path) -> None:
    write(ws, 'name = "x"\nmethod = \n')
    with pytest.raises(InvalidInput, match=r"not valid TOML.*line 2"):
        load_experiment("e")
    write(ws, 'name = "x"\nmethod = "m"\n[params]\nx = ' + "[" * 5000 + "]" * 5000)
    with pytest.raises(InvalidInput, match="nested too deep"):  # not a RecursionError
        load_experiment("e")
    with pytest.raises(InvalidInput, match="does not exist") as info:
        load_experiment("nope")
    assert "tp new nope" in info.value.fix


def test_validate_params_against_a_declaration(ws: Path) -> None:
    method = method_from_json(DECL)
    good = parse_experiment(ws, {"name": "x", "method": "trl/sft", "params": {"model": "m"}})
    assert check_params(good, method) == []
    bad = parse_experiment(
        ws,
        {"name": "x", "method": "trl/sft",
         "params": {"lr": 2.0, "epochs": "many", "precision": "fp8", "colour": "red"}},
    )  # fmt: skip
    found = {p.field: p for p in check_params(bad, method)}
    assert set(found) == {
        "params.lr", "params.epochs", "params.precision", "params.colour", "params.model",
    }  # fmt: skip
    assert "above its maximum" in found["params.lr"].message
    assert "at most 1.0" in found["params.lr"].fix
    assert "must be a int" in found["params.epochs"].message
    assert "bf16, fp32" in found["params.precision"].fix
    assert "no parameter 'colour'" in found["params.colour"].message
    assert "lr, epochs" in found["params.colour"].fix
    assert "needs parameter 'model'" in found["params.model"].message
    for p in found.values():
        assert str(ws / "experiment.toml") in p.message


def test_set_overrides_are_checked_as_strings(ws: Path) -> None:
    method = method_from_json([DECL])  # a one-element list is accepted too
    exp = parse_experiment(ws, {"name": "x", "method": "trl/sft", "params": {"model": "m"}})
    assert check_params(exp, method, {"epochs": "3", "packing": "yes"}) == []
    [problem] = check_params(exp, method, {"epochs": "0"})
    assert problem.message.startswith("--set: ") and "below its minimum" in problem.message
    [nan] = check_params(exp, method, {"lr": "nan"})  # the preview's 422 (issue 19, defect 1)
    assert nan.field == "params.lr" and "not a finite number" in nan.message
    assert parse_sets(("a=1", "b=x=y", "c=")) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(InvalidInput, match="KEY=VALUE"):
        parse_sets(("novalue",))


def test_params_template_is_valid_toml_with_defaults(ws: Path) -> None:
    lines = params_template(method_from_json(DECL))
    data = tomllib.loads("\n".join(lines))
    assert data == {"lr": 0.0001, "epochs": 1, "precision": "bf16", "packing": False}
    assert any(line.startswith("# model = <str>  # required") for line in lines)
