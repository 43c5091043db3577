"""An informer: one collection of the API server (a namespace's Jobs, Pods, …) kept in memory
from a list and then a watch, the way client-go's reflector does it
(docs/kubernetes.md#status-from-watches):

* list, remember the list's resourceVersion, watch from there (with bookmarks, so that quiet
  collections still advance it);
* when a watch ends (the server's timeout) or drops (network), watch again from the last
  resourceVersion seen: the server replays what happened meanwhile;
* on 410 Gone (that resourceVersion was compacted away) list again, and apply only the
  differences: objects whose resourceVersion changed, and objects that are gone.

An event is applied at most once: one whose object's resourceVersion is the one already held is
skipped, so a replay or a re-list never repeats a change, and a re-list never loses one.
``changes`` records what was applied (type, name, resourceVersion), for tests and diagnostics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import Any

from adapters.kubernetes.client import ApiError, Gone, Kube
from domain.errors import Unavailable

log = logging.getLogger("tuneplane.kubernetes")
Obj = dict[str, Any]


def _rv(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


class Informer:
    def __init__(self, kube: Kube, url: str, selector: str, watch_timeout: int = 300) -> None:
        self.kube = kube
        self.url = url
        self.selector = selector
        self.watch_timeout = watch_timeout
        self.items: dict[str, Obj] = {}
        self.rv: str | None = None  # None: list (again) before watching
        self.synced = asyncio.Event()
        self.tried = asyncio.Event()  # set after the first list, answered or not
        self.served = True  # False: the API server does not serve this resource (no CRD)
        self.error = ""  # why the last list or watch failed ("" after a success)
        self.changes: collections.deque[tuple[str, str, str]] = collections.deque(maxlen=10_000)
        self.changed = asyncio.Event()  # set on every applied change (tests wait on it)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"informer {self.url}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def wait_synced(self, seconds: float) -> None:
        """Return once a list is in. Until then raise Unavailable naming the last error: at once
        when a list was tried and failed (a supervisor tick must not stall on an unreachable
        server), else after waiting up to ``seconds`` for the first try."""
        if not self.tried.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self.tried.wait()
        if not self.synced.is_set():
            raise Unavailable(
                f"no state of {self.url} yet: {self.error or 'listing'}",
                fix="check that the API server is reachable; TunePlane retries",
            )

    async def run(self) -> None:
        pause = 0.05
        while True:
            try:
                if self.rv is None:
                    await self._relist()
                await self._watch()
                pause = 0.05
                self.error = ""
            except Gone as exc:
                log.info("watch of %s: %s; listing again", self.url, exc)
                self.rv = None
            except ApiError as exc:
                self.tried.set()
                self.error = str(exc)
                if exc.code == 404 and self.rv is None:  # no such resource: its CRD is absent
                    self.served = False
                    self.synced.set()
                    pause = 30.0
                log.warning("informer %s: %s", self.url, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)
            except Unavailable as exc:
                self.tried.set()
                self.error = exc.message
                log.warning("informer %s: %s", self.url, exc.message)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)
            except Exception as exc:  # a malformed answer: never let the informer die quietly
                self.tried.set()
                self.error = f"{type(exc).__name__}: {exc}"
                log.exception("informer %s failed; listing again", self.url)
                self.rv = None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)

    def _apply(self, kind: str, obj: Obj) -> None:
        name = _name(obj)
        held = self.items.get(name)
        if kind == "DELETED":
            if held is None:
                return
            del self.items[name]
        else:
            if held is not None and _rv(held) == _rv(obj):
                return  # already applied (a replay): never twice
            self.items[name] = obj
            kind = "ADDED" if held is None else "MODIFIED"
        self.changes.append((kind, name, _rv(obj)))
        self.changed.set()

    async def _relist(self) -> None:
        query = [("labelSelector", self.selector)] if self.selector else []
        body = await self.kube.request("GET", self.url, query=query)
        listed = {_name(o): o for o in body.get("items") or []}
        for name, held in list(self.items.items()):
            if name not in listed:
                self._apply("DELETED", held)
        for obj in listed.values():
            self._apply("MODIFIED", obj)
        self.rv = str(body.get("metadata", {}).get("resourceVersion", ""))
        self.served = True
        self.synced.set()
        self.tried.set()

    async def _watch(self) -> None:
        assert self.rv is not None
        async for event in self.kube.watch(self.url, self.selector, self.rv, self.watch_timeout):
            obj = event["object"]
            if event["type"] == "BOOKMARK":
                self.rv = _rv(obj) or self.rv
                continue
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(event["type"], obj)
                self.rv = _rv(obj) or self.rv
