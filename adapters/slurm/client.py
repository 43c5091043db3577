"""slurmrestd over HTTP (httpx): submit, look up, cancel, list nodes and partitions, and read
accounting. Answers are turned into TunePlane's Slurm types by the version layer
(:mod:`adapters.slurm.versions`), chosen by configuration or discovered from ``/openapi/v3``.

Auth (docs/slurm.md, "Auth"): ``rest_auth/local`` over a unix socket (the socket's peer is the
Slurm user; no header), or JWT: ``X-SLURM-USER-TOKEN`` (and ``X-SLURM-USER-NAME`` when given),
for sites whose slurmctld has ``AuthAltTypes=auth/jwt``.

Errors: slurmrestd unreachable, timing out or answering 5xx without a Slurm error → Unavailable
(retry later; nothing is assumed). So is an answer TunePlane cannot read (not a JSON object, a
record without its fields, a job record about another job than the one asked for): a proxy's
page or a server's bug proves nothing about a job, and never stops the supervisor. A Slurm
error in ``errors`` is the truth only together with the status: a submission with a ``job_id``
created a job even when ``errors`` is not empty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from adapters.slurm.versions import (
    INVALID_JOB_ID,
    SUPPORTED,
    Dialect,
    JobRequest,
    SlurmJob,
    SlurmNode,
    SlurmPartition,
    SubmitResult,
    choose,
    dialect,
    errors_of,
)
from domain.errors import InvalidInput, Unavailable

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class SlurmEndpoint:
    """Where slurmrestd listens and how to authenticate."""

    url: str  # unix:/path/to/slurmrestd.sock, or http(s)://host:port
    version: str = "auto"  # auto: the newest supported version the server serves
    user: str | None = None  # X-SLURM-USER-NAME (JWT)
    token: str | None = None  # X-SLURM-USER-TOKEN (JWT); None: rest_auth/local on the socket
    timeout: float = 10.0

    def check(self) -> SlurmEndpoint:
        if not (self.url.startswith("unix:") or self.url.startswith(("http://", "https://"))):
            raise InvalidInput(
                f"slurmrestd address {self.url!r} is neither unix:PATH nor http(s)://HOST:PORT",
                fix="set TUNEPLANE_SLURM_URL to unix:/run/slurmrestd.sock or http://host:6820",
                field="TUNEPLANE_SLURM_URL",
            )
        if self.version != "auto" and self.version not in SUPPORTED:
            raise InvalidInput(
                f"Slurm REST API version {self.version!r} is not supported",
                fix=f"set TUNEPLANE_SLURM_API_VERSION to auto or one of {', '.join(SUPPORTED)}",
                field="TUNEPLANE_SLURM_API_VERSION",
            )
        return self


class SlurmClient:
    def __init__(self, endpoint: SlurmEndpoint) -> None:
        self.endpoint = endpoint.check()
        self._dialect: Dialect | None = (
            None if endpoint.version == "auto" else dialect(endpoint.version)
        )
        headers = {}
        if endpoint.token:
            headers["X-SLURM-USER-TOKEN"] = endpoint.token
            if endpoint.user:
                headers["X-SLURM-USER-NAME"] = endpoint.user
        if endpoint.url.startswith("unix:"):
            transport = httpx.AsyncHTTPTransport(uds=endpoint.url.removeprefix("unix:"))
            base = "http://slurmrestd"
        else:
            transport, base = httpx.AsyncHTTPTransport(), endpoint.url.rstrip("/")
        self._http = httpx.AsyncClient(
            transport=transport, base_url=base, headers=headers, timeout=endpoint.timeout
        )

    async def close(self) -> None:
        await self._http.aclose()

    # -- plumbing -------------------------------------------------------------------------------

    async def _call(
        self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        try:
            resp = await self._http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"slurmrestd at {self.endpoint.url} cannot be reached ({type(exc).__name__}:"
                f" {exc or 'no answer'}); jobs stay queued until it answers"
            ) from None
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):  # a list, a string, a number: not a Slurm answer
            data = None
        if data is None and resp.status_code == 404:
            return 404, {}  # a path this server does not serve (accounting not configured)
        if resp.status_code in (401, 403):
            raise Unavailable(
                f"slurmrestd at {self.endpoint.url} refused our credentials"
                f" (HTTP {resp.status_code}); check TUNEPLANE_SLURM_TOKEN / the socket's user"
            )
        if data is None or (resp.status_code >= 500 and not errors_of(data)):
            raise Unavailable(
                f"slurmrestd at {self.endpoint.url} answered {method} {path} with HTTP"
                f" {resp.status_code} and no usable body"
            )
        return resp.status_code, data

    async def dialect(self) -> Dialect:
        """The configured version's dialect, or the newest supported one the server serves."""
        if self._dialect is None:
            found = None
            for doc in ("/openapi/v3", "/openapi"):
                try:
                    status, spec = await self._call("GET", doc)
                except Unavailable:
                    if doc == "/openapi":
                        raise
                    continue
                if status == 200 and isinstance(spec, dict):
                    found = choose(list(spec.get("paths") or {}))
                    if found:
                        break
            if found is None:
                raise Unavailable(
                    f"slurmrestd at {self.endpoint.url} serves none of the Slurm REST API"
                    f" versions TunePlane speaks ({', '.join(SUPPORTED)}); start it with"
                    " -s openapi/v0.0.38 (Slurm 22.05) or a current release's openapi/slurmctld"
                )
            self._dialect = dialect(found)
        return self._dialect

    async def _get(self, path: str) -> tuple[int, Any, Dialect]:
        d = await self.dialect()
        status, body = await self._call("GET", f"{d.prefix}/{path}")
        return status, body, d

    def _records(self, what: str, body: Any, key: str, read: Callable[[Any], R]) -> list[R]:
        """``body[key]`` read record by record; Unavailable, naming what could not be read,
        for anything else (nothing is assumed from an answer TunePlane cannot read)."""
        items = body.get(key) or []
        try:
            if not isinstance(items, list):
                raise TypeError(f"{key!r} is {type(items).__name__}, not a list")
            return [read(item) for item in items]
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise Unavailable(
                f"slurmrestd at {self.endpoint.url} answered {what} with a record TunePlane"
                f" cannot read ({type(exc).__name__}: {exc}); nothing is assumed from it"
            ) from None

    def _about(self, job_id: int, jobs: list[SlurmJob], what: str) -> list[SlurmJob] | None:
        """The components of ``job_id`` in an answer about it; Unavailable when the answer
        holds records but none of that job (another job's end is no proof of this one's)."""
        mine = [j for j in jobs if job_id in (j.job_id, j.het_job_id)]
        if jobs and not mine:
            others = ", ".join(sorted({str(j.job_id) for j in jobs})[:5])
            raise Unavailable(
                f"slurmrestd at {self.endpoint.url} answered {what} with job {others}, not"
                f" {job_id}; nothing is assumed from it"
            )
        return mine or None

    def _failed(self, what: str, body: Any) -> Unavailable:
        errs = "; ".join(str(e) for e in errors_of(body)) or "no error given"
        return Unavailable(f"Slurm could not {what}: {errs}")

    # -- the API --------------------------------------------------------------------------------

    async def ping(self) -> None:
        status, body, _ = await self._get("ping")
        if status != 200:
            raise self._failed("answer ping", body)

    async def submit(self, script: str, parts: Sequence[JobRequest]) -> SubmitResult:
        """Submit a batch job (several parts: a heterogeneous job). A ``job_id`` in the answer
        is a job that exists, whatever ``errors`` says (a held job answers with both). No
        ``job_id``: refused (the errors say why) or, when an error is transient, Unavailable."""
        d = await self.dialect()
        _, body = await self._call("POST", f"{d.prefix}/job/submit", d.submit_body(script, parts))
        result = d.submitted(body)
        if result.job_id is None and (not result.errors or any(e.transient for e in result.errors)):
            raise self._failed("take the job", body)  # not a refusal: try again later
        return result

    async def job(self, job_id: int) -> list[SlurmJob] | None:
        """The job's components (one, or each of a heterogeneous job); None if Slurm does not
        know it (never submitted, or forgotten after MinJobAge)."""
        status, body, d = await self._get(f"job/{job_id}")
        if any(e.code == INVALID_JOB_ID for e in errors_of(body)):
            return None
        if status != 200:
            raise self._failed(f"report job {job_id}", body)
        what = f"job {job_id}"
        return self._about(job_id, self._records(what, body, "jobs", d.job), what)

    async def jobs(self) -> list[SlurmJob]:
        status, body, d = await self._get("jobs")
        if status != 200:
            raise self._failed("list its jobs", body)
        return self._records("its jobs", body, "jobs", d.job)

    async def cancel(self, job_id: int, signal: str | None = None) -> bool:
        """Cancel (or signal) the job; False when Slurm does not know it."""
        d = await self.dialect()
        params = {"signal": signal} if signal else None
        status, body = await self._call("DELETE", f"{d.prefix}/job/{job_id}", params=params)
        errors = errors_of(body)
        if any(e.code == INVALID_JOB_ID for e in errors):
            return False
        if status != 200:
            raise self._failed(f"cancel job {job_id}", body)
        return True

    async def nodes(self) -> list[SlurmNode]:
        status, body, d = await self._get("nodes")
        if status != 200:
            raise self._failed("list its nodes", body)
        return self._records("its nodes", body, "nodes", d.node)

    async def partitions(self) -> list[SlurmPartition]:
        status, body, d = await self._get("partitions")
        if status != 200:
            raise self._failed("list its partitions", body)
        return self._records("its partitions", body, "partitions", d.partition)

    async def accounted(self, job_id: int) -> list[SlurmJob] | None:
        """The job as accounting (slurmdbd) recorded it; None when it has no record."""
        d = await self.dialect()
        path = f"/slurmdb/{d.version}/job/{job_id}"
        status, body = await self._call("GET", path)
        if status == 404 or (status != 200 and not body.get("jobs")):
            if status in (404, 500) or any(e.code == INVALID_JOB_ID for e in errors_of(body)):
                return None
            raise self._failed(f"report job {job_id} from accounting", body)
        what = f"job {job_id} from accounting"
        return self._about(job_id, self._records(what, body, "jobs", d.accounted), what)
