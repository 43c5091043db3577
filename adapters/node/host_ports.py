"""The node's host network, as every executor sees it: members run with the host's network (a
gang's members on different machines reach member 0's rendezvous port), so whether a port is
free is asked of the host itself."""

from __future__ import annotations

import contextlib
import errno
import socket


def port_free(port: int) -> bool:
    """Can a TCP port be bound on this host (all addresses)? Ports in TIME_WAIT count as free,
    as they do for a listener that sets SO_REUSEADDR (torch's TCPStore does)."""
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((addr, port))
            except OSError as exc:
                if family == socket.AF_INET6 and exc.errno == errno.EADDRNOTAVAIL:
                    continue
                return False
    return True
