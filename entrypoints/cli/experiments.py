"""`tp init DIR`, `tp new NAME`, `tp validate NAME`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from cyclopts import Parameter

from domain.catalog import NAME_RE, Method
from domain.errors import InvalidInput, Unavailable
from domain.runtimes import require_framework
from entrypoints.cli import errors, output
from entrypoints.cli.catalog import check_named, fetch_method_json
from entrypoints.cli.client import Api, connect
from entrypoints.cli.config import is_logged_in
from entrypoints.cli.plugins import check_pins
from entrypoints.cli.recipe_lock import (
    LOCK_FILE,
    default_runtime_missing,
    locked_runtime,
    runtime_of,
    stale,
    write_lock,
)
from entrypoints.cli.runtimes import runtime_from_json
from entrypoints.cli.validation import check_params, method_from_json, params_template
from entrypoints.cli.workspace import (
    EXPERIMENT_FILE,
    Experiment,
    find_workspace,
    init_workspace,
    load_experiment,
)

TRAIN_SH = """\
#!/bin/sh
# Starter training script: POSIX sh only, so it runs in any image with /bin/sh (busybox too).
set -eu
echo "experiment {name}: starting on $(hostname)"
step=1
while [ "$step" -le 3 ]; do
    echo "step $step/3"
    step=$((step + 1))
done
echo "experiment {name}: done"
"""


def init(directory: Path = Path("."), /) -> int:
    """Make DIR a TunePlane workspace (git repo, .gitignore, tuneplane.toml, README). Idempotent.

    Parameters
    ----------
    directory
        The workspace directory (created if missing).
    """
    done = init_workspace(directory)
    for line in done:
        output.info(line)
    state = "initialised" if done else "already a workspace:"
    output.out.print(f"{state} {directory.resolve()}", markup=False)
    return 0


def _experiment_toml(name: str, method: str, runtime: str | None, params: list[str]) -> str:
    runtime_line = (
        f'runtime = "{runtime}"'
        if runtime
        else '# runtime = "..."    # default: the method\'s default runtime (`tp runtime ls`)'
    )
    lines = [
        f"# TunePlane experiment. Check it with `tp validate {name}`, then",
        f"# `tp submit {name} --profile P --preview` (see `tp profiles`).",
        f'name = "{name}"',
        f'method = "{method}"',
        runtime_line,
        '# profile = "..."    # default for `tp submit --profile`',
        "",
        "[params]",
        *params,
        "",
        "[env]",
        '# EXAMPLE = "value"',
        "",
    ]
    return "\n".join(lines)


def new(
    name: str,
    /,
    *,
    method: Annotated[str, Parameter(name="--method")],
    runtime: Annotated[str | None, Parameter(name="--runtime")] = None,
) -> int:
    """Create an experiment directory NAME with experiment.toml and a starter train.sh.

    Parameters
    ----------
    name
        Experiment name: lower-case letters, digits, '.', '_', '-'.
    method
        The method (recipe), e.g. custom/custom (see `tp methods`).
    runtime
        A runtime name (see `tp runtime ls`); default: the method's default runtime.
    """
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"experiment name {name!r} is not valid",
            fix="use 1-63 characters: lower-case letters, digits, '.', '_' or '-', starting "
            "with a letter or digit",
            field="NAME",
        )
    target = find_workspace() / name
    if target.exists():
        raise InvalidInput(
            f"{target} already exists", fix="pick another NAME or remove it", field="NAME"
        )
    decl: Method | None = None
    decl_json: dict[str, Any] | None = None
    runtime_json: dict[str, Any] = {}
    if is_logged_in():
        try:
            with connect() as api:
                decl_json = fetch_method_json(api, method)
                decl = method_from_json(decl_json)
                if runtime:
                    check_named(api, "/v1/runtimes", runtime, "runtime", "tp runtime ls")
                runtime_json = locked_runtime(api, runtime, decl_json)  # its framework version
        except Unavailable as exc:
            output.warn(f"{exc.message}; method {method!r} not checked")
    else:
        output.warn(
            f"not logged in: method {method!r} not checked (run `tp validate {name}` later)"
        )
    if decl is not None:
        params = params_template(decl)
    elif method == "custom/custom":
        params = ['command = "sh train.sh"']
    else:
        params = [f"# see `tp methods {method}` for the parameters"]
    target.mkdir(parents=True)
    (target / EXPERIMENT_FILE).write_text(_experiment_toml(name, method, runtime, params))
    script = target / "train.sh"
    script.write_text(TRAIN_SH.format(name=name))
    script.chmod(0o755)
    made = [EXPERIMENT_FILE, "train.sh"]
    if decl_json is not None:
        write_lock(target, decl_json, runtime_json)
        made.append(LOCK_FILE)
    output.out.print(f"created {target}/ ({', '.join(made)})", markup=False)
    output.out.print(f"next: tp validate {name}", markup=False)
    return 0


def validate(
    name: str,
    /,
    *,
    offline: Annotated[bool, Parameter(name="--offline")] = False,
) -> int:
    """Check NAME/experiment.toml: keys, types, name, and params against the method.

    Parameters
    ----------
    name
        The experiment (directory name or path).
    offline
        Only check the file itself; do not ask the server about the method.
    """
    exp = load_experiment(name)
    if offline:
        output.out.print(f"ok: {exp.file} (offline checks only)", markup=False)
        return 0
    with connect() as api:
        method_json = fetch_method_json(api, exp.method)
        method = method_from_json(method_json)
        problems = check_params(exp, method)
        problems += _framework_problems(api, exp, method, method_json)
        problems += check_pins(api, exp)
        for path, value, what, command in (
            ("/v1/runtimes", exp.runtime, "runtime", "tp runtime ls"),
            ("/v1/profiles", exp.profile, "profile", "tp profiles"),
        ):
            if value:
                try:
                    check_named(api, path, value, what, command)
                except InvalidInput as exc:
                    problems.append(
                        InvalidInput(f"{exp.file}: {exc.message}", fix=exc.fix, field=what)
                    )
    for problem in problems:
        output.err.print(errors.render(problem), markup=False)
    if problems:
        return errors.USAGE
    runtime = exp.runtime or f"{method.default_runtime} (method default)"
    output.out.print(
        f"ok: {exp.name} (method {method.name}, {len(exp.params)} params, runtime {runtime}"
        + (f", profile {exp.profile}" if exp.profile else "")
        + ")",
        markup=False,
    )
    return 0


def _framework_problems(
    api: Api, exp: Experiment, method: Method, method_json: dict[str, Any]
) -> list[InvalidInput]:
    """The runtime the experiment resolves to must provide the recipe's framework at a version
    it accepts, and the lock must pin that version (docs/runtimes.md)."""
    try:
        runtime_json = runtime_of(api, exp.runtime, method_json)
    except InvalidInput as exc:  # a named runtime is reported with the runtime check below
        return [] if exp.runtime else [default_runtime_missing(method_json, exc)]
    problems = []
    if runtime_json:
        try:
            require_framework(method, runtime_from_json(runtime_json))
        except InvalidInput as exc:
            problems.append(InvalidInput(f"{exp.file}: {exc.message}", fix=exc.fix,
                                         field="runtime"))  # fmt: skip
    lock_problem = stale(exp.path, method_json, runtime_json)
    return [*problems, lock_problem] if lock_problem is not None else problems
