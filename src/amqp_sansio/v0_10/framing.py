"""The AMQP 0-10 frame layer and value codec, for those who drive frames themselves.

:class:`FrameReader` cuts octets into frames; :class:`AssemblyReader` checks flags and segment
order per channel and track and decodes whole controls and commands; :func:`encode_control`
and :func:`encode_command` write them back, split at a frame size. The value codec reads and
writes maps, lists, arrays, ``struct32`` values, sequence sets and byte ranges. (The protocol
header and :func:`~amqp_sansio.v0_10.is_protocol_header_0_10` are in :mod:`amqp_sansio.v0_10`.)
"""

from __future__ import annotations

from ._framing import (
    FIRST_FRAME,
    FIRST_SEGMENT,
    FRAME_HEADER_SIZE,
    LAST_FRAME,
    LAST_SEGMENT,
    MAX_FRAME_SIZE,
    SEGMENT_BODY,
    SEGMENT_COMMAND,
    SEGMENT_CONTROL,
    SEGMENT_HEADER,
    TRACK_COMMAND,
    TRACK_CONTROL,
    Assembly,
    AssemblyReader,
    Frame,
    FrameReader,
    command_buffers,
    decode_header_segment,
    encode_command,
    encode_control,
    encode_header_segment,
    frame_command,
    split_segment,
)
from ._generated.spec_0_10 import (
    decode_array,
    decode_byte_ranges,
    decode_list,
    decode_map,
    decode_sequence_set,
    decode_struct32,
    decode_value,
    encode_array,
    encode_byte_ranges,
    encode_list,
    encode_map,
    encode_sequence_set,
    encode_struct32,
    encode_value,
)
from ._util import fix_module_names

__all__ = [
    "FIRST_FRAME",
    "FIRST_SEGMENT",
    "FRAME_HEADER_SIZE",
    "LAST_FRAME",
    "LAST_SEGMENT",
    "MAX_FRAME_SIZE",
    "SEGMENT_BODY",
    "SEGMENT_COMMAND",
    "SEGMENT_CONTROL",
    "SEGMENT_HEADER",
    "TRACK_COMMAND",
    "TRACK_CONTROL",
    "Assembly",
    "AssemblyReader",
    "Frame",
    "FrameReader",
    "command_buffers",
    "decode_array",
    "decode_byte_ranges",
    "decode_header_segment",
    "decode_list",
    "decode_map",
    "decode_sequence_set",
    "decode_struct32",
    "decode_value",
    "encode_array",
    "encode_byte_ranges",
    "encode_command",
    "encode_control",
    "encode_header_segment",
    "encode_list",
    "encode_map",
    "encode_sequence_set",
    "encode_struct32",
    "encode_value",
    "frame_command",
    "split_segment",
]

fix_module_names(__name__, globals(), __all__, package="amqp_sansio.v0_10")
