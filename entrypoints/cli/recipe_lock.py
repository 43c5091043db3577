"""`recipe.lock.json`: what an experiment's recipe was when it was made (`tp new`), checked by
`tp validate` and by the server at preview; `tp recipe upgrade NAME` moves it to the recipe the
server offers now (docs/recipes.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cyclopts import App

from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.catalog import fetch_method_json
from entrypoints.cli.client import Api, connect
from entrypoints.cli.workspace import load_experiment

LOCK_FILE = "recipe.lock.json"
recipe_app = App(name="recipe", help="The recipe an experiment is locked to.")


def lock_of(method: dict[str, Any]) -> dict[str, Any]:
    """The lock of a method as ``GET /v1/methods/NAME`` describes it."""
    return {
        "method": method["name"],
        "version": method.get("version", "1"),
        "digest": method.get("digest", ""),
        "default_runtime": method.get("default_runtime"),
        "artifact": list(method.get("artifact", [])),
    }


def write_lock(directory: Path, method: dict[str, Any]) -> None:
    text = json.dumps(lock_of(method), indent=2, sort_keys=True) + "\n"
    (directory / LOCK_FILE).write_text(text)


def read_lock(directory: Path) -> dict[str, str] | None:
    """The pinned (method, version, digest) for a preview, or None without a lock file."""
    path = directory / LOCK_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        return {k: str(data[k]) for k in ("method", "version", "digest")}
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(
            f"{path} is not a recipe lock: {exc}",
            fix=f"write it again: `tp recipe upgrade {directory.name}`",
            field=LOCK_FILE,
        ) from None


def stale(directory: Path, method: dict[str, Any]) -> InvalidInput | None:
    """Why the experiment's lock no longer matches ``method``, or None."""
    lock = read_lock(directory)
    if lock is None:
        return None
    now = lock_of(method)
    if lock != {k: str(now[k]) for k in ("method", "version", "digest")}:
        return InvalidInput(
            f"{directory / LOCK_FILE} is stale: it pins {lock['method']} version"
            f" {lock['version']} ({lock['digest'][:19]}…), the server offers {now['method']}"
            f" version {now['version']} ({str(now['digest'])[:19]}…)",
            fix=f"review the recipe (`tp methods {now['method']}`), then"
            f" `tp recipe upgrade {directory.name}`",
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
    before = read_lock(exp.path)
    write_lock(exp.path, method)
    now = lock_of(method)
    was = f"{before['version']} ({before['digest'][:19]}…)" if before else "no lock"
    output.out.print(
        f"{exp.path / LOCK_FILE}: {now['method']} {was} → version {now['version']}"
        f" ({str(now['digest'])[:19]}…)",
        markup=False,
    )
    return 0


def fetch_and_write(api: Api, directory: Path, method: str) -> None:
    write_lock(directory, fetch_method_json(api, method))


def register(app: App) -> None:
    app.command(recipe_app)
