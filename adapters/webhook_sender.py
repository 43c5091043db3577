"""Sends webhook bodies over HTTP(S) with httpx (``domain.webhook_ports.WebhookSender``).

One connection pool per process; certificates are verified (the system's trust store, or
``SSL_CERT_FILE`` as OpenSSL reads it; httpx's bundle where the system has none); redirects
are not followed (a 3xx is a failed delivery, so a receiver cannot bounce the signed body
elsewhere); the answer's body is never read past 1 KiB."""

from __future__ import annotations

import random
import ssl
from collections.abc import Mapping
from datetime import timedelta

import httpx

from domain.webhooks import SendResult, one_line


def trust() -> ssl.SSLContext | bool:
    """The system's trust store (or SSL_CERT_FILE's); where it holds no CA, httpx's own
    (certifi's bundle)."""
    context = ssl.create_default_context()
    return context if context.cert_store_stats().get("x509_ca") else True


class HttpWebhookSender:
    def __init__(self, *, verify: ssl.SSLContext | bool | None = None) -> None:
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            verify=verify if verify is not None else trust(),
            trust_env=False,  # no proxy from the environment: the operator's URL is the target
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def send(
        self, url: str, headers: Mapping[str, str], body: bytes, within: timedelta
    ) -> SendResult:
        seconds = within.total_seconds()
        try:
            async with self._client.stream(
                "POST", url, headers=dict(headers), content=body, timeout=seconds
            ) as answer:
                status = answer.status_code
                text = ""
                if not 200 <= status < 300:
                    async for chunk in answer.aiter_bytes():
                        text = chunk[:1024].decode(errors="replace")
                        break
        except httpx.TimeoutException:
            return SendResult(None, f"no answer in {seconds:g} s")
        except httpx.HTTPError as exc:
            return SendResult(None, one_line(f"{type(exc).__name__}: {exc}") or type(exc).__name__)
        if 200 <= status < 300:
            return SendResult(status)
        return SendResult(status, one_line(f"HTTP {status}: {text}" if text else f"HTTP {status}"))


def jitter() -> float:
    """A number in [0, 1) that spreads retries apart (not a secret)."""
    return random.random()
