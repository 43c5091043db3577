"""The built-in catalog: the methods and runtimes offered on embedded defaults.

Profiles and pools are the operator's fleet configuration (stored in the database; see
docs/fleet.md), not part of the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable

from adapters.recipes import load_recipes
from domain.catalog import Catalog, Method, ParamSpec, RuntimeSpec

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


def default_catalog(runtimes: Iterable[RuntimeSpec]) -> Catalog:
    return Catalog(methods=(CUSTOM, *load_recipes()), runtimes=tuple(runtimes))
