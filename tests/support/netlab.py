"""Hosts made of network namespaces, for a test that runs TunePlane as a deployment across
machines (tests/e2e/test_multi_host.py, docs/testing.md#the-multi-host-test).

One namespace per "host", each with one address on a private /24, all joined by a bridge in a
namespace of its own (the "switch"); the test process itself is the operator's machine, joined to
that bridge by one veth pair with the subnet's last address. Each host resolves the others by
name through its own ``/etc/netns/<namespace>/hosts`` (which ``ip netns exec`` puts over
``/etc/hosts``), so certificates carry real host names. A firewall (nftables) on each host
accepts only the flows it is given (docs/operations.md's traffic table); anything else gets a
TCP reset, so a refused flow fails at once rather than after a timeout.

Every name starts with ``tpmh-<pid>-`` (the root-namespace veth ``tpmh<pid>``), ``<pid>`` the
test process's: ``close()`` kills every process in the namespaces, deletes them (their veths go
with them) and their ``/etc/netns`` directories, whatever state they are in; ``sweep()`` (at the
start) does the same for leftovers of test processes that are gone (a run killed by SIGKILL).
Nothing is sent anywhere but to the lab's own addresses.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "tpmh"
NETNS_ETC = Path("/etc/netns")
SCRATCH = Path("/var/tmp")  # scratch(): short paths (a PostgreSQL socket's), swept as the rest


@dataclass(frozen=True)
class Host:
    role: str
    ns: str
    address: str
    name: str  # the host's DNS name, e.g. api.h4711.test


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _namespaces() -> list[str]:
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def alive(pid: int) -> bool:
    """Whether the test process that made a lab still runs (a pytest-xdist worker's command line
    does not say pytest: any process of that pid counts, a reused pid keeps its lab a run more)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all(ns: str) -> None:
    """SIGKILL every process in ``ns`` until none is left (children forked meanwhile too)."""
    for _ in range(50):
        pids = [int(p) for p in ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)  # the kernel reaps them; ask again (a wait on a condition)


def remove(namespaces: Sequence[str], root_links: Iterable[str]) -> None:
    for ns in namespaces:
        _kill_all(ns)
    for link in root_links:
        ip("link", "del", link, check=False)  # its peer in the switch goes with it
    for ns in namespaces:
        ip("netns", "del", ns, check=False)
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)


def sweep() -> None:
    """Remove what labs of test processes that no longer run left behind."""
    owners: dict[int, list[str]] = {}
    for ns in _namespaces():
        parts = ns.split("-")
        if parts[0] == PREFIX and len(parts) >= 3 and parts[1].isdigit():
            owners.setdefault(int(parts[1]), []).append(ns)
    for path in NETNS_ETC.glob(f"{PREFIX}-*") if NETNS_ETC.is_dir() else ():
        parts = path.name.split("-")
        if len(parts) >= 3 and parts[1].isdigit():
            owners.setdefault(int(parts[1]), [])
    for path in SCRATCH.glob(f"{PREFIX}-*"):
        parts = path.name.split("-")
        if len(parts) >= 3 and parts[1].isdigit():
            owners.setdefault(int(parts[1]), [])
    for pid, namespaces in owners.items():
        if not alive(pid):
            for path in SCRATCH.glob(f"{PREFIX}-{pid}-*"):
                shutil.rmtree(path, ignore_errors=True)
            remove(namespaces, [f"{PREFIX}{pid}", f"{PREFIX}{pid}x"])
            for path in NETNS_ETC.glob(f"{PREFIX}-{pid}-*"):
                shutil.rmtree(path, ignore_errors=True)


def scratch(what: str) -> Path:
    """A directory of this test process's in /var/tmp (removed by the caller; else swept)."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{os.getpid()}-{what}-", dir=SCRATCH))


def _free_subnet() -> str:
    """A 10.213.X.0/24 that no route of the root namespace overlaps."""
    routes = ip("-4", "route", "show", "table", "all", check=False).stdout
    used = [
        ipaddress.ip_network(word, strict=False)
        for line in routes.splitlines()
        for word in line.split()[:1]
        if "/" in word and word[0].isdigit()
    ]
    for third in [*range(os.getpid() % 200 + 20, 250), *range(20, 250)]:
        net = ipaddress.ip_network(f"10.213.{third}.0/24")
        if not any(net.overlaps(u) for u in used):
            return f"10.213.{third}"
    raise RuntimeError("no free 10.213.X.0/24 for the lab")


@dataclass
class Lab:
    roles: Sequence[str]
    pid: int = field(default_factory=os.getpid)
    hosts: dict[str, Host] = field(default_factory=dict)
    subnet: str = ""
    made: list[str] = field(default_factory=list)  # namespaces, in order made

    @property
    def domain(self) -> str:
        return f"h{self.pid}.test"

    @property
    def switch(self) -> str:
        return f"{PREFIX}-{self.pid}-sw"

    @property
    def operator_link(self) -> str:
        return f"{PREFIX}{self.pid}"

    @property
    def operator(self) -> str:
        return f"{self.subnet}.254"

    def up(self) -> Lab:
        self.subnet = _free_subnet()
        self._netns(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for i, role in enumerate(self.roles):
            ns = f"{PREFIX}-{self.pid}-{role}"
            host = Host(role, ns, f"{self.subnet}.{i + 2}", f"{role}.{self.domain}")
            self.hosts[role] = host
            self._netns(ns)
            ip("link", "add", f"{PREFIX}{self.pid}x", "type", "veth", "peer", "name", f"p{i}",
               "netns", self.switch)  # fmt: skip
            ip("link", "set", f"{PREFIX}{self.pid}x", "netns", ns)
            ip("-n", ns, "link", "set", f"{PREFIX}{self.pid}x", "name", "eth0")
            ip("-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
        ip("link", "add", self.operator_link, "type", "veth", "peer", "name", "op",
           "netns", self.switch)  # fmt: skip
        ip("-n", self.switch, "link", "set", "op", "master", "br0", "up")
        ip("addr", "add", f"{self.operator}/24", "dev", self.operator_link)
        ip("link", "set", self.operator_link, "up")
        names = "".join(f"{h.address} {h.name}\n" for h in self.hosts.values())
        for host in self.hosts.values():
            etc = NETNS_ETC / host.ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{names}")
        return self

    def _netns(self, ns: str) -> None:
        self.made.append(ns)  # before: a half-made one is removed too
        ip("netns", "add", ns)

    def firewall(self, role: str, allowed: Sequence[tuple[str, str]]) -> None:
        """Accept on ``role`` only TCP to each (source role or address, port or range) of
        ``allowed``, replies to its own connections and loopback; reset everything else."""
        rules = []
        for source, ports in allowed:
            address = self.hosts[source].address if source in self.hosts else source
            rules.append(f"ip saddr {address} tcp dport {ports} accept")
        ruleset = (
            "table inet tpmh {\n chain input {\n  type filter hook input priority 0; policy drop;\n"
            "  iif lo accept\n  ct state established,related accept\n"
            + "".join(f"  {r}\n" for r in rules)
            + "  meta l4proto tcp reject with tcp reset\n  reject\n }\n}\n"
        )
        subprocess.run(
            ["ip", "netns", "exec", self.hosts[role].ns, "nft", "-f", "-"],
            input=ruleset, text=True, check=True, capture_output=True, timeout=30,
        )  # fmt: skip

    def cut(self, role: str) -> None:
        """Cut ``role`` off as a pulled cable would: its port on the switch goes down, so
        nothing it sends arrives and nothing sent to it is answered (no reset, no FIN); its
        processes run on."""
        ip("-n", self.switch, "link", "set", f"p{list(self.roles).index(role)}", "down")

    def heal(self, role: str) -> None:
        """Plug ``role`` back in."""
        ip("-n", self.switch, "link", "set", f"p{list(self.roles).index(role)}", "up")

    def argv(self, role: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[role].ns, *argv]

    def can_connect(self, role: str, address: str, port: int) -> bool:
        """Whether a TCP connection from ``role`` to ``address:port`` opens (bash's /dev/tcp)."""
        probe = f"exec 3<>/dev/tcp/{address}/{port}"
        done = subprocess.run(
            self.argv(role, ["timeout", "10", "bash", "-c", probe]),
            capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        return done.returncode == 0

    def close(self) -> None:
        remove(list(reversed(self.made)), [self.operator_link, f"{PREFIX}{self.pid}x"])
