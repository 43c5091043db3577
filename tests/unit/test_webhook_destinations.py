"""The destination policy (domain/webhook_destinations.py) over each class of address, and the
subscription check of a URL whose host is an address
(docs/notifications.md#where-webhooks-may-go)."""

from __future__ import annotations

import pytest

from domain.errors import InvalidInput
from domain.webhook_destinations import Destinations, Kind
from domain.webhooks import check_url
from entrypoints.settings import Settings

DEFAULT = Destinations()
STRICT = Destinations(allow_loopback=False, allow_private=False)
OPEN = Destinations(allow_loopback=True, allow_private=True)


@pytest.mark.parametrize(
    ("address", "kind", "network"),
    [
        ("169.254.169.254", Kind.LINK_LOCAL, "169.254.0.0/16"),  # the cloud metadata service
        ("fe80::1", Kind.LINK_LOCAL, "fe80::/10"),
        ("fe80::1%eth0", Kind.LINK_LOCAL, "fe80::/10"),
        ("0.0.0.0", Kind.UNSPECIFIED, "0.0.0.0/8"),
        ("0.1.2.3", Kind.UNSPECIFIED, "0.0.0.0/8"),
        ("::", Kind.UNSPECIFIED, "::/128"),
        ("224.0.0.1", Kind.MULTICAST, "224.0.0.0/4"),
        ("ff02::1", Kind.MULTICAST, "ff00::/8"),
        ("255.255.255.255", Kind.RESERVED, "240.0.0.0/4"),
        ("240.1.2.3", Kind.RESERVED, "240.0.0.0/4"),
        ("fec0::1", Kind.RESERVED, "fec0::/10"),
        ("::127.0.0.1", Kind.RESERVED, "::/8"),  # IPv4-compatible: deprecated
        ("100::1", Kind.RESERVED, "100::/64"),
        ("::ffff:169.254.169.254", Kind.LINK_LOCAL, "169.254.0.0/16"),  # IPv4-mapped
        ("::ffff:0.0.0.0", Kind.UNSPECIFIED, "0.0.0.0/8"),
        ("::ffff:224.0.0.1", Kind.MULTICAST, "224.0.0.0/4"),
        ("64:ff9b::a9fe:a9fe", Kind.LINK_LOCAL, "169.254.0.0/16"),  # NAT64 of the metadata
        ("2002:a9fe:a9fe::1", Kind.LINK_LOCAL, "169.254.0.0/16"),  # 6to4 of it
    ],
)
def test_always_refused_whatever_the_operator_allows(
    address: str, kind: Kind, network: str
) -> None:
    verdict = OPEN.judge(address)
    assert (verdict.kind, verdict.range, verdict.allowed) == (kind, network, False)
    assert network in verdict.reason and "never a webhook receiver" in verdict.reason
    assert verdict.fix


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1",
                                     "64:ff9b::7f00:1"])  # fmt: skip
def test_loopback_only_where_allowed(address: str) -> None:
    verdict = DEFAULT.judge(address)
    assert (verdict.kind, verdict.allowed) == (Kind.LOOPBACK, False)
    assert "TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK=on" in verdict.fix
    assert OPEN.judge(address).allowed


@pytest.mark.parametrize("address", ["10.1.2.3", "172.16.0.1", "172.31.255.254",
                                     "192.168.1.1", "100.64.0.1", "fd00::1", "fc00::1",
                                     "::ffff:10.0.0.1", "64:ff9b:1::1"])  # fmt: skip
def test_private_networks_allowed_by_default_refused_on_demand(address: str) -> None:
    assert DEFAULT.judge(address).allowed and DEFAULT.judge(address).kind is Kind.PRIVATE
    verdict = STRICT.judge(address)
    assert not verdict.allowed and "the operator refuses private networks" in verdict.reason
    assert "TUNEPLANE_WEBHOOK_PRIVATE" in verdict.fix


@pytest.mark.parametrize("address", ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1",
                                     "::ffff:1.1.1.1", "64:ff9b::808:808"])  # fmt: skip
def test_public_addresses_pass_even_the_strict_policy(address: str) -> None:
    verdict = STRICT.judge(address)
    assert (verdict.kind, verdict.allowed, verdict.reason) == (Kind.PUBLIC, True, "")


def test_one_refused_address_among_many_refuses_the_host() -> None:
    assert STRICT.refusal(["8.8.8.8", "2606:4700::1"]) is None
    refused = STRICT.refusal(["8.8.8.8", "10.0.0.1", "169.254.169.254"])
    assert refused is not None and str(refused.address) == "10.0.0.1"
    with pytest.raises(ValueError):
        DEFAULT.judge("not-an-address")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://169.254.169.254/latest/meta-data/", "169.254.0.0/16, link-local"),
        ("https://[fe80::1%25eth0]/x", "fe80::/10"),
        ("https://0.0.0.0/x", "unspecified"),
        ("https://[::]/x", "unspecified"),
        ("https://224.0.0.1/x", "multicast"),
        ("https://255.255.255.255/x", "reserved"),
        ("https://[::ffff:169.254.169.254]/x", "as IPv4-mapped IPv6"),
        ("https://[64:ff9b::a9fe:a9fe]/x", "as NAT64"),
        ("https://2130706433/x", "neither a host name"),  # 127.0.0.1 to getaddrinfo
        ("https://127.1/x", "neither a host name"),
        ("https://0x7f.0.0.1/x", "neither a host name"),
        ("https://127.000.000.001/x", "neither a host name"),
        ("https://hooks.example.123/x", "neither a host name"),
    ],
)
def test_subscribing_an_address_the_policy_refuses_names_range_and_fix(url: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_url(url, allow_loopback=True)
    assert says in caught.value.message, caught.value.message
    assert caught.value.field == "url" and caught.value.fix


def test_private_literals_follow_the_setting() -> None:
    assert check_url("https://10.0.0.7/h", allow_loopback=False)
    assert check_url("https://[fd00::7]/h", allow_loopback=False)
    with pytest.raises(InvalidInput, match="refuses private networks") as caught:
        check_url("https://10.0.0.7/h", allow_loopback=False, allow_private=False)
    assert "TUNEPLANE_WEBHOOK_PRIVATE" in caught.value.fix
    assert check_url("https://hooks.example.org/h", allow_loopback=False, allow_private=False)


def test_the_settings_make_the_policy() -> None:
    assert Settings.from_env({}).webhooks.destinations() == Destinations()
    strict = Settings.from_env(
        {"TUNEPLANE_WEBHOOK_PRIVATE": " Refuse ", "TUNEPLANE_WEBHOOK_ALLOW_LOOPBACK": "on"}
    )
    assert strict.webhooks.destinations() == Destinations(allow_loopback=True, allow_private=False)
    assert strict.webhooks.notifications(None, None, lambda: 0.0).allow_private is False  # type: ignore[arg-type]
