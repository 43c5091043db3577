"""A measured window's share of a process's Prometheus histograms (for the benchmarks).

The benchmark reads the gateway's metrics port at the start and at the end of its window; the
difference of two scrapes is what the window observed. Quantiles are read from the buckets as
Prometheus' ``histogram_quantile`` does (linear inside a bucket), so they are only as fine as
the buckets; the largest observation is known only as the bound of its bucket ("≤ 0.25").
"""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass, field

LINE = re.compile(r"^(?P<name>[a-z_:]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')

Key = tuple[str, tuple[tuple[str, str], ...]]  # histogram name, its labels but ``le``


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound → cumulative count
    total: float = 0.0  # the observations' sum
    count: float = 0.0

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None:
            return self
        return Histogram(
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.total - before.total,
            self.count - before.count,
        )

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0 with no observation; the last finite bound past it)."""
        if self.count <= 0:
            return 0.0
        rank = q * self.count
        lower, below = 0.0, 0.0
        bounds = sorted(self.buckets)
        for le in bounds:
            n = self.buckets[le]
            if n >= rank:
                if le == float("inf"):
                    return lower
                return lower + (le - lower) * (rank - below) / max(n - below, 1e-12)
            lower, below = le, n
        return lower

    def largest(self) -> float:
        """The upper bound of the bucket that holds the largest observation (inf: past them)."""
        for le in sorted(self.buckets):
            if self.buckets[le] >= self.count:
                return le
        return float("inf")

    def over(self, bound: float) -> float:
        """Observations above ``bound`` (one of the bucket bounds)."""
        return self.count - self.buckets.get(bound, 0.0)


def parse(text: str) -> dict[Key, Histogram]:
    """Every histogram in a scrape, by name and labels."""
    found: dict[Key, Histogram] = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        name, value = m["name"], float(m["value"])
        labels = dict(LABEL.findall(m["labels"] or ""))
        le = labels.pop("le", None)
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix):
                key = (name[: -len(suffix)], tuple(sorted(labels.items())))
                h = found.setdefault(key, Histogram())
                if suffix == "_bucket" and le is not None:
                    h.buckets[float(le)] = value
                elif suffix == "_sum":
                    h.total = value
                elif suffix == "_count":
                    h.count = value
    return found


def scrape(port: int, host: str = "127.0.0.1") -> dict[Key, Histogram]:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as r:
        return parse(r.read().decode())


def window(before: dict[Key, Histogram], after: dict[Key, Histogram]) -> dict[Key, Histogram]:
    return {k: h.minus(before.get(k)) for k, h in after.items() if h.buckets}


def summary(h: Histogram, seconds: float) -> dict[str, float]:
    """p50, p99 and the largest observation's bucket (ms), how many, and the seconds a second
    they add up to (for pauses: the share of the time stopped)."""
    return {
        "p50_ms": 1000 * h.quantile(0.5),
        "p99_ms": 1000 * h.quantile(0.99),
        "max_le_ms": 1000 * h.largest(),
        "n": h.count,
        "over_50ms": h.over(0.05),
        "over_100ms": h.over(0.1),
        "ms_per_s": 1000 * h.total / seconds,
    }
