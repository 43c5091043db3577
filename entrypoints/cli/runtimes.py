"""`tp runtime ls|add`: the runtime registry (docs/runtimes.md). `tp runtime build` (the
built-in images) lives in entrypoints/cli/server_cmds.py."""

from __future__ import annotations

from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.catalog import RuntimeSpec
from domain.errors import InvalidInput, NotFound
from domain.runtimes import PROCESS_MODELS, parse_frameworks
from entrypoints.cli import output
from entrypoints.cli.admin import JsonFlag
from entrypoints.cli.client import Api, connect, seg
from entrypoints.cli.lazy import lazy

runtime_app = App(name="runtime", help="Runtime images jobs run in, pinned by digest.")


def fetch_runtime_json(api: Api, name: str) -> dict[str, Any]:
    """``GET /v1/runtimes/{name}``; an unknown name is InvalidInput naming the choices."""
    try:
        return dict(api.get(f"/v1/runtimes/{seg(name)}"))
    except NotFound:
        names = [str(r.get("name")) for r in api.get("/v1/runtimes")]
        raise InvalidInput(
            f"unknown runtime {name!r}",
            fix=f"use one of: {', '.join(names) or 'none configured'} (see `tp runtime ls`)",
            field="runtime",
        ) from None


def runtime_from_json(data: dict[str, Any]) -> RuntimeSpec:
    """The contract part of a runtime as the API describes it."""
    return RuntimeSpec(
        name=str(data.get("name")),
        image=str(data.get("image")),
        python=data.get("python"),
        process_model=str(data.get("process_model")),
        digest=data.get("digest"),
        frameworks={str(k): str(v) for k, v in (data.get("frameworks") or {}).items()},
    )


def frameworks_text(frameworks: dict[str, Any] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (frameworks or {}).items())


@runtime_app.command(name="ls")
def runtime_ls(*, json: JsonFlag = False) -> int:
    """List runtimes: the built-in ones (pinned when a job is previewed) and those admins
    added (pinned by digest), with their contract: Python, frameworks, process model."""
    with connect() as api:
        data = api.get("/v1/runtimes")
    if json:
        output.print_json(data)
        return 0
    output.table(
        ["RUNTIME", "IMAGE", "DIGEST", "PYTHON", "FRAMEWORKS", "PROCESS MODEL", "DESCRIPTION"],
        [
            (r.get("name"), r.get("image"),
             (r.get("digest") or "")[:19] + "…" if r.get("digest") else "(built in: at preview)",
             r.get("python") or "-", frameworks_text(r.get("frameworks")) or "-",
             r.get("process_model"), r.get("description"))
            for r in data
        ],
    )  # fmt: skip
    return 0


@runtime_app.command(name="add")
def runtime_add(
    name: str,
    /,
    *,
    image: Annotated[str, Parameter(name="--image")],
    digest: Annotated[str | None, Parameter(name="--digest")] = None,
    python: Annotated[str | None, Parameter(name="--python")] = None,
    framework: Annotated[tuple[str, ...], Parameter(name="--framework")] = (),
    process_model: Annotated[str, Parameter(name="--process-model")] = "single-process",
    description: Annotated[str, Parameter(name="--description")] = "",
    replace: Annotated[bool, Parameter(name="--replace")] = False,
    json: JsonFlag = False,
) -> int:
    """Register a runtime image, pinned by digest (admins). Previews of jobs on it are refused
    when the backend's image is not that digest; committed jobs keep the pin they were given.

    Parameters
    ----------
    name
        The runtime's name (what `--runtime` and experiment.toml name).
    image
        The image reference: REPO:TAG, or REPO@sha256:… (then --digest may be left out).
    digest
        The image id (`docker image inspect --format '{{.Id}}' IMAGE`) or the registry's
        manifest digest, sha256:…
    python
        The Python version python3 has in the image (MAJOR.MINOR), checked in each member.
    framework
        NAME=VERSION of a Python distribution the image provides, exactly as
        importlib.metadata reports it (repeatable), checked in each member.
    process_model
        single-process, torch-process-group, ray or cpu.
    description
        One line about it.
    replace
        Overwrite a runtime of that name that has other content.
    """
    if process_model not in PROCESS_MODELS:
        raise InvalidInput(
            f"process model {process_model!r} is not one TunePlane runs",
            fix="use one of: " + ", ".join(PROCESS_MODELS),
            field="--process-model",
        )
    body = {
        "name": name,
        "image": image,
        "digest": digest,
        "python": python,
        "frameworks": parse_frameworks(framework, "--framework"),
        "process_model": process_model,
        "description": description,
        "replace": replace,
    }
    with connect() as api:
        _, added = api.post("/v1/runtimes", body)
    if json:
        output.print_json(added)
        return 0
    r = added["runtime"]
    output.out.print(
        f"runtime {r['name']} {added['outcome']} (revision {r['revision']}): {r['image']}"
        f" pinned to {r['digest']}"
        + (f", python {r['python']}" if r.get("python") else "")
        + (f", {frameworks_text(r.get('frameworks'))}" if r.get("frameworks") else "")
        + f", {r['process_model']}",
        markup=False,
    )
    return 0


lazy(
    runtime_app,
    "build",
    "server_cmds:runtime_build",
    "Build a runtime image in the local container engine (DOCKER_HOST), no registry needed.",
)
