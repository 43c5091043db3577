"""adapters/grpc/frame_repr.py: the same text as hyperframe's own repr, whatever the size."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import hyperframe.frame
import pytest
from hyperframe.frame import DataFrame

from adapters.grpc import frame_repr


@pytest.mark.parametrize("size", [0, 1, 9, 10, 11, 12, 4096, 100_000])
def test_the_text_is_hyperframes_own(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    assert frame_repr._ORIGINAL is not None
    assert frame_repr.raw_data_repr(data) == frame_repr._ORIGINAL(data)
    assert frame_repr.raw_data_repr(memoryview(data)) == frame_repr._ORIGINAL(memoryview(data))


def test_the_telemetry_gateway_installs_it() -> None:
    import adapters.grpc.telemetry_gateway  # noqa: F401  (installs on import)

    assert hyperframe.frame._raw_data_repr is frame_repr.raw_data_repr
    frame = DataFrame(1, data=b"\x00\x01" * 3000)
    assert repr(frame).endswith(": <hex:00010001000100010001...>")


class Lines(h2.config.DummyLogger):
    """An h2 logger that formats what it is given (as a real logger would)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def debug(self, *vargs: Any, **kwargs: Any) -> None:
        self.lines.append(vargs[0] % vargs[1:])

    def trace(self, *vargs: Any, **kwargs: Any) -> None:
        self.lines.append(vargs[0] % vargs[1:])


def test_h2s_trace_line_is_built_only_when_formatted_and_says_the_same() -> None:
    import builtins

    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(1, [(":method", "POST"), (":scheme", "https"), (":path", "/a"),
                            (":authority", "x")])  # fmt: skip
    client.send_data(1, b"\x00\x01" * 2000)
    data = client.data_to_send()

    def trace_lines() -> list[str]:
        logger = Lines()
        config = h2.config.H2Configuration(client_side=False, logger=logger)
        server = h2.connection.H2Connection(config)
        server.initiate_connection()
        server.receive_data(data)
        return [line for line in logger.lines if line.startswith("Received frame: ")]

    h2.connection.repr = builtins.repr  # type: ignore[attr-defined]
    try:
        plain = trace_lines()
    finally:
        frame_repr.install()
    assert h2.connection.repr is frame_repr.Deferred  # type: ignore[attr-defined]
    assert len(plain) == 3  # SETTINGS, HEADERS, DATA
    assert trace_lines() == plain
    frame = DataFrame(1, data=b"\x00\x01" * 3000)
    assert str(frame_repr.Deferred(frame)) == repr(frame)
