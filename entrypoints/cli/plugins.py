"""`tp plugin publish|ls|info|install|disable|enable` (docs/plugins.md).

``publish DIR`` reads the directory (every regular file but ``.git/``, ``__pycache__/`` and
``*.pyc``), checks its ``plugin.toml`` here, computes its digest, packs it as a deterministic
gzip-compressed tar and uploads it with the digest; the server computes the digest again.
``install NAME@VERSION [EXPERIMENT]`` pins the version's digest in the experiment's
``experiment.toml`` (``[plugins]``), which ``tp submit`` sends with the preview.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
from pathlib import Path
from typing import Annotated, Any

from cyclopts import App, Parameter

from domain import tarball
from domain.errors import Conflict, InvalidInput, NotFound, TooLarge
from domain.plugins import MAX_PACKAGE_BYTES, PluginPin, open_package, parse_ref
from entrypoints.cli import output
from entrypoints.cli.archive import is_secret
from entrypoints.cli.client import UPLOAD_TIMEOUT, Api, connect, with_retries
from entrypoints.cli.jobs import JsonFlag
from entrypoints.cli.plugin_pins import write_pin
from entrypoints.cli.workspace import Experiment, load_experiment

plugin_app = App(name="plugin", help="Plugins: versioned packages jobs can use.")
SKIP_DIRS = {".git", "__pycache__", ".tuneplane-data"}
SKIP_FILES = ("*.pyc",)


def read_package(directory: Path) -> dict[str, bytes]:
    """The files of a plugin directory by relative path; refuses links, special files and
    files that look like secrets."""
    if not directory.is_dir():
        raise InvalidInput(
            f"{directory} is not a directory",
            fix="name the directory that holds plugin.toml",
            field="DIR",
        )
    files: dict[str, bytes] = {}
    total = 0
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if SKIP_DIRS & set(rel.parts) or any(fnmatch.fnmatch(rel.name, p) for p in SKIP_FILES):
            continue
        name = tarball.check_path(rel.as_posix(), "DIR")
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            raise InvalidInput(
                f"{path} is a link or a special file",
                fix="replace it by a copy of the file",
                field="DIR",
            )
        if path.is_dir():
            continue
        if is_secret(name):
            raise InvalidInput(
                f"refusing to publish {name}: it looks like a secret",
                fix="remove it from the plugin's directory",
                field="DIR",
            )
        files[name] = path.read_bytes()
        total += len(files[name])
        if total > MAX_PACKAGE_BYTES:
            raise TooLarge(
                f"{directory} holds more than {MAX_PACKAGE_BYTES} bytes",
                fix="leave data, checkpoints and caches out of the plugin",
                field="DIR",
            )
    return files


def _path(name: str, version: str | None = None, tail: str = "") -> str:
    return f"/v1/plugins/{name}" + (f"/{version}" if version else "") + tail


def _caps(p: dict[str, Any]) -> str:
    return ", ".join(c["name"] for c in p["capabilities"]) or "-"


def _status(p: dict[str, Any]) -> str:
    d = p.get("disabled")
    return f"disabled by {d['by']}: {d['reason']}" if d else "enabled"


@plugin_app.command(name="publish")
def publish(directory: Path, /, *, json: JsonFlag = False) -> int:
    """Publish the plugin in DIR (its plugin.toml names it and its version). The same files
    again are accepted; other files under a published version are refused: bump the version.

    Parameters
    ----------
    directory
        The plugin's directory, holding plugin.toml.
    """
    package = open_package(read_package(directory))
    body = gzip.compress(tarball.pack(package.files), mtime=0)
    headers = {
        "Content-Type": "application/octet-stream",
        "X-Plugin-Digest": package.digest,
        "X-Content-Digest": "sha256:" + hashlib.sha256(body).hexdigest(),
    }
    ref = package.declaration.ref
    with connect() as api:
        resp = with_retries(
            lambda: api.request(
                "POST", "/v1/plugins", content=body, headers=headers, timeout=UPLOAD_TIMEOUT
            ),
            "publish",
        )
    found = resp.json()
    if json:
        output.print_json(found)
    elif resp.status_code == 201:
        output.out.print(f"published {ref} {found['digest']}", markup=False)
    else:
        output.out.print(
            f"{ref} is already published with these files {found['digest']}", markup=False
        )
    output.info(f"use it in an experiment: tp plugin install {ref} EXPERIMENT")
    return 0


@plugin_app.command(name="ls")
def ls(
    *,
    group: Annotated[str | None, Parameter(name="--group")] = None,
    json: JsonFlag = False,
) -> int:
    """List published plugins by group: what each may do and where it executes.

    Parameters
    ----------
    group
        Only this group: algorithm, data-prep, evaluation, reward or export.
    """
    with connect() as api:
        found = api.get("/v1/plugins", params={"group": group} if group else None)
    if json:
        output.print_json(found)
        return 0
    rows = [
        (g["group"], p["name"], p["version"], p["executes"], _caps(p), _status(p))
        for g in found["groups"]
        for p in g["plugins"]
    ]
    if not rows:
        output.info(
            "no plugins published"
            + (f" in group {group}" if group else "")
            + " (publish one: tp plugin publish DIR)"
        )
        return 0
    output.table(["GROUP", "NAME", "VERSION", "EXECUTES", "CAPABILITIES", "STATUS"], rows)
    return 0


@plugin_app.command(name="info")
def info(ref: str, /, *, json: JsonFlag = False) -> int:
    """Show a plugin: NAME lists its versions, NAME@VERSION shows one with its files.

    Parameters
    ----------
    ref
        NAME or NAME@VERSION.
    """
    name, version = parse_ref(ref, "NAME", version_required=False)
    with connect() as api:
        found = api.get(_path(name, version))
    if json:
        output.print_json(found)
    elif version is None:
        rows = [
            (
                p["version"],
                p["group"],
                p["executes"],
                p["digest"],
                output.short_time(p["published_at"]),
                _status(p),
            )
            for p in found["versions"]
        ]
        output.table(["VERSION", "GROUP", "EXECUTES", "DIGEST", "PUBLISHED", "STATUS"], rows)
    else:
        for key, value in (
            ("plugin", f"{found['name']}@{found['version']}"),
            ("group", found["group"]),
            ("executes", f"{found['executes']}: {found['executes_description']}"),
            ("about", found["description"]),
            (
                "may",
                "; ".join(f"{c['name']} ({c['description']})" for c in found["capabilities"])
                or "-",
            ),
            ("entry", " ".join(found["entry"]) or "-"),
            ("digest", found["digest"]),
            ("size", f"{output.human_size(found['size'])} in {found['files']} files"),
            ("published", f"{output.short_time(found['published_at'])} by {found['published_by']}"),
            ("status", _status(found)),
        ):
            output.out.print(f"{key:<10} {output.escape(value)}", markup=False)
        files = [(f["path"], output.human_size(f["size"]), f["sha256"]) for f in found["manifest"]]
        output.table(["PATH", "SIZE", "SHA256"], files)
    return 0


def _usable(api: Api, name: str, version: str | None) -> dict[str, Any]:
    """The version to install: the one named, else the newest enabled release (or
    pre-release, when there is no release)."""
    if version is not None:
        found: dict[str, Any] = api.get(_path(name, version))
    else:
        enabled = [p for p in api.get(_path(name))["versions"] if not p.get("disabled")]
        if not enabled:
            raise Conflict(
                f"every version of plugin {name} is disabled",
                fix=f"see `tp plugin info {name}`",
                field="NAME",
            )
        releases = [p for p in enabled if "-" not in p["version"]]  # not pre-releases
        found = (releases or enabled)[0]
    if found.get("disabled"):
        d = found["disabled"]
        raise Conflict(
            f"plugin {name}@{found['version']} is disabled for new submissions by {d['by']}: "
            f"{d['reason']}",
            fix=f"choose another version (`tp plugin info {name}`)",
            field="NAME",
        )
    return found


@plugin_app.command(name="install")
def install(ref: str, experiment: str = ".", /) -> int:
    """Pin a plugin version (and its digest) in an experiment's experiment.toml, so that its
    submissions use exactly that package.

    Parameters
    ----------
    ref
        NAME@VERSION, or NAME for its newest enabled release.
    experiment
        The experiment (directory name or path); default: the current directory.
    """
    name, version = parse_ref(ref, "NAME", version_required=False)
    exp = load_experiment(experiment)
    with connect() as api:
        found = _usable(api, name, version)
    pin = PluginPin(name, found["version"], found["digest"])
    before = write_pin(exp.path, pin)
    was = f" (was {before.version})" if before and before.version != pin.version else ""
    output.out.print(f"{exp.file}: {name}@{pin.version} {pin.digest}{was}", markup=False)
    if found["executes"] == "workload":
        output.info(f"its files will be in the Job Capsule at /tuneplane/capsule/plugins/{name}/")
    return 0


def check_pins(api: Api, exp: Experiment) -> list[InvalidInput]:
    """Why the experiment's plugin pins would be refused at preview (for `tp validate`)."""
    problems: list[InvalidInput] = []
    for pin in exp.plugins:
        where = f"plugins.{pin.name}"
        try:
            found = api.get(_path(pin.name, pin.version))
        except NotFound as exc:
            problems.append(InvalidInput(f"{exp.file}: {exc.message}", fix=exc.fix, field=where))
            continue
        if found.get("disabled"):
            d = found["disabled"]
            problems.append(
                InvalidInput(
                    f"{exp.file}: plugin {pin.name}@{pin.version} is disabled by {d['by']}: "
                    f"{d['reason']}",
                    fix=f"see `tp plugin info {pin.name}`",
                    field=where,
                )
            )
        elif pin.digest is not None and pin.digest != found["digest"]:
            problems.append(
                InvalidInput(
                    f"{exp.file}: plugin {pin.name}@{pin.version} is {found['digest']} here, not "
                    f"the pinned {pin.digest}",
                    fix=f"`tp plugin install {pin.name}@{pin.version}`",
                    field=where,
                )
            )
    return problems


def _admin(ref: str, action: str, body: dict[str, str] | None = None) -> int:
    name, version = parse_ref(ref, "NAME@VERSION")
    with connect() as api:
        _, found = api.post(_path(name, version, f"/{action}"), body)
    output.out.print(f"{name}@{version}: {_status(found)}", markup=False)
    return 0


@plugin_app.command(name="disable")
def disable(ref: str, /, *, reason: Annotated[str, Parameter(name="--reason")]) -> int:
    """Refuse a plugin version to new submissions, with the reason they are told (admins).
    Jobs already committed keep it.

    Parameters
    ----------
    ref
        NAME@VERSION.
    reason
        Why, shown to whoever submits with it.
    """
    return _admin(ref, "disable", {"reason": reason})


@plugin_app.command(name="enable")
def enable(ref: str, /) -> int:
    """Offer a disabled plugin version to new submissions again (admins).

    Parameters
    ----------
    ref
        NAME@VERSION.
    """
    return _admin(ref, "enable")
