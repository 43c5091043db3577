"""A small message sent on a server stream through h2 directly, when nothing can hold it back
(the telemetry gateway's acks: one a batch, about a third of the gateway's Python on a batch's
path; session 46, docs/telemetry.md).

grpclib's ``Stream.send_message`` encodes the message, prefixes it, and its ``send_data``
waits for the connection to be writable and for flow-control room, cuts the data into frames
of at most the peer's frame size, hands each to h2 and writes what h2 made, with per-message
bookkeeping (events, counters) around it. For a message of a few bytes on a stream whose
headers are out, whose connection is writable and whose windows hold it, all of that is one
``h2.send_data`` and one ``transport.write``: h2 still does the framing and the flow-control
accounting (the windows stay right), only grpclib's layers are skipped. Anything else (the
first message, which sends the headers; a paused transport; a short window; a message larger
than a frame; an h2 that refuses) goes through ``send_message`` as before.
"""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf.message import Message
from grpclib.server import Stream

_PREFIX = struct.Struct(">BI")  # gRPC: not compressed, length


def send_now(stream: Stream[Any, Any], message: Message) -> bool:
    """Writes ``message`` on ``stream`` at once if nothing can hold it back; False if the
    caller must ``await stream.send_message(message)`` instead (nothing was sent)."""
    try:
        if not stream._send_initial_metadata_done:
            return False
        s = stream._stream
        h2 = s._h2_connection
        if not s.connection.write_ready.is_set() or s.id is None:
            return False
        body = message.SerializeToString()
        data = _PREFIX.pack(0, len(body)) + body
        if len(data) > min(h2.local_flow_control_window(s.id), h2.max_outbound_frame_size):
            return False
        h2.send_data(s.id, data)
    except Exception:  # a closed stream, another grpclib: the ordinary path says what is wrong
        return False
    s._transport.write(h2.data_to_send())
    s.data_sent += len(data)
    s.connection.data_send_process()  # as grpclib's send: data went out (its keepalive counts)
    return True
