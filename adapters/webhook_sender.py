"""Sends webhook bodies over HTTP(S) with httpx (``domain.webhook_ports.WebhookSender``).

One connection pool per process; certificates are verified (the system's trust store, or
``SSL_CERT_FILE`` as OpenSSL reads it; httpx's bundle where the system has none); redirects
are not followed (a 3xx is a failed delivery, so a receiver cannot bounce the signed body
elsewhere); the answer's body is never read past 1 KiB.

Where it connects (docs/notifications.md#where-webhooks-may-go): each send resolves the URL's
host (bounded by the send's time), refuses it without connecting if ANY of its addresses is
one the destination policy refuses, and then connects to the address it checked, not to the
name: the request goes to the IP URL with the name in the ``Host`` header and, over https, in
the TLS SNI (httpcore's ``sni_hostname`` extension), which is also the name the certificate is
verified against. No second resolution happens, so DNS that answers differently a moment later
(rebinding) cannot move the delivery. Where the name has several addresses and one cannot be
connected to (refused, no route: not a TLS failure), the next is tried, in the resolver's
order, within the same time. Connections are not kept alive: a pooled connection is
keyed by the IP, and reusing one verified for another name at that IP would skip the check of
this name's certificate."""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta

import httpx

from domain.webhook_destinations import Destinations, ip_literal
from domain.webhooks import SendResult, one_line

Resolver = Callable[[str], Awaitable[Sequence[str]]]  # a host name → its addresses


async def system_resolver(host: str) -> Sequence[str]:
    """The host's addresses as the system resolves them (getaddrinfo: /etc/hosts, DNS …)."""
    found = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def trust() -> ssl.SSLContext | bool:
    """The system's trust store (or SSL_CERT_FILE's); where it holds no CA, httpx's own
    (certifi's bundle)."""
    context = ssl.create_default_context()
    return context if context.cert_store_stats().get("x509_ca") else True


class HttpWebhookSender:
    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool | None = None,
        destinations: Destinations | None = None,
        resolve: Resolver = system_resolver,
    ) -> None:
        self._destinations = destinations if destinations is not None else Destinations()
        self._resolve = resolve
        self._verify = verify
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        """The HTTP client, made at the first delivery: loading the trust store and making
        the client take about 0.1 s of a core, which every API process's start paid for
        nothing when no webhook was ever sent."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                verify=self._verify if self._verify is not None else trust(),
                trust_env=False,  # no proxy from the environment: the operator's URL is the target
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=0),
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def send(
        self, url: str, headers: Mapping[str, str], body: bytes, within: timedelta
    ) -> SendResult:
        seconds = within.total_seconds()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        try:
            target = httpx.URL(url)
        except httpx.InvalidURL as exc:
            return SendResult(None, one_line(f"the URL cannot be parsed: {exc}"))
        host = target.raw_host.decode("ascii")  # an IDN in its xn-- form, as check_url wants
        checked = await self._addresses(host, seconds)
        if isinstance(checked, SendResult):
            return checked
        sent = {**headers, "Host": target.netloc.decode("ascii")}
        extensions = {"sni_hostname": host} if target.scheme == "https" else {}
        for n, address in enumerate(checked):
            left = max(deadline - loop.time(), 0.001)
            try:
                return await self._post(target.copy_with(host=address), sent, body, left,
                                         extensions)  # fmt: skip
            except httpx.ConnectError as exc:
                if n + 1 == len(checked) or not _unreachable(exc):
                    return SendResult(None, one_line(f"ConnectError: {exc}"))
            except httpx.TimeoutException:
                return SendResult(None, f"no answer in {seconds:g} s")
            except httpx.HTTPError as exc:
                return SendResult(None, one_line(f"{type(exc).__name__}: {exc}"))
        raise AssertionError("unreachable: the last address returns")  # pragma: no cover

    async def _post(
        self, url: httpx.URL, headers: dict[str, str], body: bytes, seconds: float,
        extensions: dict[str, str],
    ) -> SendResult:  # fmt: skip
        async with self._http().stream(
            "POST", url, headers=headers, content=body, timeout=seconds, extensions=extensions
        ) as answer:
            status = answer.status_code
            text = ""
            if not 200 <= status < 300:
                async for chunk in answer.aiter_bytes():
                    text = chunk[:1024].decode(errors="replace")
                    break
        if 200 <= status < 300:
            return SendResult(status)
        return SendResult(status, one_line(f"HTTP {status}: {text}" if text else f"HTTP {status}"))

    async def _addresses(self, host: str, seconds: float) -> list[str] | SendResult:
        """The checked addresses to connect to, in the resolver's order, or the failed result
        that says why there are none."""
        literal = ip_literal(host)
        if literal is not None:
            addresses: Sequence[str] = [str(literal)]
        else:
            try:
                async with asyncio.timeout(seconds):
                    addresses = await self._resolve(host)
            except TimeoutError:
                return SendResult(None, f"{host} did not resolve in {seconds:g} s")
            except OSError as exc:
                return SendResult(None, one_line(f"{host} does not resolve: {exc}"))
            if not addresses:
                return SendResult(None, f"{host} resolves to no address")
        try:
            refused = self._destinations.refusal(addresses)
        except ValueError as exc:
            return SendResult(None, one_line(f"{host} resolved to a non-address: {exc}"))
        if refused is None:
            return list(dict.fromkeys(str(self._destinations.judge(a).address) for a in addresses))
        if literal is not None:
            return SendResult(None, one_line(f"refused: {host} is {refused.why}"))
        return SendResult(
            None, one_line(f"refused: {host} resolves to {refused.address}, {refused.why}")
        )


def _unreachable(exc: BaseException) -> bool:
    """The connection itself failed (refused, no route), not TLS: the next address may do."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return False
        if isinstance(cause, OSError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def jitter() -> float:
    """A number in [0, 1) that spreads retries apart (not a secret)."""
    return random.random()
