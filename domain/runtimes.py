"""The runtime registry's rules (docs/runtimes.md): what a runtime declaration may say, how a
pinned digest is checked, and whether a runtime provides the framework a recipe needs.

Pure: ``packaging`` (PEP 440 versions and specifiers) is a library, not I/O.
"""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from domain.catalog import Method, RuntimePin, RuntimeSpec, check_name
from domain.errors import InvalidInput

PROCESS_MODELS = ("single-process", "torch-process-group", "ray", "cpu")
MAX_FRAMEWORKS = 32
MAX_IMAGE = 255
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
PYTHON_RE = re.compile(r"^[0-9]+\.[0-9]+$")
# a distribution name (PEP 508): letters, digits, '.', '_', '-'; starting and ending alnum
FRAMEWORK_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")
PACKAGE_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,98}$")  # PEP 440, as written
IMAGE_RE = re.compile(r"^[a-z0-9][A-Za-z0-9._/:@-]*$")
ADD_FIX = "`tp runtime add NAME --image REF --digest sha256:… --framework NAME=VERSION`"


def pin_of(runtime: RuntimeSpec, digest: str) -> RuntimePin:
    """``runtime`` pinned to ``digest`` (what the backend found), with its whole contract."""
    return RuntimePin(
        name=runtime.name,
        image=runtime.image,
        digest=digest,
        python=runtime.python,
        process_model=runtime.process_model,
        frameworks=dict(runtime.frameworks),
        packages=dict(runtime.packages),
    )


def split_image(image: str) -> tuple[str, str | None]:
    """``repo:tag@sha256:…`` -> (``repo:tag``, ``sha256:…``); without a digest, (image, None)."""
    ref, at, digest = image.partition("@")
    return (ref, digest) if at else (image, None)


def repository(image: str) -> str:
    """``registry:5000/team/img:tag@sha256:…`` -> ``registry:5000/team/img``."""
    ref, _ = split_image(image)
    head, _, last = ref.rpartition("/")
    return (head + "/" if head else "") + last.split(":", 1)[0]


def check_runtime(spec: RuntimeSpec, *, require_digest: bool = True) -> RuntimeSpec:
    """Validate a declaration; return it with the digest taken from ``image@sha256:…`` when
    given there. Each refusal names the field and the fix. Registered runtimes must name a
    digest (``require_digest``); the built-in ones are pinned at preview."""
    check_name(spec.name, "runtime name", "name")
    if not (0 < len(spec.image) <= MAX_IMAGE and IMAGE_RE.fullmatch(spec.image)):
        raise InvalidInput(
            f"image {spec.image!r} is not an image reference",
            fix="give a reference such as registry.example/team/trainer:1 or"
            " registry.example/team/trainer@sha256:…",
            field="image",
        )
    ref, in_image = split_image(spec.image)
    digest = spec.digest or in_image
    for value, where in ((in_image, "image"), (spec.digest, "digest")):
        if value is not None and not DIGEST_RE.fullmatch(value):
            raise InvalidInput(
                f"{where}: {value!r} is not a sha256 digest",
                fix="give sha256: and 64 lower-case hex digits (`docker image inspect"
                " --format '{{.Id}}' IMAGE`, or the registry's manifest digest)",
                field=where,
            )
    if in_image and spec.digest and in_image != spec.digest:
        raise InvalidInput(
            f"the image reference pins {in_image} but --digest is {spec.digest}",
            fix="give the digest once, or the same digest in both",
            field="digest",
        )
    if not ref:
        raise InvalidInput("the image has no repository name", fix="name it", field="image")
    if spec.python is not None and not PYTHON_RE.fullmatch(spec.python):
        raise InvalidInput(
            f"python {spec.python!r} is not a MAJOR.MINOR version",
            fix="give it as python3 reports it, e.g. 3.11",
            field="python",
        )
    if spec.process_model not in PROCESS_MODELS:
        raise InvalidInput(
            f"process model {spec.process_model!r} is not one TunePlane runs",
            fix="use one of: " + ", ".join(PROCESS_MODELS),
            field="process_model",
        )
    _check_frameworks(spec)
    if len(spec.description) > 500 or any(ord(c) < 32 or ord(c) == 127 for c in spec.description):
        raise InvalidInput(
            "description must be at most 500 characters without control characters",
            fix="shorten it and keep it on one line",
            field="description",
        )
    if digest is None and require_digest:
        raise InvalidInput(
            f"runtime {spec.name} names no digest: registered runtimes are pinned by digest",
            fix="add --digest sha256:… (`docker image inspect --format '{{.Id}}' IMAGE` for a"
            " local image, the manifest digest for one in a registry) or write IMAGE@sha256:…",
            field="digest",
        )
    return RuntimeSpec(
        name=spec.name,
        image=spec.image,
        python=spec.python,
        process_model=spec.process_model,
        description=spec.description,
        digest=digest,
        frameworks=dict(sorted(spec.frameworks.items())),
        added_by=spec.added_by,
        added_at=spec.added_at,
        revision=spec.revision,
        packages=dict(sorted(spec.packages.items())),
    )


def _check_frameworks(spec: RuntimeSpec) -> None:
    if len(spec.frameworks) > MAX_FRAMEWORKS:
        raise InvalidInput(
            f"{len(spec.frameworks)} frameworks given; at most {MAX_FRAMEWORKS}",
            fix="list the frameworks recipes need, not every installed package",
            field="frameworks",
        )
    if spec.frameworks and spec.python is None:
        raise InvalidInput(
            f"runtime {spec.name} lists frameworks but no Python version",
            fix="give --python MAJOR.MINOR: frameworks are Python distributions, checked with"
            " python3 inside the container",
            field="python",
        )
    if spec.packages and spec.python is None:
        raise InvalidInput(
            f"runtime {spec.name} lists its Python packages but no Python version",
            fix="give the Python version of the image: its packages are checked with python3",
            field="python",
        )
    for name, version in spec.packages.items():  # rendered as NAME==VERSION lines
        if not (FRAMEWORK_RE.fullmatch(name) and PACKAGE_VERSION_RE.fullmatch(version)):
            raise InvalidInput(
                f"package {name!r} at {version!r} is not a distribution name and version",
                fix="list each distribution as importlib.metadata reports it in the image",
                field=f"packages.{name}",
            )
    for name, version in spec.frameworks.items():
        listed = spec.packages.get(re.sub(r"[-_.]+", "-", name).lower())
        if spec.packages and listed != version:  # a contract that no image can keep
            raise InvalidInput(
                f"framework {name} {version} is not in the runtime's package list ("
                + (f"it lists {listed})" if listed else "it lacks it)"),
                fix="declare the framework at the version its package list has",
                field=f"frameworks.{name}",
            )
        if not FRAMEWORK_RE.fullmatch(name):
            raise InvalidInput(
                f"framework {name!r} is not a distribution name",
                fix="use the name pip knows it by (letters, digits, '.', '_', '-'), e.g. torch",
                field=f"frameworks.{name}",
            )
        try:
            Version(version)
        except InvalidVersion:
            raise InvalidInput(
                f"framework {name}: {version!r} is not a PEP 440 version",
                fix=f"give the version exactly as python3 -c 'import importlib.metadata as m;"
                f' print(m.version("{name}"))\' prints it in the image',
                field=f"frameworks.{name}",
            ) from None


def parse_frameworks(pairs: list[str] | tuple[str, ...], field: str) -> dict[str, str]:
    """``["torch=2.3.1", …]`` (CLI flags) -> ``{"torch": "2.3.1", …}``; a name given twice or a
    pair without ``=`` is refused."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, eq, version = pair.partition("=")
        if not eq or not name.strip() or not version.strip():
            raise InvalidInput(
                f"{field} {pair!r} is not NAME=VERSION", fix="e.g. --framework torch=2.3.1",
                field=field,
            )  # fmt: skip
        if name.strip() in out:
            raise InvalidInput(f"framework {name.strip()} given twice", fix="give it once",
                               field=field)  # fmt: skip
        out[name.strip()] = version.strip()
    return out


def check_requirement(method: Method) -> SpecifierSet:
    """The method's framework specifier, parsed (a recipe's declaration is checked at load)."""
    try:
        return SpecifierSet(method.framework_requires)
    except InvalidSpecifier:
        raise InvalidInput(
            f"method {method.name}: framework requirement {method.framework_requires!r} is not"
            " a PEP 440 specifier",
            fix="write it as pip does, e.g. >=0.12,<1",
            field="framework.requires",
        ) from None


def require_framework(method: Method, runtime: RuntimeSpec) -> None:
    """Refuse a runtime that does not provide the framework ``method`` is written against at
    a version its specifier accepts; the message names the runtime, its version and the
    requirement."""
    if method.framework is None:
        return
    wanted = method.framework + (method.framework_requires or " (any version)")
    fix = (
        "choose a runtime that provides it (`--runtime`, see `tp runtime ls`), or ask an admin"
        f" to register one: {ADD_FIX}"
    )
    version = runtime.frameworks.get(method.framework)
    if version is None:
        raise InvalidInput(
            f"method {method.name} needs {wanted}; runtime {runtime.name} does not provide"
            f" {method.framework} (it provides: "
            + (", ".join(f"{k} {v}" for k, v in runtime.frameworks.items()) or "no frameworks")
            + ")",
            fix=fix,
            field="intent.runtime",
        )
    if not check_requirement(method).contains(version, prereleases=True):
        raise InvalidInput(
            f"method {method.name} needs {wanted}; runtime {runtime.name} provides"
            f" {method.framework} {version}",
            fix=fix,
            field="intent.runtime",
        )


def digest_mismatch(
    runtime: RuntimeSpec, found: str, also: list[str] | None = None
) -> InvalidInput:
    """The refusal of a backend whose image is not the one the registry pins."""
    seen = found + (f" (repository digests: {', '.join(also)})" if also else "")
    ref, _ = split_image(runtime.image)
    return InvalidInput(
        f"runtime {runtime.name!r} pins {runtime.digest}, but image {ref} is {seen}: the image"
        " was rebuilt or retagged since it was registered",
        fix=f"load the pinned image ({ref}@{runtime.digest} or its image id) into the engine;"
        f" or, if the new image is meant, re-register it: `tp runtime add {runtime.name}"
        f" --image {ref} --digest {found} --replace`",
        field="intent.runtime",
    )
