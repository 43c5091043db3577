"""One HTTP client for the tests' own requests (polls above all).

`httpx.get` and `httpx.request` make a client per call, and a client makes an SSL context (the
CA bundle read and parsed) even for plain HTTP: about 38 ms of CPU a call, against 0.3 ms
through one client. Polled every 0.1-0.2 s while servers start and nodes connect, that was
minutes of CPU over a full run, taken from the processes under test on a 2-core machine. No
keep-alive: every request opens its own connection, as before, so a server the test killed
and started again is never reached through a stale one. httpx's Client is safe to share
between threads (tests poll from `asyncio.to_thread`).
"""

from __future__ import annotations

from typing import Any

import httpx

CLIENT = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0), timeout=30)


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    return CLIENT.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return CLIENT.request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return CLIENT.request("POST", url, **kwargs)
