"""Resource requests: what `--profile` means, resolved against the operator's pools.

Syntax of one ``--profile`` value: ``[ROLE=]REQUEST`` where REQUEST is

* a profile the operator named (``tp profiles`` lists them), which stands for a request below;
* ``MODEL:N`` (``h200:8``): N GPUs of that model. Above one node's GPUs, N must be a whole-node
  multiple and becomes N / gpus_per_node members of one whole node each;
* ``MODEL`` (``h200``): one whole node of that model;
* ``cpu:N``: N CPUs in a CPU pool;
* any of these prefixed with ``POOL/`` to pick the pool when several match.

CPUs and memory of a GPU member are the node's share for its GPUs; of a CPU member, the node's
memory share for its CPUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from domain.catalog import NAME_RE, Resources
from domain.errors import InvalidInput
from domain.fleet import Pool

MAX_MEMBERS = 32
MAX_ROLES = 8
# The smallest member every backend can limit (docs/scheduling.md, "Smallest request"): CPUs in
# steps of 10 millicores (a CFS quota of 1 ms per 100 ms period, the kernel's and runc's floor;
# Kubernetes counts millicores), memory at least Docker's minimum limit of 6 MiB.
CPU_STEP_MCPU = 10
MIN_CPUS = CPU_STEP_MCPU / 1000
MIN_MEMORY_MB = 6
DEFAULT_ROLE = "main"
_REQUEST_RE = re.compile(r"^(?:(?P<pool>[a-z0-9][a-z0-9._-]*)/)?(?P<kind>[a-z0-9][a-z0-9._-]*)"
                         r"(?::(?P<count>[0-9]+(?:\.[0-9]+)?))?$")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Profile:
    """An operator's name for a request, e.g. ``big`` → ``a/h200:16``."""

    name: str
    request: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One role of a job: ``members`` identical members in one pool."""

    name: str
    profile: str  # what the user wrote, e.g. ``h200:16``
    pool: str
    members: int
    resources: Resources  # per member

    @property
    def gpus(self) -> int:
        return self.members * self.resources.gpus

    def describe(self) -> str:
        """``2×8 h200 GPUs in pool a``, ``1 h200 GPU in pool a``, ``2 CPUs in pool local``."""
        r = self.resources
        if r.gpus:
            unit = f"{r.gpu_model} GPU" + ("s" if r.gpus != 1 or self.members != 1 else "")
            count = str(r.gpus)
        else:
            unit = "CPU" + ("s" if r.cpus != 1 or self.members != 1 else "")
            count = _num(r.cpus)
        lead = f"{self.members}×{count}" if self.members != 1 else count
        return f"{lead} {unit} in pool {self.pool}"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "profile": self.profile,
            "pool": self.pool,
            "members": self.members,
            "resources": self.resources.to_dict(),
        }

    @staticmethod
    def from_dict(d: dict[str, object]) -> RoleSpec:
        res = d["resources"]
        assert isinstance(res, dict)
        return RoleSpec(
            name=str(d["name"]),
            profile=str(d["profile"]),
            pool=str(d["pool"]),
            members=int(str(d["members"])),
            resources=Resources(**res),
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def split_role(text: str, where: str) -> tuple[str, str]:
    """``train=h200:8`` → (``train``, ``h200:8``); ``h200:8`` → (``main``, ``h200:8``)."""
    role, sep, request = text.partition("=")
    if not sep:
        return DEFAULT_ROLE, text.strip()
    role = role.strip()
    if not NAME_RE.fullmatch(role):
        raise InvalidInput(
            f"role name {role!r} in {text!r} is not a valid name",
            fix="write ROLE=PROFILE with a lower-case role name, e.g. train=h200:8",
            field=where,
        )
    return role, request.strip()


def resolve_roles(
    texts: Sequence[str], pools: Iterable[Pool], profiles: Iterable[Profile]
) -> tuple[RoleSpec, ...]:
    """Resolve every ``--profile`` value; all roles must run on one backend."""
    if not texts:
        raise InvalidInput(
            "no profile given", fix="pass --profile, e.g. --profile cpu:1", field="intent.profiles"
        )
    if len(texts) > MAX_ROLES:
        raise InvalidInput(
            f"{len(texts)} profiles given; a job has at most {MAX_ROLES} roles",
            fix="merge roles",
            field="intent.profiles",
        )
    pool_list = list(pools)
    by_name = {p.name: p for p in profiles}
    roles: list[RoleSpec] = []
    for i, text in enumerate(texts):
        where = f"intent.profiles[{i}]"
        role, request = split_role(text, where)
        if len(texts) > 1 and "=" not in text:
            raise InvalidInput(
                f"profile {text!r} has no role name, but the job has several roles",
                fix="name each role: --profile train=h200:8 --profile rollout=h100:2",
                field=where,
            )
        if any(r.name == role for r in roles):
            raise InvalidInput(
                f"role {role!r} is given twice", fix="give each role once", field=where
            )
        alias = by_name.get(request)
        resolved = resolve_request(alias.request if alias else request, pool_list, where)
        roles.append(RoleSpec(role, request, resolved[0].name, resolved[1], resolved[2]))
    backends = {p.name: p.backend for p in pool_list}
    used = sorted({backends[r.pool] for r in roles})
    if len(used) > 1:
        raise InvalidInput(
            "the roles' pools belong to different backends: " + ", ".join(used),
            fix="a job runs on one backend: pick pools of one backend for every role",
            field="intent.profiles",
        )
    total = sum(r.members for r in roles)
    if total > MAX_MEMBERS:
        raise InvalidInput(
            f"the job has {total} members; at most {MAX_MEMBERS} are allowed",
            fix="ask for fewer nodes",
            field="intent.profiles",
        )
    return tuple(roles)


def resolve_request(text: str, pools: list[Pool], where: str) -> tuple[Pool, int, Resources]:
    """One request → (pool, members, per-member resources)."""
    m = _REQUEST_RE.fullmatch(text)
    if not m:
        raise InvalidInput(
            f"profile {text!r} is not a valid request",
            fix="write MODEL:N (h200:8), MODEL (a whole node), cpu:N, or a profile name "
            "from `tp profiles`",
            field=where,
        )
    kind, count, pool_name = m["kind"], m["count"], m["pool"]
    pool = _pick_pool(kind, pool_name, pools, text, where)
    if kind == "cpu":
        resolved = _cpu_members(pool, count, text, where)
    else:
        resolved = _gpu_members(pool, kind, count, text, where)
    why = below_floor(resolved[2].cpus, resolved[2].memory_mb)
    if why:
        raise InvalidInput(
            f"profile {text!r} gives each member {why}",
            fix=f"ask for more (a node of pool {pool.name} has {_num(pool.cpus_per_node)} CPUs "
            f"and {pool.memory_mb_per_node} MiB), or ask an operator to give the pool more",
            field=where,
        )
    return resolved


def below_floor(cpus: float, memory_mb: int) -> str | None:
    """What makes a member of ``cpus`` CPUs and ``memory_mb`` MiB smaller than every backend can
    limit (None when it is not). Previews refuse such a request, and every backend refuses to
    create such a workload: none runs without CPU and memory limits."""
    if not (math.isfinite(cpus) and cpus >= MIN_CPUS - 1e-9):
        return f"{cpus:g} CPUs, below the smallest limit of {_num(MIN_CPUS)} CPU"
    if memory_mb < MIN_MEMORY_MB:
        return f"{memory_mb} MiB of memory, below the smallest limit of {MIN_MEMORY_MB} MiB"
    return None


def require_limits(cpus: float, memory_mb: int, what: str) -> None:
    """For backends: InvalidInput when a workload would run with no (or no enforceable) limit."""
    why = below_floor(cpus, memory_mb)
    if why:
        raise InvalidInput(
            f"{what} would get {why}; it is not created (no workload runs without CPU and "
            "memory limits)",
            fix=f"preview it again: a request needs at least {_num(MIN_CPUS)} CPU and "
            f"{MIN_MEMORY_MB} MiB per member",
            field="intent.profiles",
        )


def _gpu_members(
    pool: Pool, kind: str, count: str | None, text: str, where: str
) -> tuple[Pool, int, Resources]:
    g = pool.gpus_per_node
    gpus = g if count is None else _whole(count, text, where)
    if gpus < 1:
        raise InvalidInput(
            f"profile {text!r} asks for no GPUs", fix="ask for 1 or more", field=where
        )
    if gpus <= g:
        members, per = 1, gpus
    elif gpus % g == 0:
        members, per = gpus // g, g
    else:
        lower, upper = (gpus // g) * g, (gpus // g + 1) * g
        raise InvalidInput(
            f"profile {text!r} asks for {gpus} GPUs; above one node's {g} a request must be a "
            "whole-node multiple",
            fix=f"ask for {kind}:{lower} or {kind}:{upper}",
            field=where,
        )
    share = per / g
    res = Resources(
        cpus=round(pool.cpus_per_node * share, 3),
        memory_mb=int(pool.memory_mb_per_node * share),
        gpus=per,
        gpu_model=pool.gpu_model,
    )
    return pool, members, res


def _whole(count: str, text: str, where: str) -> int:
    if "." in count:
        raise InvalidInput(
            f"profile {text!r}: GPUs come whole", fix="give a whole number of GPUs", field=where
        )
    return int(count)


def _cpu_members(
    pool: Pool, count: str | None, text: str, where: str
) -> tuple[Pool, int, Resources]:
    """Up to one node's CPUs: one member with a memory share. Above: whole nodes, one member
    each (a CPU gang), as for GPUs."""
    node = pool.cpus_per_node
    cpus = float(count) if count is not None else node
    if cpus <= 0:
        raise InvalidInput(
            f"profile {text!r} asks for no CPUs", fix="ask for cpu:1 or more", field=where
        )
    if count is not None:
        _check_cpu_step(count, text, where)
    if cpus <= node + 1e-9:
        memory = int(pool.memory_mb_per_node * cpus / node)
        return pool, 1, Resources(cpus=cpus, memory_mb=memory)
    members = round(cpus / node)
    if abs(members * node - cpus) > 1e-9:
        lower, upper = math.floor(cpus / node) * node, math.ceil(cpus / node) * node
        raise InvalidInput(
            f"profile {text!r} asks for {_num(cpus)} CPUs; a node of pool {pool.name} has "
            f"{_num(node)}, and above one node a request must be a whole-node multiple",
            fix=f"ask for at most cpu:{_num(node)}, or for cpu:{_num(lower)} or cpu:{_num(upper)}",
            field=where,
        )
    return pool, members, Resources(cpus=node, memory_mb=pool.memory_mb_per_node)


def _check_cpu_step(count: str, text: str, where: str) -> None:
    """``cpu:N`` asks for a whole number of steps of :data:`MIN_CPUS`, at least one."""
    steps = Decimal(count) / Decimal(CPU_STEP_MCPU) * 1000
    if steps >= 1 and steps == steps.to_integral_value():
        return
    down, up = (int(steps) * CPU_STEP_MCPU / 1000, (int(steps) + 1) * CPU_STEP_MCPU / 1000)
    near = f"cpu:{_num(down)} or cpu:{_num(up)}" if down >= MIN_CPUS else f"cpu:{_num(up)}"
    raise InvalidInput(
        f"profile {text!r} asks for {count} CPUs; CPUs come in steps of {_num(MIN_CPUS)} "
        f"({CPU_STEP_MCPU} millicores), at least {_num(MIN_CPUS)}",
        fix=f"ask for {near}",
        field=where,
    )


def _pick_pool(kind: str, pool_name: str | None, pools: list[Pool], text: str, where: str) -> Pool:
    if kind == "cpu":
        matches = [p for p in pools if not p.is_gpu]
        what = "CPU pool"
    else:
        matches = [p for p in pools if p.gpu_model == kind]
        what = f"pool of {kind} GPUs"
    if pool_name is not None:
        matches = [p for p in matches if p.name == pool_name]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        # each form once (a pool stored before GPU model "cpu" was refused offers no second
        # cpu:N), and cpu:N only where a CPU pool serves it
        models = sorted({p.gpu_model for p in pools if p.gpu_model and p.gpu_model != "cpu"})
        cpu = ["cpu:N"] if any(not p.is_gpu for p in pools) else []
        forms = cpu + [f"{m}:N" for m in models]
        offered = ", ".join(forms) or "none"
        if kind != "cpu" and kind not in models and ":" not in text:
            raise _not_a_profile(kind, pool_name, models, offered, text, where)
        raise InvalidInput(
            f"no {what}{' named ' + pool_name if pool_name else ''} serves profile {text!r}",
            fix=f"requests offered here: {offered} (see `tp profiles` and `tp fleet ls`)",
            field=where,
        )
    names = ", ".join(sorted(p.name for p in matches))
    raise InvalidInput(
        f"profile {text!r} matches several pools: {names}",
        fix=f"name the pool, e.g. {matches[0].name}/{text}",
        field=where,
    )


def _not_a_profile(
    kind: str, pool_name: str | None, models: list[str], offered: str, text: str, where: str
) -> InvalidInput:
    """``cpu1`` (or ``h2008``) is no profile, no CPU request and no GPU model: suggest the
    request it resembles (``cpu:1``)."""
    fix = f"requests offered here: {offered} (see `tp profiles` and `tp fleet ls`)"
    for known in ("cpu", *models):
        count = kind[len(known) :]
        if kind.startswith(known) and count and _COUNT.fullmatch(count):
            prefix = f"{pool_name}/" if pool_name else ""
            fix = f"did you mean {prefix}{known}:{count}? ({fix})"
            break
    return InvalidInput(
        f"profile {text!r} is not a profile name, a CPU request (cpu:N) or a GPU model of any"
        " pool here",
        fix=fix,
        field=where,
    )


_COUNT = re.compile(r"[0-9]+(\.[0-9]+)?")


def envelope_gpus(roles: Iterable[RoleSpec]) -> int:
    return sum(r.gpus for r in roles)


def fits_pool(role: RoleSpec, pool: Pool, nodes: int) -> str | None:
    """Why ``role`` can never fit in ``pool`` of ``nodes`` nodes (None when it can)."""
    r = role.resources
    if r.gpus > pool.gpus_per_node or r.cpus > pool.cpus_per_node + 1e-9:
        return f"a member of role {role.name} is larger than a node of pool {pool.name}"
    per_node = (
        pool.gpus_per_node // r.gpus if r.gpus else math.floor(pool.cpus_per_node / r.cpus + 1e-9)
    )
    if role.members > nodes * max(per_node, 0):
        return (
            f"role {role.name} needs {role.describe()}; pool {pool.name} has only {nodes} "
            f"node{'s' if nodes != 1 else ''}"
        )
    return None
