"""h2's trace line for every received frame, made cheap (the same text when it is logged).

h2 logs every frame it receives at trace level with ``repr(frame)`` evaluated before the call
(``H2Connection._receive_frame``), whether or not anything is logged (grpclib gives h2 no
logger: its trace does nothing). hyperframe's ``_raw_data_repr`` hexlifies the frame's whole
payload and then keeps its first 20 hex digits: about 9 µs for a 4 KB DATA frame, 7 % of the
telemetry gateway's CPU at 2,000 collector streams (docs/benchmarks.md). Two process-wide
patches, each a no-op if its target is renamed (the cost comes back, nothing breaks):

* ``raw_data_repr`` replaces ``_raw_data_repr``: it hexlifies only the 11 bytes the text can
  show, the same string for every input (tests/unit/test_frame_repr.py checks it against the
  original);
* ``Deferred`` stands for the builtin ``repr`` in ``h2.connection`` (its only use there is that
  trace line): the frame's text is built only if a logger formats the line (``%s`` calls its
  ``__str__``), so the building itself (1.7 % of the gateway, session 44) is gone too.
"""

from __future__ import annotations

import binascii
import builtins

import h2.connection
import hyperframe.frame

_ORIGINAL = getattr(hyperframe.frame, "_raw_data_repr", None)


def raw_data_repr(data: bytes | memoryview | None) -> str:
    if not data:
        return "None"
    r = binascii.hexlify(data[:11]).decode("ascii")  # 22 digits: enough to know it is cut
    if len(r) > 20:
        r = r[:20] + "..."
    return "<hex:" + r + ">"


class Deferred:
    """``repr(obj)``, built when formatted."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __str__(self) -> str:
        return builtins.repr(self.obj)

    __repr__ = __str__


def install() -> None:
    if _ORIGINAL is not None:
        hyperframe.frame._raw_data_repr = raw_data_repr
    if hasattr(h2.connection.H2Connection, "_receive_frame"):
        h2.connection.repr = Deferred  # type: ignore[attr-defined]  # module global over builtin
