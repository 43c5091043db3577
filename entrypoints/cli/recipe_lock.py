"""`recipe.lock.json`: what an experiment's recipe was when it was made (`tp new`), checked by
`tp validate` and by the server at preview; `tp recipe upgrade NAME` moves it to the recipe the
server offers now (docs/recipes.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cyclopts import App

from domain.documents import json_loads
from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.catalog import fetch_method_json
from entrypoints.cli.client import Api, connect
from entrypoints.cli.runtimes import fetch_runtime_json
from entrypoints.cli.workspace import load_experiment

LOCK_FILE = "recipe.lock.json"
recipe_app = App(name="recipe", help="The recipe an experiment is locked to.")


LOCKED = ("method", "version", "digest", "framework", "framework_version")


def lock_of(method: dict[str, Any], runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    """The lock of a method as ``GET /v1/methods/NAME`` describes it; for a recipe written
    against a framework, with that framework's version in ``runtime`` (``GET /v1/runtimes/…``)."""
    lock = {
        "method": method["name"],
        "version": method.get("version", "1"),
        "digest": method.get("digest", ""),
        "default_runtime": method.get("default_runtime"),
        "artifact": list(method.get("artifact", [])),
    }
    framework = method.get("framework")
    if framework:
        lock["framework"] = framework
        provided = ((runtime or {}).get("frameworks") or {}).get(framework)
        if provided is not None:
            lock["framework_version"] = provided
            lock["runtime"] = (runtime or {}).get("name")
    return lock


def runtime_of(api: Api, directory_runtime: str | None, method: dict[str, Any]) -> dict[str, Any]:
    """The runtime an experiment resolves to (its own, else the method's default), as the API
    describes it; only fetched for recipes written against a framework."""
    if not method.get("framework"):
        return {}
    return fetch_runtime_json(api, directory_runtime or str(method.get("default_runtime")))


def default_runtime_missing(method: dict[str, Any], exc: InvalidInput) -> InvalidInput:
    """The server lacks the method's default runtime (the post-training recipes' runtimes are
    an admin's to register): say so, and the ways out, rather than "unknown runtime"."""
    runtime = method.get("default_runtime")
    return InvalidInput(
        f"method {method.get('name')} runs on runtime {runtime!r} by default, and this server"
        " has no runtime of that name",
        fix=f'set `runtime = "NAME"` in experiment.toml or pass --runtime ({exc.fix}), or ask'
        f" an admin to register {runtime!r} (`tp runtime add`, docs/recipes.md)",
        field="runtime",
    )


def locked_runtime(
    api: Api, directory_runtime: str | None, method: dict[str, Any]
) -> dict[str, Any]:
    """``runtime_of`` for writing a lock: where the method's default runtime is not registered
    yet, the lock pins no framework version (with a warning) instead of failing `tp new`."""
    try:
        return runtime_of(api, directory_runtime, method)
    except InvalidInput as exc:
        if directory_runtime:
            raise
        output.warn(
            default_runtime_missing(method, exc).message
            + ": the lock pins no framework version (`tp recipe upgrade` once it is there)"
        )
        return {}


def write_lock(directory: Path, method: dict[str, Any], runtime: dict[str, Any] | None) -> None:
    text = json.dumps(lock_of(method, runtime), indent=2, sort_keys=True) + "\n"
    (directory / LOCK_FILE).write_text(text)


def read_lock(directory: Path) -> dict[str, str] | None:
    """What the lock pins (``RecipeLockIn``: method, version, digest, and the framework and its
    version when it has them), or None without a lock file."""
    path = directory / LOCK_FILE
    if not path.exists():
        return None
    try:
        data = json_loads(path.read_text())
        lock = {k: str(data[k]) for k in ("method", "version", "digest")}
        lock |= {k: str(data[k]) for k in ("framework", "framework_version") if data.get(k)}
        return lock
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(
            f"{path} is not a recipe lock: {exc}",
            fix=f"write it again: `tp recipe upgrade {directory.name}`",
            field=LOCK_FILE,
        ) from None


def stale(
    directory: Path, method: dict[str, Any], runtime: dict[str, Any] | None = None
) -> InvalidInput | None:
    """Why the experiment's lock no longer matches ``method`` (or the framework version that
    ``runtime``, the one it resolves to, provides), or None."""
    lock = read_lock(directory)
    if lock is None:
        return None
    now = lock_of(method, runtime)
    fix = (
        f"review the recipe (`tp methods {now['method']}`), then"
        f" `tp recipe upgrade {directory.name}`"
    )
    if [lock.get(k) for k in LOCKED[:3]] != [str(now[k]) for k in LOCKED[:3]]:
        return InvalidInput(
            f"{directory / LOCK_FILE} is stale: it pins {lock['method']} version"
            f" {lock['version']} ({lock['digest'][:19]}…), the server offers {now['method']}"
            f" version {now['version']} ({str(now['digest'])[:19]}…)",
            fix=fix,
            field=LOCK_FILE,
        )
    framework = now.get("framework")
    if framework and [lock.get(k) for k in LOCKED[3:]] != [now.get(k) for k in LOCKED[3:]]:
        pinned = lock.get("framework_version")
        return InvalidInput(
            f"{directory / LOCK_FILE} is stale: it pins "
            + (f"{framework} {pinned}" if pinned else f"no version of {framework}")
            + f"; runtime {(runtime or {}).get('name')} provides {framework}"
            f" {now.get('framework_version') or '(none)'}",
            fix=f"`tp recipe upgrade {directory.name}` to lock the version the runtime provides",
            field=LOCK_FILE,
        )
    return None


@recipe_app.command(name="upgrade")
def upgrade(name: str, /) -> int:
    """Lock experiment NAME to the recipe the server offers now (rewrites recipe.lock.json).

    Parameters
    ----------
    name
        The experiment (directory name or path).
    """
    exp = load_experiment(name)
    with connect() as api:
        method = fetch_method_json(api, exp.method)
        runtime = locked_runtime(api, exp.runtime, method)
    before = read_lock(exp.path)
    write_lock(exp.path, method, runtime)
    now = lock_of(method, runtime)
    was = f"{before['version']} ({before['digest'][:19]}…)" if before else "no lock"
    if before and before.get("framework_version"):
        was += f", {before.get('framework')} {before['framework_version']}"
    framework = (
        f", {now['framework']} {now['framework_version']}" if now.get("framework_version") else ""
    )
    output.out.print(
        f"{exp.path / LOCK_FILE}: {now['method']} {was} → version {now['version']}"
        f" ({str(now['digest'])[:19]}…){framework}",
        markup=False,
    )
    return 0
