"""Workspaces and experiment files: pure-ish functions over paths, no HTTP.

A workspace is a directory holding ``tuneplane.toml`` (found by walking up). An experiment is a
directory holding ``experiment.toml``::

    name = "my-exp"            # required, ^[a-z0-9][a-z0-9._-]{0,62}$
    method = "custom/custom"   # required
    runtime = "busybox"        # optional: the method's default runtime otherwise
    profile = "cpu:1"          # optional: the default for `tp submit --profile`
    [params]                   # typed values, checked against the method's declaration
    command = "sh train.sh"
    [env]                      # string values
    [plugins]                  # plugins it uses, pinned by `tp plugin install` (docs/plugins.md)
    "exact-match" = { version = "1.0.0", digest = "sha256:…" }
"""

from __future__ import annotations

import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from domain import input_limits, plugins
from domain.catalog import NAME_RE, ParamValue
from domain.documents import toml_loads
from domain.errors import InvalidInput
from domain.plugins import PluginPin
from domain.retry import RetryPolicy
from domain.submission import DIGEST_RE, ENV_NAME_RE

WORKSPACE_FILE = "tuneplane.toml"
EXPERIMENT_FILE = "experiment.toml"
DATA_DIR = ".tuneplane-data"
KEYS = ("name", "method", "runtime", "profile", "params", "env", "plugins", "retry")


@dataclass(frozen=True, slots=True)
class Experiment:
    path: Path  # the experiment directory
    name: str
    method: str
    runtime: str | None = None
    profile: str | None = None
    params: dict[str, ParamValue] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    plugins: tuple[PluginPin, ...] = ()
    retry: dict[str, Any] | None = None  # [retry], checked (docs/lifecycles.md#retries)

    @property
    def file(self) -> Path:
        return self.path / EXPERIMENT_FILE


def find_workspace(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / WORKSPACE_FILE).is_file():
            return d
    raise InvalidInput(
        f"{here} is not inside a TunePlane workspace (no {WORKSPACE_FILE} here or above)",
        fix="run `tp init DIR` to make one, or cd into your workspace",
    )


def submissions_dir(workspace: Path) -> Path:
    return workspace / DATA_DIR / "submissions"


def _in_git_repo(d: Path) -> bool:
    done = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=d, capture_output=True, check=False
    )
    return done.returncode == 0


WORKSPACE_TOML = """\
# Marks the root of a TunePlane workspace. Experiments live in sub-directories (`tp new NAME`).
[workspace]
version = 1
"""

README = """\
# TunePlane workspace

Each sub-directory with an `experiment.toml` is an experiment.

    tp new my-exp --method custom/custom    # create one
    tp validate my-exp                      # check it against the server's catalog
    tp submit my-exp --profile cpu:1 --preview
    tp submit --commit .tuneplane-data/submissions/<preview-id>.json

Source archives are packed from git's view of the experiment directory: files ignored by
git are not uploaded. `.tuneplane-data/` holds local submission records and is ignored.
"""


def init_workspace(directory: Path) -> list[str]:
    """Make ``directory`` a workspace; return what was done. Idempotent, never overwrites."""
    done: list[str] = []
    if directory.exists() and not directory.is_dir():
        raise InvalidInput(f"{directory} exists and is not a directory", fix="pick another DIR")
    if not directory.exists():
        try:
            directory.mkdir(parents=True)
        except OSError as exc:
            raise InvalidInput(
                f"cannot create the workspace {directory}: {exc.strerror or exc}",
                fix="pick a DIR under a directory you can write",
            ) from None
        done.append(f"created {directory}")
    if not _in_git_repo(directory):
        subprocess.run(["git", "init", "-q"], cwd=directory, check=True, capture_output=True)
        done.append("ran git init")
    gitignore = directory / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.exists() else []
    if not any(line.strip().strip("/") == DATA_DIR for line in lines):
        text = gitignore.read_text() if gitignore.exists() else ""
        sep = "" if not text or text.endswith("\n") else "\n"
        gitignore.write_text(f"{text}{sep}{DATA_DIR}/\n")
        done.append(f"added {DATA_DIR}/ to .gitignore")
    for name, content in ((WORKSPACE_FILE, WORKSPACE_TOML), ("README.md", README)):
        if not (directory / name).exists():
            (directory / name).write_text(content)
            done.append(f"wrote {name}")
    return done


def _problem(file: Path, key: str, message: str, fix: str) -> InvalidInput:
    return InvalidInput(f"{file}: {message}", fix=fix, field=key)


def parse_experiment(path: Path, data: dict[str, Any]) -> Experiment:
    """Check the shape of a parsed experiment.toml; errors name the file, the key and the fix."""
    file = path / EXPERIMENT_FILE
    try:  # the limits the server puts on every request (a NUL in a command or an env value)
        input_limits.check_value(data, root="", what="the file")
    except InvalidInput as exc:
        raise _problem(file, exc.field or "", exc.message, exc.fix) from None
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise _problem(
            file, unknown[0], f"unknown key {unknown[0]!r}",
            "the keys are: " + ", ".join(KEYS) + " (method parameters go under [params])",
        )  # fmt: skip
    for key in ("name", "method"):
        if key not in data:
            raise _problem(file, key, f"missing required key {key!r}", f'add `{key} = "..."`')
    for key in ("name", "method", "runtime", "profile"):
        if key in data and not isinstance(data[key], str):
            raise _problem(
                file, key, f"{key!r} must be a string, got {type(data[key]).__name__}",
                f'write it in quotes: {key} = "..."',
            )  # fmt: skip
    if not NAME_RE.match(data["name"]):
        raise _problem(
            file, "name", f"name {data['name']!r} is not a valid experiment name",
            "use 1-63 characters: lower-case letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
        )  # fmt: skip
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise _problem(file, "params", "'params' must be a table", "write it as a [params] table")
    for k, v in params.items():
        if isinstance(v, bool | int | float | str):
            continue
        raise _problem(
            file, f"params.{k}", f"parameter {k!r} is a {type(v).__name__}",
            "parameters are strings, integers, floats or booleans",
        )  # fmt: skip
    env = data.get("env", {})
    if not isinstance(env, dict):
        raise _problem(file, "env", "'env' must be a table", "write it as an [env] table")
    for k, v in env.items():
        if not ENV_NAME_RE.match(k) or k.upper().startswith("TUNEPLANE_"):
            raise _problem(
                file, f"env.{k}", f"environment variable name {k!r} is not allowed",
                "use letters, digits and '_', not starting with a digit or TUNEPLANE_",
            )  # fmt: skip
        if not isinstance(v, str):
            raise _problem(
                file, f"env.{k}", f"environment variable {k!r} must be a string",
                f'write it in quotes: {k} = "{v}"',
            )  # fmt: skip
    return Experiment(
        path=path,
        name=data["name"],
        method=data["method"],
        runtime=data.get("runtime") or None,
        profile=data.get("profile") or None,
        params=dict(params),
        env=dict(env),
        plugins=_plugins(file, data.get("plugins", {})),
        retry=_retry(file, data["retry"]) if "retry" in data else None,
    )


def _retry(file: Path, table: Any) -> dict[str, Any]:
    """experiment.toml ``[retry]``, checked here as the server checks it."""
    if not isinstance(table, dict):
        raise _problem(file, "retry", "'retry' must be a table", "write it as [retry]")
    try:
        RetryPolicy.parse(table)
    except InvalidInput as exc:
        raise _problem(file, exc.field or "retry", exc.message, exc.fix or "") from None
    return dict(table)


_PIN_FIX = (
    'write each as "NAME" = { version = "1.0.0", digest = "sha256:…" } (or "NAME" = "1.0.0"), '
    "the name in quotes; `tp plugin install NAME@VERSION` writes it"
)


def _plugins(file: Path, table: Any) -> tuple[PluginPin, ...]:
    """experiment.toml ``[plugins]``: NAME = VERSION, or NAME = {version, digest}."""
    if not isinstance(table, dict):
        raise _problem(file, "plugins", "'plugins' must be a table", "write it as [plugins]")
    pins: list[PluginPin] = []
    for name, value in table.items():
        key = f"plugins.{name}"
        spec = {"version": value} if isinstance(value, str) else value
        if not isinstance(spec, dict) or set(spec) - {"version", "digest"} or "version" not in spec:
            raise _problem(file, key, f"plugin {name!r} is not NAME = VERSION or a table with "
                           "version and digest", _PIN_FIX)  # fmt: skip
        try:
            pin = PluginPin(plugins.check_name(name, key), spec["version"], spec.get("digest"))
            plugins.check_version(str(pin.version), key)
        except InvalidInput as exc:
            raise _problem(file, key, exc.message, exc.fix) from None
        if pin.digest is not None and not DIGEST_RE.match(str(pin.digest)):
            raise _problem(file, key, f"plugin {name!r} has digest {pin.digest!r}, not a "
                           "sha256 digest", _PIN_FIX)  # fmt: skip
        pins.append(pin)
    return tuple(pins)


def experiment_dir(name: str, cwd: Path | None = None) -> Path:
    """NAME as a directory: a path from here if it holds experiment.toml, else under the
    workspace root."""
    here = cwd or Path.cwd()
    direct = (here / name).resolve()
    if (direct / EXPERIMENT_FILE).is_file():
        return direct
    try:
        under = find_workspace(here) / name
    except InvalidInput:
        under = direct
    return under.resolve()


def load_experiment(name: str, cwd: Path | None = None) -> Experiment:
    path = experiment_dir(name, cwd)
    file = path / EXPERIMENT_FILE
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(
            f"no experiment {name!r}: {file} does not exist",
            fix=f"create it with `tp new {name} --method custom/custom`",
            field="NAME",
        ) from None
    try:
        data = toml_loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"{file}: not valid TOML: {exc}", fix="fix the syntax at the place named", field=None
        ) from None
    return parse_experiment(path, data)
