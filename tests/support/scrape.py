"""Reading a live process's ``/metrics``: the samples by name and labels."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support import http

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str, headers: dict[str, str] | None = None) -> tuple[str, Samples]:
    """The exposition at ``url`` (raises unless 200 in Prometheus' text format) and its
    samples."""
    answer = http.get(url, headers=headers or {}, timeout=10)
    assert answer.status_code == 200, (url, answer.status_code, answer.text[:500])
    assert answer.headers["content-type"].startswith("text/plain"), answer.headers
    samples: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return answer.text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def wait_for(
    url: str, ready: Callable[[Samples], bool], timeout: float = 60
) -> tuple[str, Samples]:
    """Scrape ``url`` until ``ready`` holds (a condition, not a sleep); the last scrape."""
    deadline = time.monotonic() + timeout
    text = ""
    while True:
        try:
            text, samples = scrape(url)
        except httpx.TransportError as exc:  # not listening yet
            text = str(exc)
        else:
            if ready(samples):
                return text, samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{url}: condition not met in {timeout} s:\n{text[-3000:]}")
        time.sleep(0.2)
