"""The frame layer: protocol headers, frames, and the reader and writers.

Most users never touch frames: the connection core (coming next) assembles them into events.
This module is public for tools, benchmarks and peers that drive frames themselves.
"""

from __future__ import annotations

from ._frames import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER_0_8,
    PROTOCOL_HEADER_0_8_PDF,
    PROTOCOL_HEADER_0_9,
    PROTOCOL_HEADER_0_9_1,
    PROTOCOL_HEADER_0_10,
    PROTOCOL_HEADER_1_0,
    PROTOCOL_HEADER_1_0_SASL,
    ContentBodyFrame,
    ContentHeaderFrame,
    Frame,
    FrameReader,
    HeartbeatFrame,
    MethodFrame,
    ProtocolHeader,
    ProtocolVersion,
    content_buffers,
    encode_content,
    encode_content_header,
    encode_method_frame,
    parse_protocol_header,
)
from ._table import decode_table, decode_table_entries, encode_table, encode_table_entries
from ._util import fix_module_names

__all__ = [
    "HEARTBEAT_FRAME",
    "PROTOCOL_HEADER_0_8",
    "PROTOCOL_HEADER_0_8_PDF",
    "PROTOCOL_HEADER_0_9",
    "PROTOCOL_HEADER_0_9_1",
    "PROTOCOL_HEADER_0_10",
    "PROTOCOL_HEADER_1_0",
    "PROTOCOL_HEADER_1_0_SASL",
    "ContentBodyFrame",
    "ContentHeaderFrame",
    "Frame",
    "FrameReader",
    "HeartbeatFrame",
    "MethodFrame",
    "ProtocolHeader",
    "ProtocolVersion",
    "content_buffers",
    "decode_table",
    "decode_table_entries",
    "encode_content",
    "encode_content_header",
    "encode_method_frame",
    "encode_table",
    "encode_table_entries",
    "parse_protocol_header",
]

fix_module_names(__name__, globals(), __all__)
