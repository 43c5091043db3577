"""adapters/grpc/frame_repr.py: the same text as hyperframe's own repr, whatever the size."""

from __future__ import annotations

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
