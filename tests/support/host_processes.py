"""The host-process executor's isolation for tests: what the daemon would detect (``unshare``,
the member account, the host's cgroups), once per node name."""

from __future__ import annotations

import functools

from adapters.node.process_isolation import Isolation, isolation


@functools.cache
def process_isolation(node: str) -> Isolation:
    return isolation(node, None, None)
