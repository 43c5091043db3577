"""The ids a log line carries where known (docs/operations.md#logs): the API request, the job,
its attempt (number), the member (index) and the node. Bound at a few chokepoints (the API's
request layer, the supervisor per job, the node daemon per member order, the collector per
member) with ``bound``; every log line written meanwhile, in this task and the tasks it starts,
carries them (the processes' log set-up reads ``current``). Standard library only: contextvars.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

FIELDS = ("request_id", "job_id", "attempt", "member", "node")

_VARS: dict[str, ContextVar[str | int | None]] = {
    name: ContextVar(f"tuneplane_log_{name}", default=None) for name in FIELDS
}


class bound:  # lower case: used as a function, ``with bound(job_id=...):``
    """Within the block, log lines carry the ids given (None: what was bound before stays).
    Not for use across an async generator's ``yield`` (a context variable is reset in the
    context that set it). A class rather than a generator: it is on every API request."""

    __slots__ = ("_given", "_tokens")

    def __init__(
        self,
        *,
        request_id: str | None = None,
        job_id: str | None = None,
        attempt: int | None = None,
        member: int | None = None,
        node: str | None = None,
    ) -> None:
        self._given = (
            ("request_id", request_id),
            ("job_id", job_id),
            ("attempt", attempt),
            ("member", member),
            ("node", node),
        )
        self._tokens: list[tuple[ContextVar[str | int | None], Token[str | int | None]]] = []

    def __enter__(self) -> None:
        for name, value in self._given:
            if value is not None:
                var = _VARS[name]
                self._tokens.append((var, var.set(value)))

    def __exit__(self, *exc: object) -> None:
        while self._tokens:
            var, token = self._tokens.pop()
            var.reset(token)


def bind_rest_of_task(*, node: str | None = None) -> None:
    """For the rest of this task and the tasks it starts from now on (never reset: a process's
    main task, or a task of its own such as a gRPC stream's handler): e.g. the node daemon's
    node name on every line it logs, a node control stream's node on the gateway's."""
    if node is not None:
        _VARS["node"].set(node)


def current() -> dict[str, str | int]:
    """The ids bound here now (those not known are left out)."""
    out: dict[str, str | int] = {}
    for name, var in _VARS.items():
        value = var.get()
        if value is not None:
            out[name] = value
    return out
