"""Scenario files of the simulator: their schema, and loading them with errors that name the
file and the key (`tp sim`; docs/simulator.md)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from adapters.sim import (
    CrashPoint,
)
from adapters.sim.faults import CRASH_KINDS
from domain.documents import toml_loads
from domain.errors import InvalidInput
from domain.fleet import Pool, Queue
from domain.requests import Profile, resolve_roles
from domain.retry import RetryPolicy

FAULT_KINDS = (
    "crash",
    "disconnect",
    "reconnect",
    "declare-lost",
    "cancel",
    "refuse",
    "unavailable",
)
MAX_STEPS = 1_000_000


# -- scenario -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolSpec:
    pool: Pool
    nodes: int

    def node_names(self) -> list[str]:
        return [f"{self.pool.name}-{i}" for i in range(self.nodes)]


@dataclass(frozen=True, slots=True)
class Shape:
    profiles: tuple[str, ...]
    weight: int = 1
    queue: str | None = None  # None: a seeded choice among the scenario's queues
    duration: tuple[float, float] = (60.0, 600.0)  # seconds, seeded uniform
    fail: float = 0.0  # probability that one member exits non-zero
    retry: RetryPolicy | None = None  # its jobs' [retry] (docs/lifecycles.md#retries)


@dataclass(frozen=True, slots=True)
class Workload:
    jobs: int
    arrival_steps: int = 1  # arrivals spread over steps 1..arrival_steps (seeded)
    shapes: tuple[Shape, ...] = ()


@dataclass(frozen=True, slots=True)
class RandomFaults:
    crash: float = 0.0  # per step: the coordinator crashes at a seeded point of its tick
    disconnect: float = 0.0  # per step: a seeded connected node loses control contact
    outage_steps: tuple[int, int] = (1, 5)  # how long it stays out of contact
    declare_lost: float = 0.0  # probability an outage ends in "declared lost", not a reconnect
    refuse: float = 0.0  # per new launch: the backend refuses it (InvalidInput)
    unavailable: float = 0.0  # per new launch: the backend answers Unavailable (retry later)
    cancel: float = 0.0  # per step: the owner cancels a seeded unfinished job


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    step: int
    kind: str  # one of FAULT_KINDS
    node: str | None = None
    job: int | None = None  # the n-th arrival (1-based), for "cancel"
    point: CrashPoint | None = None  # for "crash"; None: a seeded point
    count: int = 1  # for "refuse" and "unavailable": the next ``count`` new launches


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    pools: tuple[PoolSpec, ...]
    queues: tuple[Queue, ...]
    workload: Workload
    steps: int = 200
    step_seconds: float = 30.0
    profiles: tuple[Profile, ...] = ()
    faults: RandomFaults = RandomFaults()
    scheduled: tuple[ScheduledFault, ...] = ()
    snapshot_limit: int = 20_000
    batch: int = 100

    @property
    def nodes(self) -> list[str]:
        return [n for p in self.pools for n in p.node_names()]


T = TypeVar("T")
_MISSING: Any = object()


def _retry(t: _Table) -> RetryPolicy | None:
    """A shape's ``retry = { max_attempts = 3, backoff_seconds = 10 }``, as in experiment.toml."""
    table = t.get("retry", dict, None)
    if table is None:
        return None
    try:
        return RetryPolicy.parse(table)
    except InvalidInput as exc:
        raise t.error(t.path(exc.field or "retry"), exc.message, exc.fix or "") from None


class _Table:
    """Reads one TOML table, naming the offending key (``workload.shapes[2].fail``) in every
    error, and refusing keys it does not know."""

    def __init__(self, data: Any, where: str, source: str) -> None:
        self.where = where
        self.source = source
        if not isinstance(data, dict):
            raise self.error(where, f"must be a table, not {_show(data)}", "write it as a table")
        self.data: dict[str, Any] = data
        self.used: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def error(self, path: str, problem: str, fix: str) -> InvalidInput:
        return InvalidInput(f"{self.source}: {path} {problem}", fix=fix, field=path)

    def get(self, key: str, kind: type[T], default: T = _MISSING, what: str = "") -> T:
        self.used.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise self.error(self.path(key), "is missing", f"add {key} = {what or '…'}")
            return default
        value = self.data[key]
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            name = {
                int: "an integer",
                float: "a number",
                str: "a string",
                bool: "true or false",
                list: "an array",
                dict: "a table",
            }.get(kind, kind.__name__)
            fix = f"write {key} = {what}" if what else f"give {key} as {name}"
            raise self.error(self.path(key), f"must be {name}, not {_show(value)}", fix)
        return value  # type: ignore[no-any-return]

    def number(self, key: str, default: float, low: float, high: float) -> float:
        value = self.get(key, float, default, f"a number from {low:g} to {high:g}")
        if not low <= value <= high:
            raise self.error(self.path(key), f"is {value:g}", f"use {low:g} to {high:g}")
        return value

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.get(key, int, default, f"an integer from {low} to {high}")
        if not low <= value <= high:
            raise self.error(self.path(key), f"is {value}", f"use {low} to {high}")
        return value

    def optional_int(self, key: str, low: int) -> int | None:
        if key not in self.data:
            self.used.add(key)
            return None
        return self.integer(key, 0, low, 1 << 40)

    def pair(self, key: str, default: tuple[float, float], low: float) -> tuple[float, float]:
        value = self.get(key, list, list(default), f"[LOW, HIGH], e.g. {list(default)}")
        if (
            len(value) != 2
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
            or not low <= value[0] <= value[1]
        ):
            raise self.error(
                self.path(key),
                f"is {_show(value)}",
                f"write {key} = [LOW, HIGH] with {low:g} <= LOW <= HIGH",
            )
        return float(value[0]), float(value[1])

    def tables(self, key: str) -> list[_Table]:
        items = self.get(key, list, [], "[[…]] tables")
        return [_Table(item, f"{self.path(key)}[{i}]", self.source) for i, item in enumerate(items)]

    def table(self, key: str) -> _Table:
        return _Table(self.get(key, dict, {}), self.path(key), self.source)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            known = ", ".join(sorted(self.used))
            raise self.error(
                self.path(unknown[0]), "is not a known key", f"known keys here: {known}"
            )


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _checked(make: Callable[[], T], t: _Table) -> T:
    """Run a domain constructor/check, re-raising its InvalidInput with the TOML path."""
    try:
        return make()
    except InvalidInput as exc:
        key = exc.field or ""
        raise t.error(
            t.path(key) if key else t.where, f"is invalid: {exc.message}", exc.fix
        ) from None


def load_scenario(path: Path) -> Scenario:
    """Read and check a scenario file; an error names the file and the offending key."""
    try:
        data = toml_loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(
            f"scenario file {path} does not exist",
            fix="give an existing file, e.g. deploy/sim/small.toml",
            field="scenario",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"cannot read scenario file {path}: {exc}", fix="check the file", field="scenario"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(
            f"{path} is not valid TOML: {exc}", fix="fix the syntax", field="scenario"
        ) from None
    return parse_scenario(data, str(path))


def parse_scenario(data: dict[str, Any], source: str = "scenario") -> Scenario:
    top = _Table(data, "", source)
    name = top.get("name", str, "scenario", '"small"')
    steps = top.integer("steps", 200, 1, MAX_STEPS)
    step_seconds = top.number("step_seconds", 30.0, 0.001, 86_400.0)
    snapshot_limit = top.integer("snapshot_limit", 20_000, 1, 10_000_000)
    batch = top.integer("batch", 100, 1, 100_000)

    pools: list[PoolSpec] = []
    for t in top.tables("pools"):
        gpus = t.integer("gpus_per_node", 0, 0, 64)
        pool = Pool(
            name=t.get("name", str, what='"a"'),
            fleet=t.get("fleet", str, "sim", '"sim"'),
            backend=t.get("backend", str, "node", '"node"'),
            gpus_per_node=gpus,
            cpus_per_node=t.number("cpus_per_node", 96.0, 0.001, 100_000.0),
            memory_mb_per_node=t.integer("memory_mb_per_node", 1_048_576, 1, 1 << 40),
            gpu_model=t.get("gpu_model", str, "h200" if gpus else None, '"h200"'),
        )
        nodes = t.integer("nodes", 1, 0, 100_000)
        t.done()
        pools.append(PoolSpec(_checked(pool.check, t), nodes))
    if not pools:
        raise top.error("pools", "is missing", "add at least one [[pools]] table")
    _unique([p.pool.name for p in pools], "pools", "name", top)

    queues: list[Queue] = []
    for t in top.tables("queues"):
        q = Queue(
            name=t.get("name", str, what='"default"'),
            team=t.get("team", str, "sim", '"research"'),
            priority=t.integer("priority", 0, -1000, 1000),
            gpu_quota=t.optional_int("gpu_quota", 0),
            job_quota=t.optional_int("job_quota", 0),
        )
        t.done()
        queues.append(_checked(q.check, t))
    if not queues:
        queues.append(Queue("default", "sim"))
    _unique([q.name for q in queues], "queues", "name", top)

    profiles: list[Profile] = []
    for t in top.tables("profiles"):
        profiles.append(
            Profile(t.get("name", str, what='"big"'), t.get("request", str, what='"a/h200:16"'))
        )
        t.done()

    w = top.table("workload")
    shapes: list[Shape] = []
    pool_list = [p.pool for p in pools]
    for t in w.tables("shapes"):
        texts = t.get("profiles", list, what='["h200:8"]')
        if not texts or not all(isinstance(x, str) for x in texts):
            raise t.error(
                t.path("profiles"),
                f"is {_show(texts)}",
                'give one or more requests, e.g. ["h200:8"]',
            )
        queue = t.get("queue", str, None, '"default"')
        if queue is not None and queue not in {q.name for q in queues}:
            raise t.error(
                t.path("queue"),
                f"names no queue ({queue!r})",
                "use one of: " + ", ".join(q.name for q in queues),
            )
        try:
            resolve_roles(tuple(texts), pool_list, profiles)
        except InvalidInput as exc:
            raise t.error(
                t.path("profiles"), f"cannot be resolved: {exc.message}", exc.fix
            ) from None
        shapes.append(
            Shape(
                profiles=tuple(texts),
                weight=t.integer("weight", 1, 1, 1_000_000),
                queue=queue,
                duration=t.pair("duration", (60.0, 600.0), 0.0),
                fail=t.number("fail", 0.0, 0.0, 1.0),
                retry=_retry(t),
            )
        )
        t.done()
    workload = Workload(
        jobs=w.integer("jobs", 0, 0, 10_000_000),
        arrival_steps=w.integer("arrival_steps", 1, 1, MAX_STEPS),
        shapes=tuple(shapes),
    )
    if workload.jobs and not shapes:
        raise w.error(
            w.path("shapes"), "is missing", 'add [[workload.shapes]] with profiles = ["h200:8"]'
        )
    w.done()

    f = top.table("faults")
    low, high = f.pair("outage_steps", (1, 5), 1)
    faults = RandomFaults(
        crash=f.number("crash", 0.0, 0.0, 1.0),
        disconnect=f.number("disconnect", 0.0, 0.0, 1.0),
        outage_steps=(int(low), int(high)),
        declare_lost=f.number("declare_lost", 0.0, 0.0, 1.0),
        refuse=f.number("refuse", 0.0, 0.0, 1.0),
        unavailable=f.number("unavailable", 0.0, 0.0, 1.0),
        cancel=f.number("cancel", 0.0, 0.0, 1.0),
    )
    names = {n for p in pools for n in p.node_names()}
    scheduled = [_scheduled(t, names, workload.jobs, steps) for t in f.tables("at")]
    f.done()
    top.done()
    return Scenario(
        name=name,
        pools=tuple(pools),
        queues=tuple(queues),
        workload=workload,
        steps=steps,
        step_seconds=step_seconds,
        profiles=tuple(profiles),
        faults=faults,
        scheduled=tuple(sorted(scheduled, key=lambda s: s.step)),
        snapshot_limit=snapshot_limit,
        batch=batch,
    )


def _unique(names: list[str], key: str, sub: str, t: _Table) -> None:
    seen: set[str] = set()
    for i, n in enumerate(names):
        if n in seen:
            raise t.error(
                f"{key}[{i}].{sub}", f"repeats {n!r}", f"give each of {key} its own {sub}"
            )
        seen.add(n)


def _scheduled(t: _Table, nodes: set[str], jobs: int, steps: int) -> ScheduledFault:
    step = t.integer("step", 1, 1, steps)
    kind = t.get("kind", str, what='"crash"')
    if kind not in FAULT_KINDS:
        raise t.error(t.path("kind"), f"is {kind!r}", "use one of: " + ", ".join(FAULT_KINDS))
    node = job = point = None
    count = 1
    if kind in ("disconnect", "reconnect", "declare-lost"):
        node = t.get("node", str, what='"a-0"')
        if node not in nodes:
            raise t.error(
                t.path("node"), f"names no node ({node!r})", "nodes are named POOL-INDEX, e.g. a-0"
            )
    elif kind == "cancel":
        job = t.integer("job", 1, 1, max(jobs, 1))
    elif kind == "crash" and "point" in t.data:
        text = t.get("point", str)
        point = _crash_point(text)
        if point is None:
            raise t.error(
                t.path("point"),
                f"is {text!r}",
                'write "before-commit N", "after-commit N" or "after-launch N"',
            )
    elif kind in ("refuse", "unavailable"):
        count = t.integer("count", 1, 1, 1_000_000)
    t.done()
    return ScheduledFault(step, kind, node, job, point, count)


def _crash_point(text: str) -> CrashPoint | None:
    kind, _, n = text.strip().partition(" ")
    if kind not in CRASH_KINDS or not n.strip().isdigit() or int(n) < 1:
        return None
    return CrashPoint(kind, int(n))
