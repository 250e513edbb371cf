"""The frame layer: protocol headers, frames as values, a frame reader and frame writers.

AMQP 0-8, 0-9 and 0-9-1 share one framing (``type:u8 channel:u16 size:u32 payload 0xCE``); only the
method and property tables differ, so :class:`FrameReader` takes them as parameters.

The reader parses by offset and drops what it used once per :meth:`FrameReader.feed`, never per
frame, and checks every size the peer controls from the 7-octet header before it waits for the
payload. It parses a received ``bytes`` object where it lies, without copying it first, and keeps
the pieces of a large body frame as they arrive, joined once when the frame is complete. The
writers append to a ``bytearray`` the caller owns, and leave it untouched when they raise.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Final, NoReturn, TypeAlias, final

import attrs

from ._errors import LocalProtocolError, RemoteProtocolError
from ._generated.reply_codes import ReplyCode
from ._generated.spec_0_9_1 import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_MIN_SIZE,
    METHODS,
    PROPERTIES,
    BasicProperties,
    BasicPublish,
)
from ._method import INT_LIMITS, Buffer, ContentProperties, Method

if TYPE_CHECKING:
    from collections.abc import Callable

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
    "encode_content",
    "encode_content_header",
    "encode_method_frame",
    "parse_protocol_header",
]

# Reply codes used here, from the table every version shares.
_FRAME_ERROR: Final = ReplyCode.FRAME_ERROR
_SYNTAX_ERROR: Final = ReplyCode.SYNTAX_ERROR
_COMMAND_INVALID: Final = ReplyCode.COMMAND_INVALID
_UNEXPECTED_FRAME: Final = ReplyCode.UNEXPECTED_FRAME
_NOT_IMPLEMENTED: Final = ReplyCode.NOT_IMPLEMENTED

_MAX_FRAME_SIZE: Final = 0xFFFF_FFFF
#: 7-octet frame header plus the frame-end octet.
_FRAME_OVERHEAD: Final = 8


# --------------------------------------------------------------------------------------------
# Protocol headers
# --------------------------------------------------------------------------------------------


@final
class ProtocolVersion(enum.Enum):
    """The protocol a peer asked for with its 8-octet header."""

    AMQP_0_8 = "0-8"
    AMQP_0_9 = "0-9"
    AMQP_0_9_1 = "0-9-1"
    AMQP_0_10 = "0-10"
    AMQP_1_0 = "1.0"
    UNKNOWN = "unknown"


PROTOCOL_HEADER_0_9_1: Final = b"AMQP\x00\x00\x09\x01"
PROTOCOL_HEADER_0_9: Final = b"AMQP\x01\x01\x00\x09"
PROTOCOL_HEADER_0_8: Final = b"AMQP\x01\x01\x08\x00"
#: The header printed in the June 2006 0-8 PDF, sent by py-amqplib; RabbitMQ treats it as 0-8.
PROTOCOL_HEADER_0_8_PDF: Final = b"AMQP\x01\x01\x09\x01"
PROTOCOL_HEADER_0_10: Final = b"AMQP\x01\x01\x00\x0a"
PROTOCOL_HEADER_1_0: Final = b"AMQP\x00\x01\x00\x00"
PROTOCOL_HEADER_1_0_SASL: Final = b"AMQP\x03\x01\x00\x00"

_VERSIONS: Final[Mapping[bytes, ProtocolVersion]] = {
    PROTOCOL_HEADER_0_9_1: ProtocolVersion.AMQP_0_9_1,
    PROTOCOL_HEADER_0_9: ProtocolVersion.AMQP_0_9,
    PROTOCOL_HEADER_0_8: ProtocolVersion.AMQP_0_8,
    PROTOCOL_HEADER_0_8_PDF: ProtocolVersion.AMQP_0_8,
    PROTOCOL_HEADER_0_10: ProtocolVersion.AMQP_0_10,
    PROTOCOL_HEADER_1_0: ProtocolVersion.AMQP_1_0,
    # AMQP 1.0 protocol id 2 is its TLS layer (1.0 spec, part 5.2.1).
    b"AMQP\x02\x01\x00\x00": ProtocolVersion.AMQP_1_0,
    PROTOCOL_HEADER_1_0_SASL: ProtocolVersion.AMQP_1_0,
}


def _check_header_octets(
    instance: ProtocolHeader, attribute: attrs.Attribute[bytes], value: bytes
) -> None:
    if type(value) is not bytes or len(value) != 8 or not value.startswith(b"AMQP"):
        raise ValueError(f"a protocol header is b'AMQP' and 4 octets, not {value!r}")


@final
@attrs.frozen
class ProtocolHeader:
    """The 8 octets a client sends first: ``"AMQP"`` and four version octets."""

    octets: bytes = attrs.field(validator=_check_header_octets)

    @property
    def version(self) -> ProtocolVersion:
        """Which protocol the octets name (``UNKNOWN`` for anything not in the table)."""
        return _VERSIONS.get(self.octets, ProtocolVersion.UNKNOWN)

    @property
    def version_octets(self) -> tuple[int, int, int, int]:
        """The four octets after ``"AMQP"``."""
        o = self.octets
        return (o[4], o[5], o[6], o[7])


def parse_protocol_header(buf: Buffer) -> ProtocolHeader | None:
    """Read a protocol header from the start of *buf*, without consuming anything.

    Returns None while fewer than 8 octets arrived and they are a prefix of ``"AMQP"``; the caller
    removes the 8 octets once a header is returned. Raises :class:`RemoteProtocolError` (501) as
    soon as the octets can't start an AMQP header (an HTTP request, TLS on a plain port, ...).
    """
    head = bytes(buf[:8])
    name = head[:4]
    if name != b"AMQP"[: len(name)]:
        raise RemoteProtocolError(
            f"expected an AMQP protocol header, received {bytes(buf[:16])!r}",
            reply_code=_FRAME_ERROR,
        )
    if len(head) < 8:
        return None
    return ProtocolHeader(head)


# --------------------------------------------------------------------------------------------
# Frames as values
# --------------------------------------------------------------------------------------------

# Method, header and body frames are not frozen: frozen attrs classes cost 8-13% of decoding a
# delivery (measured with bench/codec.py), and nothing shares these instances.


@final
@attrs.define(slots=True, weakref_slot=False)
class MethodFrame:
    """A method frame (type 1)."""

    TYPE: ClassVar[int] = FRAME_METHOD

    channel: int
    method: Method


@final
@attrs.define(slots=True, weakref_slot=False)
class ContentHeaderFrame:
    """A content header frame (type 2): the body size and the properties of one message."""

    TYPE: ClassVar[int] = FRAME_HEADER

    channel: int
    class_id: int
    body_size: int
    properties: ContentProperties


@final
@attrs.define(slots=True, weakref_slot=False)
class ContentBodyFrame:
    """A content body frame (type 3): one chunk of a message body.

    ``payload`` is ``bytes``, or a read-only ``memoryview`` of the received octets when the
    reader was asked for views (``view_threshold``) and the frame was whole in one read.
    """

    TYPE: ClassVar[int] = FRAME_BODY

    channel: int
    payload: bytes | memoryview


@final
@attrs.frozen(slots=True)  # one shared instance
class HeartbeatFrame:
    """A heartbeat frame (type 8); always on channel 0."""

    TYPE: ClassVar[int] = FRAME_HEARTBEAT

    channel: int


Frame: TypeAlias = MethodFrame | ContentHeaderFrame | ContentBodyFrame | HeartbeatFrame

#: The whole heartbeat frame: type 8, channel 0, size 0, frame end.
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_HEARTBEAT: Final = HeartbeatFrame(0)
_FRAME_HEADER: Final = struct.Struct(">BHI")
_U32: Final = struct.Struct(">I")
_CONTENT_HEADER: Final = struct.Struct(">HHQ")
_unpack_frame_header: Final = _FRAME_HEADER.unpack_from
_unpack_frame_start: Final = struct.Struct(">BHII").unpack_from
_unpack_u64: Final = struct.Struct(">Q").unpack_from
_new: Final = object.__new__
_unpack_u32: Final = _U32.unpack_from
_unpack_content_header: Final = _CONTENT_HEADER.unpack_from
_FRAME_NAMES: Final[Mapping[int, str]] = {
    FRAME_METHOD: "method",
    FRAME_HEADER: "content header",
    FRAME_BODY: "content body",
    FRAME_HEARTBEAT: "heartbeat",
}
# Below this size two small copies (bytearray slice, then bytes) beat making a memoryview; above
# it the single copy through a memoryview wins (measured on CPython 3.11: crossover near 2.5 KiB).
# A body frame at least this large that is still arriving is collected piece by piece.
_SMALL_BODY: Final = 2048
# view_threshold=None: larger than any frame payload, so no body frame is a view.
_NO_VIEWS: Final = 1 << 32
# What the generated decoders and the table codec raise on malformed input.
_DECODE_ERRORS: Final = (struct.error, IndexError, ValueError, OverflowError, RemoteProtocolError)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


@final
class FrameReader:
    """Parse frames out of a byte stream; the peer's limits are checked before buffering.

    :param frame_max: the largest frame (header, payload and frame-end) accepted; set it again
        after ``connection.tune``. "No limit" (0 on the wire) is the caller's to translate into
        ``2**32 - 1``.
    :param methods: method classes keyed by ``class_id << 16 | method_id``.
    :param properties: content property classes keyed by class id.
    :param slack: octets a frame may exceed *frame_max* by. RabbitMQ accepts frames up to 8
        octets over ("quite a few [clients] get it wrong", ``rabbit_reader.erl``): AMQPStorm,
        rabbitpy, aioamqp and async_amqp split bodies at ``frame_max`` instead of
        ``frame_max - 8``. The server role uses 8 so those clients work; the client role is strict.
    :param view_threshold: body frames of at least this many payload octets that lie whole in
        one received ``bytes`` object are handed out as read-only ``memoryview`` slices of it,
        without a copy (each view keeps that whole read alive); None (default): always a
        ``bytes`` copy. A body frame cut by a read is joined into ``bytes`` either way.
    """

    __slots__ = (
        "_body",
        "_buf",
        "_decoders",
        "_max_payload",
        "_methods",
        "_pos",
        "_properties",
        "_property_decoders",
        "_slack",
        "_trimmed",
        "_view_from",
    )

    def __init__(
        self,
        *,
        frame_max: int = FRAME_MIN_SIZE,
        methods: Mapping[int, type[Method]] = METHODS,
        properties: Mapping[int, type[ContentProperties]] = PROPERTIES,
        slack: int = 0,
        view_threshold: int | None = None,
    ) -> None:
        if not 0 <= slack <= _FRAME_OVERHEAD:
            raise ValueError(f"slack must be in 0..{_FRAME_OVERHEAD}, not {slack!r}")
        if view_threshold is not None and (type(view_threshold) is not int or view_threshold < 0):
            raise ValueError(f"view_threshold must be None or an int >= 0, not {view_threshold!r}")
        self._slack = slack
        # Payload sizes from which a body frame is a view (above any frame size: never).
        self._view_from = _NO_VIEWS if view_threshold is None else view_threshold
        # bytes as received when a read starts on a frame boundary (no copy), else a copy; a
        # bytearray only while a frame arrives in pieces smaller than what is already held.
        self._buf: bytes | bytearray = b""
        self._pos = 0  # offset of the first unparsed octet in _buf
        self._trimmed = 0  # stream offset of _buf[0], for errors
        self._body: _PartialBody | None = None  # a large body frame still arriving
        self._methods = methods
        # The bound decode of each method class: one lookup per frame instead of two.
        self._decoders = _DEFAULT_DECODERS if methods is METHODS else _decoders_of(methods)
        self._properties = properties
        self._property_decoders = (
            _DEFAULT_PROPERTY_DECODERS
            if properties is PROPERTIES
            else {class_id: cls.decode for class_id, cls in properties.items()}
        )
        self._max_payload = 0
        self.frame_max = frame_max

    @property
    def frame_max(self) -> int:
        """The largest frame accepted, in octets, frame header and frame-end included."""
        return self._max_payload + _FRAME_OVERHEAD - self._slack

    @frame_max.setter
    def frame_max(self, value: int) -> None:
        if not FRAME_MIN_SIZE <= value <= _MAX_FRAME_SIZE:
            raise ValueError(
                f"frame_max must be in {FRAME_MIN_SIZE}..{_MAX_FRAME_SIZE}, not {value!r} "
                "(translate the wire's 0 = no limit into 2**32 - 1)"
            )
        self._max_payload = value - _FRAME_OVERHEAD + self._slack

    @property
    def buffered(self) -> int:
        """Octets held and not yet parsed into frames."""
        held = len(self._buf) - self._pos
        body = self._body
        if body is not None:
            held += body.held_octets()
        return held

    def feed(self, data: Buffer) -> None:
        """Append received octets; what earlier frames used is dropped here, once per call.

        A ``bytes`` object is kept as it is (it can't change); other buffers are copied, so the
        caller may reuse them at once.
        """
        if type(data) is memoryview:
            data = _octets(data) if data.c_contiguous else data.tobytes()
        body = self._body
        if body is not None:
            self._feed_body(body, data)
        else:
            self._append(data)

    def _append(self, data: Buffer) -> None:
        buf = self._buf
        pos = self._pos
        rest = len(buf) - pos
        self._trimmed += pos
        self._pos = 0
        if not rest:
            self._buf = data if type(data) is bytes else bytes(data)
            return
        if len(data) >= rest:
            # One copy of the unparsed rest and of the new octets; the rest is at most a frame,
            # and no longer than what arrived, so the copies stay linear in the stream.
            self._buf = b"".join((memoryview(buf)[pos:], data))
        elif type(buf) is bytearray:
            del buf[:pos]
            buf += data
        else:
            # Pieces smaller than the frame they complete: append from now on, amortised.
            grown = bytearray(memoryview(buf)[pos:])
            grown += data
            self._buf = grown

    def _feed_body(self, body: _PartialBody, data: Buffer) -> None:
        """Give *data* to the body still arriving (or hold it until that body is read)."""
        need = body.need
        if not need:  # the body is complete but not handed out: keep the octets after it
            body.held.append((data if type(data) is bytes else bytes(data), 0))
            return
        size = len(data)  # octets: feed() cast a memoryview to bytes
        if size < need:
            body.parts.append(_keep(data, 0, size))
            body.need = need - size
            self._trimmed += size
            return
        body.parts.append(_keep(data, 0, need - 1))
        body.end_octet = data[need - 1]
        body.need = 0
        if type(data) is bytes:  # _finish_body makes it the buffer, from the octet after
            body.held.append((data, need))
        else:
            self._trimmed += need
            body.held.append((bytes(memoryview(data)[need:]), 0))

    def _start_body(self, channel: int, size: int, start: int) -> None:
        """Collect a large body frame's payload from the pieces fed, not in the buffer."""
        buf = self._buf
        # _buf is replaced below and never resized through this view, so viewing it is safe.
        first = memoryview(buf)[start:]
        self._body = _PartialBody(
            channel, size, self._trimmed + self._pos, first, start + size + 1 - len(buf)
        )
        self._trimmed += len(buf)
        self._buf = b""
        self._pos = 0

    def _finish_body(self) -> ContentBodyFrame | None:
        body = self._body
        assert body is not None
        if body.need:
            return None
        if body.end_octet != FRAME_END:
            self._pos = body.offset - self._trimmed  # for the error's stream offset
            raise RemoteProtocolError(
                f"{self._where(FRAME_BODY, body.channel, body.size)}: frame-end octet is "
                f"0x{body.end_octet:02x}, expected 0x{FRAME_END:02x}",
                reply_code=_FRAME_ERROR,
            )
        payload = b"".join(body.parts)
        self._body = None
        (first, skip), *later = body.held
        self._buf = first
        self._pos = skip
        for piece, _ in later:
            self._append(piece)
        return ContentBodyFrame(body.channel, payload)

    def next_frame(self) -> Frame | None:
        """Parse the next frame, or return None when more octets are needed.

        :raises RemoteProtocolError: the octets are not a valid frame; the error says which
            frame (type, channel, size, stream offset) and what was wrong.
        """
        # The fast path: a whole method, header or body frame that decodes. Everything else
        # (short or partial frames, heartbeats, every error) goes to _next_frame_slowly, which
        # checks it all again from the frame header and is the one place errors come from.
        buf = self._buf
        pos = self._pos
        try:
            # The frame header and the 4 octets after it (a method frame's class and method id).
            frame_type, channel, size, index = _unpack_frame_start(buf, pos)
        except struct.error:  # fewer than 11 octets left
            return self._next_frame_slowly()
        start = pos + 7
        end = start + size
        if len(buf) <= end or size > self._max_payload or buf[end] != FRAME_END:
            return self._next_frame_slowly()
        # Frames are built with object.__new__ and slot stores: a third faster than __init__.
        if frame_type == FRAME_BODY:
            # The only copy of the payload the reader makes (none for a view: a received bytes
            # object can't change, so a view of it stays valid after later feeds).
            payload: bytes | memoryview
            if type(buf) is bytes:
                payload = buf[start:end] if size < self._view_from else memoryview(buf)[start:end]
            elif size < _SMALL_BODY:
                payload = bytes(buf[start:end])
            else:
                payload = memoryview(buf)[start:end].tobytes()
            self._pos = end + 1
            body = _new(ContentBodyFrame)
            body.channel = channel
            body.payload = payload
            return body
        if frame_type == FRAME_METHOD:
            decode = self._decoders.get(index) if size >= 4 else None
            if decode is None:
                return self._next_frame_slowly()
            try:
                method, offset = decode(buf, start + 4)
            except _DECODE_ERRORS:
                return self._next_frame_slowly()
            if offset != end:
                return self._next_frame_slowly()
            self._pos = end + 1
            frame = _new(MethodFrame)
            frame.channel = channel
            frame.method = method
            return frame
        if frame_type == FRAME_HEADER and size >= 12 and not index & 0xFFFF:  # weight 0
            class_id = index >> 16
            decode_properties = self._property_decoders.get(class_id)
            if decode_properties is None:
                return self._next_frame_slowly()
            try:
                props, offset = decode_properties(buf, start + 12)
            except _DECODE_ERRORS:
                return self._next_frame_slowly()
            if offset != end:
                return self._next_frame_slowly()
            self._pos = end + 1
            header = _new(ContentHeaderFrame)
            header.channel = channel
            header.class_id = class_id
            (header.body_size,) = _unpack_u64(buf, start + 4)
            header.properties = props
            return header
        return self._next_frame_slowly()

    def next_content(
        self, channel: int, class_id: int, limit: int
    ) -> tuple[ContentProperties, bytes | memoryview] | None:
        """A delivery's content in one step: the content header and the single body frame that
        follow its method frame, parsed together when both are whole in the buffer, on
        *channel*, of *class_id*, with weight 0 and a body of 1 to *limit* octets in one frame
        of the announced size. Anything else returns None and consumes nothing:
        :meth:`next_frame` then reads the frames one by one, with every check and error.
        """
        buf = self._buf
        pos = self._pos
        try:
            frame_type, got_channel, size, index = _unpack_frame_start(buf, pos)
        except struct.error:
            return None
        start = pos + 7
        end = start + size
        if (
            frame_type != FRAME_HEADER
            or got_channel != channel
            or index != class_id << 16  # the class id, then weight 0
            or size < 12
            or size > self._max_payload
            or len(buf) <= end
            or buf[end] != FRAME_END
        ):
            return None
        (body_size,) = _unpack_u64(buf, start + 4)
        if not 0 < body_size <= limit:
            return None
        try:
            body_type, body_channel, body_frame_size = _unpack_frame_header(buf, end + 1)
        except struct.error:
            return None
        body_start = end + 8
        body_end = body_start + body_frame_size
        if (
            body_type != FRAME_BODY
            or body_channel != channel
            or body_frame_size != body_size
            or body_frame_size > self._max_payload
            or len(buf) <= body_end
            or buf[body_end] != FRAME_END
        ):
            return None
        decode_properties = self._property_decoders.get(class_id)
        if decode_properties is None:
            return None
        try:
            props, offset = decode_properties(buf, start + 12)
        except _DECODE_ERRORS:
            return None
        if offset != end:
            return None
        # The one copy of the body (or a view), as in next_frame.
        payload: bytes | memoryview
        if type(buf) is bytes:
            payload = (
                buf[body_start:body_end]
                if body_frame_size < self._view_from
                else memoryview(buf)[body_start:body_end]
            )
        elif body_frame_size < _SMALL_BODY:
            payload = bytes(buf[body_start:body_end])
        else:
            payload = memoryview(buf)[body_start:body_end].tobytes()
        self._pos = body_end + 1
        return props, payload

    def _next_frame_slowly(self) -> Frame | None:
        """next_frame() for every frame, with every check and every error."""
        buf = self._buf
        pos = self._pos
        start = pos + 7
        if len(buf) < start:
            return None if self._body is None else self._finish_body()
        frame_type, channel, size = _unpack_frame_header(buf, pos)
        if size > self._max_payload or not FRAME_METHOD <= frame_type <= FRAME_BODY:
            # Oversized, heartbeat or unknown: all decided from the 7-octet header alone.
            return self._other_frame(frame_type, channel, size)
        end = start + size
        if len(buf) <= end:
            if frame_type == FRAME_BODY and size >= _SMALL_BODY:
                self._start_body(channel, size, start)
            return None
        if buf[end] != FRAME_END:
            self._bad_frame_end(frame_type, channel, size)

        if frame_type == FRAME_BODY:
            self._pos = end + 1
            return ContentBodyFrame(channel, bytes(buf[start:end]))

        if frame_type == FRAME_METHOD:
            if size < 4:
                self._short_payload(frame_type, channel, size)
            index = _unpack_u32(buf, start)[0]
            cls = self._methods.get(index)
            if cls is None:
                self._unknown_method(channel, size, index)
            try:
                method, offset = self._decoders[index](buf, start + 4)
            except _DECODE_ERRORS:
                self._bad_method(channel, size, cls, index)
            if offset != end:
                self._bad_method(channel, size, cls, index)
            self._pos = end + 1
            return MethodFrame(channel, method)

        # FRAME_HEADER
        if size < 12:
            self._short_payload(frame_type, channel, size)
        class_id, weight, body_size = _unpack_content_header(buf, start)
        props_cls = self._properties.get(class_id)
        if weight or props_cls is None:
            self._bad_header(channel, size, class_id, weight)
        try:
            props, offset = props_cls.decode(buf, start + 12)
        except _DECODE_ERRORS:
            self._bad_properties(channel, size, props_cls)
        if offset != end:
            self._bad_properties(channel, size, props_cls)
        self._pos = end + 1
        return ContentHeaderFrame(channel, class_id, body_size, props)

    # Error paths and rare frames live out of line to keep next_frame short.

    def _where(self, frame_type: int, channel: int, size: int) -> str:
        name = _FRAME_NAMES.get(frame_type, f"type {frame_type}")
        return (
            f"{name} frame on channel {channel} (payload size {size}) "
            f"at stream offset {self._trimmed + self._pos}"
        )

    def _other_frame(self, frame_type: int, channel: int, size: int) -> HeartbeatFrame | None:
        if frame_type == FRAME_HEARTBEAT and not size and not channel:
            end = self._pos + 7
            if len(self._buf) <= end:
                return None
            if self._buf[end] != FRAME_END:
                self._bad_frame_end(frame_type, channel, size)
            self._pos = end + 1
            return _HEARTBEAT
        where = self._where(frame_type, channel, size)
        if frame_type not in _FRAME_NAMES:
            raise RemoteProtocolError(
                f"{where}: unknown frame type {frame_type} (expected 1, 2, 3 or 8)",
                reply_code=_FRAME_ERROR,
            )
        if size > self._max_payload:
            raise RemoteProtocolError(
                f"{where}: frame of {size + _FRAME_OVERHEAD} octets exceeds "
                f"frame_max {self.frame_max}",
                reply_code=_FRAME_ERROR,
            )
        if size:
            raise RemoteProtocolError(
                f"{where}: a heartbeat frame must have an empty payload",
                reply_code=_FRAME_ERROR,
            )
        # RabbitMQ closes with UNEXPECTED_FRAME here, not FRAME_ERROR.
        raise RemoteProtocolError(
            f"{where}: a heartbeat must be on channel 0", reply_code=_UNEXPECTED_FRAME
        )

    def _short_payload(self, frame_type: int, channel: int, size: int) -> NoReturn:
        # RabbitMQ's analyze_frame rejects these shapes as frame errors, not syntax errors.
        if frame_type == FRAME_METHOD:
            need = "4 octets of class and method id"
        else:
            need = "12 octets of class id, weight and body size"
        raise RemoteProtocolError(
            f"{self._where(frame_type, channel, size)}: the payload is shorter than {need}",
            reply_code=_FRAME_ERROR,
        )

    def _unknown_method(self, channel: int, size: int, index: int) -> NoReturn:
        class_id, method_id = index >> 16, index & 0xFFFF
        raise RemoteProtocolError(
            f"{self._where(FRAME_METHOD, channel, size)}: unknown method ({class_id}, {method_id})",
            reply_code=_NOT_IMPLEMENTED,
            class_id=class_id,
            method_id=method_id,
        )

    def _bad_frame_end(self, frame_type: int, channel: int, size: int) -> NoReturn:
        found = self._buf[self._pos + 7 + size]
        raise RemoteProtocolError(
            f"{self._where(frame_type, channel, size)}: frame-end octet is 0x{found:02x}, "
            f"expected 0x{FRAME_END:02x}",
            reply_code=_FRAME_ERROR,
        )

    def _payload(self, size: int) -> bytes:
        start = self._pos + 7
        return bytes(self._buf[start : start + size])

    def _bad_method(self, channel: int, size: int, cls: type[Method], index: int) -> NoReturn:
        # Decode again from a copy bounded by the payload: what the first attempt read past its
        # end belongs to later frames, and must not change the error.
        detail, cause = _decode_problem(self._decoders[index], self._payload(size), 4)
        # The ids as received: a version may number a shared class differently (0-8's close).
        class_id, method_id = index >> 16, index & 0xFFFF
        raise RemoteProtocolError(
            f"{self._where(FRAME_METHOD, channel, size)}: cannot decode {cls.NAME} "
            f"({class_id}, {method_id}): {detail}",
            reply_code=_SYNTAX_ERROR,
            class_id=class_id,
            method_id=method_id,
        ) from cause

    def _bad_header(self, channel: int, size: int, class_id: int, weight: int) -> NoReturn:
        where = self._where(FRAME_HEADER, channel, size)
        if weight:
            raise RemoteProtocolError(
                f"{where}: content header weight is {weight}, must be 0",
                reply_code=_SYNTAX_ERROR,
                class_id=class_id,
            )
        # 502 rather than 540: content only follows a method of a known content class (an
        # unknown method already failed with 540), so a class without properties here is a
        # malformed header, not a feature we lack.
        raise RemoteProtocolError(
            f"{where}: no content class {class_id}", reply_code=_SYNTAX_ERROR, class_id=class_id
        )

    def _bad_properties(self, channel: int, size: int, cls: type[ContentProperties]) -> NoReturn:
        detail, cause = _decode_problem(cls.decode, self._payload(size), 12)
        raise RemoteProtocolError(
            f"{self._where(FRAME_HEADER, channel, size)}: cannot decode the properties of "
            f"class {cls.CLASS_ID}: {detail}",
            reply_code=_SYNTAX_ERROR,
            class_id=cls.CLASS_ID,
        ) from cause


_MethodDecoder: TypeAlias = "Callable[[Buffer, int], tuple[Method, int]]"
_PropertiesDecoder: TypeAlias = "Callable[[Buffer, int], tuple[ContentProperties, int]]"


#: Decoders that read more than their class's own fields: another implementation's dialect of a
#: version, tolerated where it costs nothing (``_protocol`` registers 0-8's basic.consume, which
#: qpid-python's 0-8 sends with 0-9-1's ``arguments`` table after ``nowait``).
LENIENT_DECODERS: Final[dict[type[Method], _MethodDecoder]] = {}


def _decoders_of(methods: Mapping[int, type[Method]]) -> dict[int, _MethodDecoder]:
    return {index: LENIENT_DECODERS.get(cls, cls.decode) for index, cls in methods.items()}


_DEFAULT_DECODERS: Final = _decoders_of(METHODS)
_DEFAULT_PROPERTY_DECODERS: Final[dict[int, _PropertiesDecoder]] = {
    class_id: cls.decode for class_id, cls in PROPERTIES.items()
}


@final
class _PartialBody:
    """A large body frame whose payload is still arriving: the pieces as received, joined once."""

    __slots__ = ("channel", "end_octet", "held", "need", "offset", "parts", "size")

    def __init__(self, channel: int, size: int, offset: int, first: memoryview, need: int) -> None:
        self.channel = channel
        self.size = size
        self.offset = offset  # stream offset of the frame, for errors
        # The payload so far; the frame-end octet is kept apart, checked when the frame is read.
        self.parts: list[Buffer] = [first]
        self.need = need  # octets still missing, frame-end included
        self.end_octet = 0
        # What arrived after the frame-end, until the frame is read: (octets, offset to start).
        self.held: list[tuple[bytes, int]] = []

    def held_octets(self) -> int:
        payload = sum(memoryview(part).nbytes for part in self.parts)
        after = sum(len(data) - skip for data, skip in self.held)
        return 7 + payload + (0 if self.need else 1) + after


def _keep(data: Buffer, start: int, size: int) -> Buffer:
    """``data[start:start + size]`` in a form that stays valid after feed() returns: a view when
    *data* can't change (bytes, or a view of bytes), else a copy."""
    view = memoryview(data)[start : start + size]
    if type(data) is bytes or (type(data) is memoryview and type(data.obj) is bytes):
        return view
    return bytes(view)


def _decode_problem(
    decode: Callable[[Buffer, int], tuple[object, int]], payload: bytes, offset: int
) -> tuple[str, Exception | None]:
    """Say why *payload* does not decode to exactly its own length."""
    try:
        _, end = decode(payload, offset)
    except _DECODE_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}", exc
    if end < len(payload):
        return f"{len(payload) - end} octets of the payload left over", None
    return f"the fields run {end - len(payload)} octets past the payload", None


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

# What a generated encoder raises for a bad value: ValueError (bytearray.append of a long short
# string's length, UnicodeEncodeError), struct.error / OverflowError (int out of range),
# AttributeError / TypeError (wrong type), LocalProtocolError (the table codec),
# RemoteProtocolError (a received table, re-sent before anyone read it, is malformed).
_ENCODE_ERRORS: Final = (
    struct.error,
    ValueError,
    OverflowError,
    TypeError,
    AttributeError,
    LocalProtocolError,
    RemoteProtocolError,
)
_FRAME_END_OCTET: Final = bytes([FRAME_END])
_pack_frame_header: Final = _FRAME_HEADER.pack
_pack_u32_into: Final = _U32.pack_into
#: A content header frame's 7-octet header and its class id, weight and body size.
_pack_content_header_start: Final = struct.Struct(">BHIHHQ").pack


def encode_method_frame(
    out: bytearray, channel: int, method: Method, *, frame_max: int = FRAME_MIN_SIZE
) -> None:
    """Append one method frame to *out*.

    :param frame_max: the peer's limit on frame size (the spec's minimum until tune).
    :raises LocalProtocolError: a field can't be encoded (502) or the frame exceeds *frame_max*
        (501); *out* is then left as it was.
    """
    start = len(out)
    try:
        out += _pack_frame_header(FRAME_METHOD, channel, 0)
        method.encode(out)
    except _ENCODE_ERRORS as exc:
        del out[start:]
        raise _method_error(channel, method, exc) from exc
    # The size is known only now, so the frame_max check costs one comparison here.
    size = len(out) - start - 7
    if size > frame_max - _FRAME_OVERHEAD:
        del out[start:]
        raise _too_large(type(method).NAME, size, frame_max, type(method))
    _pack_u32_into(out, start + 3, size)
    out.append(FRAME_END)


def encode_content_header(
    out: bytearray,
    channel: int,
    class_id: int,
    body_size: int,
    properties: ContentProperties,
    *,
    frame_max: int = FRAME_MIN_SIZE,
) -> None:
    """Append one content header frame to *out*.

    :raises LocalProtocolError: a property can't be encoded (502) or the frame exceeds
        *frame_max* (501); *out* is then left as it was.
    """
    start = len(out)
    try:
        out += _pack_content_header_start(FRAME_HEADER, channel, 0, class_id, 0, body_size)
        properties.encode(out)
    except _ENCODE_ERRORS as exc:
        del out[start:]
        raise _properties_error(channel, class_id, body_size, properties, exc) from exc
    size = len(out) - start - 7
    if size > frame_max - _FRAME_OVERHEAD:
        del out[start:]
        raise _too_large("content header", size, frame_max)
    _pack_u32_into(out, start + 3, size)
    out.append(FRAME_END)


def encode_content(
    out: bytearray,
    channel: int,
    method: Method,
    properties: ContentProperties,
    body: Buffer,
    frame_max: int,
) -> None:
    """Append a content-bearing method, its header and its body frames to *out*.

    The body is split into frames of at most ``frame_max - 8`` octets; an empty body gets no body
    frame. On error nothing is written.
    """
    total = _encode_head(out, channel, method, properties, body, frame_max)
    if not total:
        return
    limit = frame_max - _FRAME_OVERHEAD
    if total <= limit:
        out += _pack_frame_header(FRAME_BODY, channel, total)
        out += body
        out.append(FRAME_END)
        return
    _append_body_frames(out, channel, body, total, limit)


def _append_body_frames(out: bytearray, channel: int, body: Buffer, total: int, limit: int) -> None:
    """Append a body of *total* octets as frames of at most *limit* octets of payload."""
    view = _octets(body)
    for offset in range(0, total, limit):
        piece = view[offset : offset + limit]
        out += _pack_frame_header(FRAME_BODY, channel, piece.nbytes)
        out += piece
        out.append(FRAME_END)


#: basic.publish's method frame up to its exchange: frame header, class and method id, ticket.
_pack_publish_start: Final = struct.Struct(">BHIHHH").pack
#: The publish's bits and frame end, then the content header frame up to its property flags.
_pack_publish_end: Final = struct.Struct(">BBBHIHHQ").pack
#: The header frame's end, then a body frame's header.
_pack_body_start: Final = struct.Struct(">BBHI").pack
_PUBLISH_CLASS: Final = BasicPublish.CLASS_ID
_PUBLISH_METHOD: Final = BasicPublish.METHOD_ID


def encode_publish(
    out: bytearray,
    channel: int,
    method: BasicPublish,
    properties: BasicProperties,
    body: bytes | bytearray,
    frame_max: int,
) -> bool:
    """Append what :func:`encode_content` would for a ``basic.publish`` with a ``bytes`` or
    ``bytearray`` body, in fewer steps; False (nothing written) where it can't, for
    :func:`encode_content` to raise its usual error."""
    start = len(out)
    try:
        exchange = method.exchange.encode()
        routing_key = method.routing_key.encode()
        lengths = len(exchange), len(routing_key)
        if lengths[0] > 0xFF or lengths[1] > 0xFF:
            return False
        total = len(body)
        # 9: class and method id, ticket, the two lengths and the bits.
        out += _pack_publish_start(
            FRAME_METHOD, channel, 9 + lengths[0] + lengths[1],
            _PUBLISH_CLASS, _PUBLISH_METHOD, method.ticket,
        )  # fmt: skip
        out.append(lengths[0])
        out += exchange
        out.append(lengths[1])
        out += routing_key
        out += _pack_publish_end(
            (1 if method.mandatory else 0) | (2 if method.immediate else 0),
            FRAME_END, FRAME_HEADER, channel, 0, _PUBLISH_CLASS, 0, total,
        )  # fmt: skip
        middle = len(out) - 19  # where the header frame starts
        properties.encode(out)
    except Exception:
        del out[start:]
        return False
    header_size = len(out) - middle - 7
    limit = frame_max - _FRAME_OVERHEAD
    if header_size > limit or 9 + lengths[0] + lengths[1] > limit:
        del out[start:]
        return False
    _pack_u32_into(out, middle + 3, header_size)
    if not total:
        out.append(FRAME_END)
        return True
    if total <= limit:
        out += _pack_body_start(FRAME_END, FRAME_BODY, channel, total)
        out += body
        out.append(FRAME_END)
        return True
    out.append(FRAME_END)
    _append_body_frames(out, channel, body, total, limit)
    return True


def content_buffers(
    channel: int,
    method: Method,
    properties: ContentProperties,
    body: Buffer,
    frame_max: int,
) -> list[Buffer]:
    """The frames :func:`encode_content` writes, as buffers for ``writelines``/``sendmsg``.

    Body chunks are ``memoryview`` slices of *body*, never copies, so *body* must not change
    (and a ``bytearray`` body can't be resized) until the buffers are written. The small frame
    headers and frame-ends between chunks are combined into one buffer each.
    """
    head = bytearray()
    total = _encode_head(head, channel, method, properties, body, frame_max)
    buffers: list[Buffer] = [head]
    if not total:
        return buffers
    limit = frame_max - _FRAME_OVERHEAD
    view = _octets(body)
    head += _pack_frame_header(FRAME_BODY, channel, min(limit, total))
    buffers.append(view[:limit])
    for offset in range(limit, total, limit):
        piece = view[offset : offset + limit]
        buffers.append(_FRAME_END_OCTET + _pack_frame_header(FRAME_BODY, channel, piece.nbytes))
        buffers.append(piece)
    buffers.append(_FRAME_END_OCTET)
    return buffers


def _encode_head(
    out: bytearray,
    channel: int,
    method: Method,
    properties: ContentProperties,
    body: Buffer,
    frame_max: int,
) -> int:
    """Append the method and content header frames; return the body size in octets."""
    cls = type(method)
    if not cls.HAS_CONTENT or properties.CLASS_ID != cls.CLASS_ID:
        raise _content_mismatch(cls, properties)
    body_type = type(body)
    total = len(body) if body_type is bytes or body_type is bytearray else _buffer_size(body)
    start = len(out)
    middle = 0  # where the header frame starts, once the method is in
    try:
        out += _pack_frame_header(FRAME_METHOD, channel, 0)
        method.encode(out)
        out.append(FRAME_END)
        middle = len(out)
        out += _pack_content_header_start(FRAME_HEADER, channel, 0, cls.CLASS_ID, 0, total)
        properties.encode(out)
    except _ENCODE_ERRORS as exc:
        del out[start:]
        if not middle:
            raise _method_error(channel, method, exc) from exc
        raise _properties_error(channel, cls.CLASS_ID, total, properties, exc) from exc
    method_size = middle - start - _FRAME_OVERHEAD
    header_size = len(out) - middle - 7
    limit = frame_max - _FRAME_OVERHEAD
    if method_size > limit or header_size > limit:
        del out[start:]
        if method_size > limit:
            raise _too_large(cls.NAME, method_size, frame_max, cls)
        raise _too_large("content header", header_size, frame_max)
    _pack_u32_into(out, start + 3, method_size)
    _pack_u32_into(out, middle + 3, header_size)
    out.append(FRAME_END)
    return total


def _buffer_size(body: Buffer) -> int:
    # Checked before anything is written: a body that can't be copied must not leave half a
    # message in the output.
    view = memoryview(body)
    if not view.c_contiguous:
        raise ValueError("a message body must be a C-contiguous buffer")
    return view.nbytes


def _octets(body: Buffer) -> memoryview:
    # Slicing counts items; the frames count octets, whatever item format the caller's buffer has.
    view = memoryview(body)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


# Errors are built out of line, so the writers above stay free of checks.


def _method_error(channel: int, method: Method, exc: Exception) -> LocalProtocolError:
    cls = type(method)
    return LocalProtocolError(
        f"cannot encode {cls.NAME} ({cls.CLASS_ID}, {cls.METHOD_ID}) on channel {channel!r}: "
        f"{_explain(method, channel, exc, optional=False)}",
        reply_code=_SYNTAX_ERROR,
        class_id=cls.CLASS_ID,
        method_id=cls.METHOD_ID,
    )


def _properties_error(
    channel: int, class_id: int, body_size: int, properties: ContentProperties, exc: Exception
) -> LocalProtocolError:
    if not 0 <= class_id <= 0xFFFF or not 0 <= body_size <= INT_LIMITS["longlong"]:
        detail = f"class id {class_id!r} or body size {body_size!r} out of range"
    else:
        detail = _explain(properties, channel, exc, optional=True)
    return LocalProtocolError(
        f"cannot encode a content header for class {class_id} on channel {channel!r}: {detail}",
        reply_code=_SYNTAX_ERROR,
        class_id=class_id,
    )


def _too_large(
    what: str, size: int, frame_max: int, cls: type[Method] | None = None
) -> LocalProtocolError:
    return LocalProtocolError(
        f"{what} frame of {size + _FRAME_OVERHEAD} octets exceeds frame_max {frame_max}",
        reply_code=_FRAME_ERROR,
        class_id=0 if cls is None else cls.CLASS_ID,
        method_id=0 if cls is None else cls.METHOD_ID,
    )


def _content_mismatch(cls: type[Method], properties: ContentProperties) -> LocalProtocolError:
    if not cls.HAS_CONTENT:
        text = f"{cls.NAME} carries no content"
    else:
        text = (
            f"{cls.NAME} needs properties of class {cls.CLASS_ID}, got "
            f"{type(properties).__name__} (class {properties.CLASS_ID})"
        )
    return LocalProtocolError(
        text, reply_code=_COMMAND_INVALID, class_id=cls.CLASS_ID, method_id=cls.METHOD_ID
    )


def _explain(
    value: Method | ContentProperties, channel: int, exc: Exception, *, optional: bool
) -> str:
    """Name the field that made an encoder fail; the encoders themselves check nothing."""
    if type(channel) is not int or not 0 <= channel <= 0xFFFF:
        return f"channel must be an int in 0..65535, got {type(channel).__name__} {channel!r}"
    if isinstance(exc, RemoteProtocolError):  # already names the received table
        return exc.reply_text
    fields = type(value).FIELDS
    for name, wire in fields:
        field_value: object = getattr(value, name, None)
        if field_value is None and optional:
            continue
        problem = _field_problem(wire, field_value)
        if problem is not None:
            return f"field {name!r} ({wire}): {problem}"
    tables = [name for name, wire in fields if wire == "table"]
    if tables and isinstance(exc, LocalProtocolError):
        names = " or ".join(repr(name) for name in tables)
        return f"field {names} (table): {exc.reply_text}"
    return f"{type(exc).__name__}: {exc}"


def _field_problem(wire: str, value: object) -> str | None:
    kind = type(value).__name__
    limit = INT_LIMITS.get(wire)
    if limit is not None:
        if not isinstance(value, int):
            return f"expected int, got {kind}"
        if not 0 <= value <= limit:
            return f"{kind} {value} out of range 0..{limit}"
    elif wire == "shortstr":
        if not isinstance(value, str):
            return f"expected str, got {kind}"
        try:
            size = len(value.encode())
        except UnicodeEncodeError as exc:
            return f"str is not encodable as UTF-8 ({exc.reason})"
        if size > 0xFF:
            return f"str of {size} octets, more than 255"
    elif wire == "longstr":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            return f"expected bytes, got {kind}"
        if len(value) > _MAX_FRAME_SIZE:
            return f"{kind} of {len(value)} octets, more than {_MAX_FRAME_SIZE}"
    elif wire == "table" and not isinstance(value, Mapping):
        return f"expected a mapping, got {kind}"
    # Bits are encoded by truth value: any value is acceptable.
    return None
