"""Where webhooks may go (docs/notifications.md#where-webhooks-may-go): the policy on the
addresses a webhook's host is, or resolves to when it is sent to.

Any member may subscribe a URL, so a URL must not make the control plane POST to its own host
(loopback), to the cloud's metadata service (link-local), nor to addresses that are no single
receiver (unspecified, multicast, broadcast, reserved); private networks are allowed unless
the operator refuses them. An IPv6 form that carries an IPv4 address (IPv4-mapped, NAT64,
6to4) is judged by that IPv4 address. Pure: the addresses come in as arguments."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Kind(StrEnum):
    PUBLIC = "public"
    PRIVATE = "private"  # allowed unless TUNEPLANE_WEBHOOK_PRIVATE=refuse
    LOOPBACK = "loopback"  # allowed only with TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK=on
    LINK_LOCAL = "link-local"  # always refused, as are the kinds below
    UNSPECIFIED = "unspecified"
    MULTICAST = "multicast"
    RESERVED = "reserved"


def _net(text: str) -> Network:
    return ipaddress.ip_network(text)


# Checked in order: the first that holds the address names its kind and range.
RANGES: tuple[tuple[Network, Kind, str], ...] = (
    (_net("0.0.0.0/8"), Kind.UNSPECIFIED, "unspecified, 'this network'"),
    (_net("::/128"), Kind.UNSPECIFIED, "unspecified"),
    (_net("127.0.0.0/8"), Kind.LOOPBACK, "this host's loopback"),
    (_net("::1/128"), Kind.LOOPBACK, "this host's loopback"),
    (
        _net("169.254.0.0/16"),
        Kind.LINK_LOCAL,
        "link-local, where the cloud metadata service 169.254.169.254 answers",
    ),
    (_net("fe80::/10"), Kind.LINK_LOCAL, "link-local"),
    (_net("224.0.0.0/4"), Kind.MULTICAST, "multicast"),
    (_net("ff00::/8"), Kind.MULTICAST, "multicast"),
    (_net("240.0.0.0/4"), Kind.RESERVED, "reserved, with the broadcast 255.255.255.255"),
    (_net("fec0::/10"), Kind.RESERVED, "deprecated site-local"),
    (_net("64:ff9b:1::/48"), Kind.PRIVATE, "local-use NAT64 (may reach any IPv4 network)"),
    (_net("::/8"), Kind.RESERVED, "reserved (IPv4-compatible IPv6, deprecated)"),
    (_net("100::/64"), Kind.RESERVED, "discard-only"),
    (_net("10.0.0.0/8"), Kind.PRIVATE, "a private network"),
    (_net("172.16.0.0/12"), Kind.PRIVATE, "a private network"),
    (_net("192.168.0.0/16"), Kind.PRIVATE, "a private network"),
    (_net("100.64.0.0/10"), Kind.PRIVATE, "shared address space (carrier-grade NAT)"),
    (_net("fc00::/7"), Kind.PRIVATE, "unique local (private IPv6)"),
)
NAT64 = _net("64:ff9b::/96")  # the well-known prefix: the last 32 bits are the IPv4 address


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy says of one address."""

    address: Address
    kind: Kind
    range: str  # the network that decided it ("" for a public address)
    what: str  # the range's name in words
    allowed: bool

    @property
    def why(self) -> str:
        """Why it is refused, after the address ("" when it is allowed): "in RANGE, what:
        consequence"."""
        if self.allowed:
            return ""
        where = f"in {self.range}, {self.what}"
        if self.kind is Kind.LOOPBACK:
            return f"{where}: refused unless the operator allows loopback"
        if self.kind is Kind.PRIVATE:
            return f"{where}: the operator refuses private networks"
        return f"{where}: never a webhook receiver"

    @property
    def reason(self) -> str:
        """ "ADDRESS is in RANGE, …" ("" when it is allowed)."""
        return f"{self.address} is {self.why}" if not self.allowed else ""

    @property
    def fix(self) -> str:
        if self.kind is Kind.LOOPBACK:
            return (
                "give a host the control plane reaches over the network (an operator allows "
                "loopback receivers with TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK=on)"
            )
        if self.kind is Kind.PRIVATE:
            return (
                "give a receiver with a public address (an operator allows private networks "
                "with TUNEPLANE_WEBHOOK_PRIVATE=allow)"
            )
        return "give a receiver's own unicast address or host name"


@dataclass(frozen=True, slots=True)
class Destinations:
    """The operator's policy: loopback (off by default) and private networks (on)."""

    allow_loopback: bool = False
    allow_private: bool = True

    def judge(self, address: str | Address) -> Verdict:
        """The verdict on one address (an IPv6 zone, ``%eth0``, is ignored). ValueError if
        ``address`` is no IP address."""
        parsed = address if not isinstance(address, str) else _parse(address)
        embedded, form = _embedded_ipv4(parsed)
        if embedded is not None:
            inner = self.judge(embedded)
            return Verdict(parsed, inner.kind, inner.range, f"{inner.what}, as {form}",
                           inner.allowed)  # fmt: skip
        kind, network, what = _classify(parsed)
        allowed = (
            kind is Kind.PUBLIC
            or (kind is Kind.PRIVATE and self.allow_private)
            or (kind is Kind.LOOPBACK and self.allow_loopback)
        )
        return Verdict(parsed, kind, network, what, allowed)

    def refusal(self, addresses: Iterable[str | Address]) -> Verdict | None:
        """The first refused verdict among ``addresses``, None if every one is allowed."""
        for address in addresses:
            verdict = self.judge(address)
            if not verdict.allowed:
                return verdict
        return None


def ip_literal(host: str) -> Address | None:
    """The address a URL's host names literally (``[::1]`` or ``::1``, ``10.0.0.7``), None if
    it is a name."""
    try:
        return _parse(host.strip("[]"))
    except ValueError:
        return None


def _parse(text: str) -> Address:
    return ipaddress.ip_address(text.partition("%")[0])


def _classify(address: Address) -> tuple[Kind, str, str]:
    for network, kind, what in RANGES:
        if address.version == network.version and address in network:
            return kind, str(network), what
    if address.is_reserved:
        return Kind.RESERVED, "an IETF-reserved range", "reserved"
    return Kind.PUBLIC, "", "public"


def _embedded_ipv4(address: Address) -> tuple[ipaddress.IPv4Address | None, str]:
    """The IPv4 address an IPv6 one stands for, and the form's name; (None, "") if none."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None, ""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped IPv6 ::ffff:0:0/96"
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), f"NAT64 {NAT64}"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4 2002::/16"
    return None, ""
