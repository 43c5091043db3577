"""The proxies the environment names for the CLI's HTTP client (``client.py``), read as curl
reads them: ``HTTP_PROXY`` for an ``http://`` server, ``HTTPS_PROXY`` for an ``https://`` one,
``ALL_PROXY`` for either, ``NO_PROXY`` for the hosts reached directly (docs/cli.md).

Imported only when one of the proxy variables is set, so that the common case costs nothing.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import socket
import ssl
import urllib.request
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from domain.errors import InvalidInput


@dataclass(frozen=True)
class Proxy:
    """An ``http://`` proxy: where it listens, and its credentials' header (if its URL had any)."""

    host: str
    port: int
    headers: dict[str, str]

    @property
    def url(self) -> str:
        """The proxy as messages show it: never its credentials."""
        return f"http://{_bracketed(self.host)}:{self.port}"


def proxy_for(scheme: str, host: str, port: int) -> Proxy | None:
    """The proxy the environment names for a server, None for none (or one ``NO_PROXY``
    names); InvalidInput, naming the variable's fix, for a proxy URL this client cannot use."""
    proxies = urllib.request.getproxies_environment()  # the variables, either case
    found = proxies.get(scheme) or proxies.get("all")
    if not found or bypassed(host, port, proxies.get("no", "")):
        return None
    url = urlsplit(found if "://" in found else f"http://{found}")
    fix = "name an http://HOST:PORT proxy in HTTP_PROXY/HTTPS_PROXY, or the server in NO_PROXY"
    try:
        proxy_port = url.port or 80
    except ValueError:  # a port that is not a number, or out of range
        raise InvalidInput(f"the proxy {url.hostname or ''} has no valid port", fix=fix) from None
    if url.scheme.lower() != "http" or not url.hostname:
        shown = f"{url.scheme}://{url.hostname or ''}"
        raise InvalidInput(f"the proxy {shown} is not an http:// proxy", fix=fix)
    headers = {}
    if url.username is not None:
        pair = f"{unquote(url.username)}:{unquote(url.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    return Proxy(url.hostname, proxy_port, headers)


def bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` names the server, as curl reads it: a comma-separated list of host
    names (each also matching its subdomains; a leading ``.`` or ``*.`` the same), IP addresses
    (IPv6 with or without brackets) or networks (``10.0.0.0/8``), each optionally with a
    ``:port``; ``*`` anywhere in the list for every host."""
    host = host.lower().rstrip(".")
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        name, entry_port = _host_port(entry)
        if not name or (entry_port is not None and entry_port != port):
            continue
        if _matches(host, name):
            return True
    return False


def _host_port(entry: str) -> tuple[str, int | None]:
    """An entry's host (no brackets, no leading ``*.`` or ``.``) and its port, if it has one."""
    if entry.startswith("["):  # [::1] or [::1]:8470
        name, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:  # host:port (a bare IPv6 address has more colons)
        name, _, port = entry.partition(":")
    else:
        name, port = entry, ""
    name = name.removeprefix("*").removeprefix(".").rstrip(".")
    return name, int(port) if port.isdigit() else None


def _matches(host: str, name: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == name or host.endswith("." + name)  # a name and its subdomains
    try:
        return address in ipaddress.ip_network(name, strict=False)  # an address or a network
    except ValueError:
        return False  # a name never matches an address


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class TunnelConnection(http.client.HTTPSConnection):
    """HTTPS to the server through an http:// proxy's ``CONNECT`` tunnel, TLS end to end.

    Not ``set_tunnel``: Python 3.11 writes an IPv6 server into ``CONNECT`` without brackets,
    which proxies refuse or misread. The server's name (``host``, its IDNA form) is what the
    request's ``Host`` header and the certificate check use, as without a proxy."""

    def __init__(
        self, proxy: Proxy, host: str, port: int, timeout: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.proxy = proxy
        self._tls = context

    def connect(self) -> None:
        sock = socket.create_connection((self.proxy.host, self.proxy.port), self.timeout)
        try:
            target = f"{_bracketed(self.host)}:{self.port}"
            lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
            lines += [f"{k}: {v}" for k, v in self.proxy.headers.items()]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
            answer = http.client.HTTPResponse(sock, method="CONNECT")
            answer.begin()  # the status and headers; the proxy sends nothing more until TLS
            if answer.status != 200:
                raise OSError(f"the proxy refused the tunnel: {answer.status} {answer.reason}")
            answer.close()  # its reader only: the socket stays open
            self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
