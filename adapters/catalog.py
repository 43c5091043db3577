"""The built-in catalog: methods, profiles and runtimes offered on embedded defaults.

Operators will configure profiles and pools from a file (issue [2/8]); until then these are the
defaults, and every profile here is served by the local backend.
"""

from __future__ import annotations

from collections.abc import Iterable

from domain.catalog import Catalog, Method, ParamSpec, Profile, Resources, RuntimeSpec

CUSTOM = Method(
    name="custom/custom",
    description="Run your own command in the experiment's directory (POSIX sh -c).",
    params=(
        ParamSpec(
            name="command",
            type="str",
            required=True,
            help="the shell command to run, e.g. `sh train.sh` or `python train.py`",
        ),
    ),
    default_runtime="busybox",
)

LOCAL_PROFILES = tuple(
    Profile(f"cpu:{n}", "local", Resources(cpus=float(n), memory_mb=2048 * n)) for n in (1, 2, 4)
)


def default_catalog(runtimes: Iterable[RuntimeSpec]) -> Catalog:
    return Catalog(methods=(CUSTOM,), profiles=LOCAL_PROFILES, runtimes=tuple(runtimes))
