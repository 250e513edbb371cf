"""AMQP 0-10 framing: protocol headers, frames, segments and assemblies.

A frame is a 12-octet header and a payload; there is no frame-end octet::

    0: 00 00 B E b e | segment type | size (u16, header included)
    4: 0             | 0000 track   | channel (u16)
    8: 0 0 0 0

``b``/``e`` mark the first and last frame of a segment, ``B``/``E`` (repeated on every frame of a
segment) the first and last segment of an assembly. A control is one control segment on track 0.
A command is a command segment on track 1, followed, for the commands that define them
(``message.transfer``), by a header segment (coded structs) and a body segment (opaque octets),
the last one carrying ``E``. Frames of one channel arrive in order across both tracks, so a
control may come between the frames of a large command: the state is kept per channel and track.

:class:`FrameReader` cuts bytes into :class:`Frame` objects; :class:`AssemblyReader` checks the
flags and the order of segments and turns frames into :class:`Assembly` objects with the decoded
control or command. :func:`encode_control` and :func:`encode_command` write assemblies, split
into frames of at most ``max_frame_size`` octets. Every violation is a
:class:`~amqp_sansio.RemoteProtocolError` with reply code 501 (``framing-error``), except an
assembly larger than ``max_message_size``, or unfinished segments on a connection holding more than
``max_unfinished`` octets together (320, ``connection-forced``).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final, final

from .._errors import RemoteProtocolError
from ._generated.spec_0_10 import COMMANDS, CONTROLS, decode_struct32
from ._types import UnknownStruct

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._method import Buffer
    from ._types import ByteString, Command, Control, Struct

__all__ = [
    "FIRST_FRAME",
    "FIRST_SEGMENT",
    "FRAME_HEADER_SIZE",
    "LAST_FRAME",
    "LAST_SEGMENT",
    "PROTOCOL_HEADER_0_10",
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
    "decode_header_segment",
    "encode_command",
    "encode_control",
    "encode_header_segment",
    "frame_command",
    "is_protocol_header_0_10",
    "split_segment",
]

#: ``AMQP``, protocol class 1, instance 1, version 0-10.
PROTOCOL_HEADER_0_10: Final = b"AMQP\x01\x01\x00\x0a"
FRAME_HEADER_SIZE: Final = 12
#: Frame flags (the first octet's low four bits).
FIRST_SEGMENT: Final = 0x08
LAST_SEGMENT: Final = 0x04
FIRST_FRAME: Final = 0x02
LAST_FRAME: Final = 0x01
#: Segment types.
SEGMENT_CONTROL: Final = 0
SEGMENT_COMMAND: Final = 1
SEGMENT_HEADER: Final = 2
SEGMENT_BODY: Final = 3
#: Tracks.
TRACK_CONTROL: Final = 0
TRACK_COMMAND: Final = 1
#: The largest frame the u16 size field allows.
MAX_FRAME_SIZE: Final = 0xFFFF

_SEGMENT_NAMES: Final = ("control", "command", "header", "body")
_HEADER: Final = struct.Struct(">BBHBBHI")
_pack_header: Final = _HEADER.pack
_unpack_header: Final = _HEADER.unpack_from
#: Bodies at least this large are handed to ``buffers_to_send`` as memoryview slices.
PASSTHROUGH: Final = 64 * 1024


def is_protocol_header_0_10(octets: Buffer) -> bool:
    """Whether *octets* start with the AMQP 0-10 protocol header (a pure function for servers
    that accept several protocol versions on one port: they read 8 octets, ask this, and hand
    the connection to a 0-10 server core that was told the header is already consumed)."""
    return bytes(memoryview(octets)[:8]) == PROTOCOL_HEADER_0_10


def _framing_error(text: str, *, class_id: int = 0, method_id: int = 0) -> RemoteProtocolError:
    return RemoteProtocolError(text, reply_code=501, class_id=class_id, method_id=method_id)


@final
class Frame:
    """One frame: flags (``FIRST_SEGMENT``...), segment type, track, channel, payload."""

    __slots__ = ("channel", "flags", "payload", "track", "type")

    def __init__(self, flags: int, type: int, track: int, channel: int, payload: bytes) -> None:
        self.flags = flags
        self.type = type
        self.track = track
        self.channel = channel
        self.payload = payload

    def __repr__(self) -> str:
        return (
            f"Frame(flags={self.flags:#x}, type={_SEGMENT_NAMES[self.type]}, "
            f"track={self.track}, channel={self.channel}, payload={len(self.payload)} octets)"
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not Frame:
            return NotImplemented
        return (self.flags, self.type, self.track, self.channel, self.payload) == (
            other.flags,
            other.type,
            other.track,
            other.channel,
            other.payload,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value


_new: Final = object.__new__


@final
class FrameReader:
    """Cuts received octets into frames, checking every header before buffering a payload.

    ``max_frame_size`` (at most 65535, the u16 size field's limit) is the largest frame
    accepted; the connection lowers it to the negotiated value.
    """

    __slots__ = ("_data", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._data: bytes | bytearray = b""
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Octets received and not yet returned as frames."""
        return len(self._data) - self._pos

    def feed(self, data: Buffer) -> None:
        """Add received octets."""
        held = self._data
        pos = self._pos
        if pos >= len(held):  # everything before was consumed: keep bytes as they are
            self._data = data if type(data) is bytes else bytes(data)
            self._pos = 0
            return
        if type(held) is bytes and len(held) - pos <= len(data):
            # A partial frame and a read at least as large: one bytes of both, so frames are
            # sliced from bytes (one copy each). Smaller reads go to a growing bytearray, so a
            # large frame arriving in small pieces is not copied again for each piece.
            self._data = held[pos:] + (data if type(data) is bytes else bytes(data))
            self._pos = 0
            return
        if type(held) is bytes:
            grown = bytearray(memoryview(held)[pos:])
        else:
            assert isinstance(held, bytearray)
            grown = held
            if pos:
                del grown[:pos]
        grown += data
        self._data = grown
        self._pos = 0

    def discard(self) -> None:
        """Forget every octet received and not yet returned as a frame."""
        self._data = b""
        self._pos = 0

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None until more octets arrive.

        :raises RemoteProtocolError: (501) a malformed frame header.
        """
        data = self._data
        pos = self._pos
        if len(data) - pos < FRAME_HEADER_SIZE:
            return None
        flags, seg_type, size, reserved, track, channel, zeros = _unpack_header(data, pos)
        if flags & 0xF0 or seg_type > 3 or reserved or track > 1 or zeros:
            raise self._bad_header(flags, seg_type, reserved, track, zeros)
        if size < FRAME_HEADER_SIZE or size > self.max_frame_size:
            raise _framing_error(
                f"frame size {size} on channel {channel} is outside "
                f"{FRAME_HEADER_SIZE}..{self.max_frame_size}"
            )
        end = pos + size
        if end > len(data):
            return None
        frame = _new(Frame)
        frame.flags = flags
        frame.type = seg_type
        frame.track = track
        frame.channel = channel
        if type(data) is bytes:
            frame.payload = data[pos + FRAME_HEADER_SIZE : end]
        else:  # a bytearray: one copy, through a view released at once
            frame.payload = bytes(memoryview(data)[pos + FRAME_HEADER_SIZE : end])
        self._pos = end
        return frame

    @staticmethod
    def _bad_header(
        flags: int, seg_type: int, reserved: int, track: int, zeros: int
    ) -> RemoteProtocolError:
        if flags & 0xC0:
            what = f"version bits {flags >> 6} (must be 0)"
        elif flags & 0xF0:
            what = f"reserved flag bits {flags:#04x}"
        elif seg_type > 3:
            what = f"unknown segment type {seg_type}"
        elif track > 1:
            what = f"unknown track {track}"
        else:
            what = f"non-zero reserved octets ({reserved:#x}, {zeros:#x})"
        return _framing_error(f"malformed frame header: {what}")


# --- assemblies ------------------------------------------------------------------------------


@final
class Assembly:
    """A whole control or command, decoded: what :class:`AssemblyReader` returns.

    ``op`` is the control or the command; ``sync`` the command's ``session.header`` sync bit;
    ``headers`` the header segment's structs (None without a header segment) and ``body`` the
    body segment (None without one: an empty body segment is ``b""``); ``size`` the octets of
    the header and body segments (what byte credit counts).
    """

    __slots__ = ("body", "channel", "headers", "op", "size", "sync")

    def __init__(
        self,
        channel: int,
        op: Control | Command,
        sync: bool = False,
        headers: tuple[Struct, ...] | None = None,
        body: bytes | None = None,
        size: int = 0,
    ) -> None:
        self.channel = channel
        self.op = op
        self.sync = sync
        self.headers = headers
        self.body = body
        self.size = size

    def __repr__(self) -> str:
        return (
            f"Assembly(channel={self.channel}, op={self.op!r}, sync={self.sync}, "
            f"headers={self.headers!r}, body={self.body!r})"
        )


def _decode_control(payload: bytes) -> Control:
    """The control in a control segment's payload."""
    cls = CONTROLS.get(_index(payload))
    if cls is None:
        raise _unknown("control", payload)
    try:
        op, offset = cls.decode_fields(payload, 2)
    except (ValueError, IndexError, struct.error) as exc:
        raise _malformed(cls.NAME, exc, cls.CLASS_CODE, cls.CODE) from None
    _check_end(cls.NAME, offset, len(payload), cls.CLASS_CODE, cls.CODE)
    return op


def _decode_command(payload: bytes) -> tuple[Command, bool]:
    """The command in a command segment's payload, and its ``session.header`` sync bit."""
    cls = COMMANDS.get(_index(payload))
    if cls is None:
        raise _unknown("command", payload)
    try:
        size = payload[2]  # session.header: size 1, then one flag octet (bit 0: sync)
        flags = payload[3]
        if size != 1 or flags & 0xFE:
            raise ValueError(
                f"session.header of {size} octets, flags {flags:#x}: only the sync bit is defined"
            )
        op, offset = cls.decode_fields(payload, 4)
    except (ValueError, IndexError, struct.error) as exc:
        raise _malformed(cls.NAME, exc, cls.CLASS_CODE, cls.CODE) from None
    _check_end(cls.NAME, offset, len(payload), cls.CLASS_CODE, cls.CODE)
    return op, flags == 1


def _index(payload: bytes) -> int:
    if len(payload) < 2:
        raise _framing_error(f"a {len(payload)}-octet segment can't hold a control or command")
    return payload[0] << 8 | payload[1]


def _unknown(kind: str, payload: bytes) -> RemoteProtocolError:
    return _framing_error(
        f"unknown {kind} {payload[0]:#04x}/{payload[1]:#04x}",
        class_id=payload[0],
        method_id=payload[1],
    )


def _malformed(name: str, exc: Exception, class_code: int, code: int) -> RemoteProtocolError:
    return _framing_error(f"malformed {name}: {exc}", class_id=class_code, method_id=code)


def _check_end(name: str, offset: int, end: int, class_code: int, code: int) -> None:
    if offset == end:
        return
    if offset < end:
        text = f"malformed {name}: {end - offset} octets after its fields"
    else:
        text = f"malformed {name}: its fields run {offset - end} octets past the segment"
    raise _framing_error(text, class_id=class_code, method_id=code)


def decode_header_segment(payload: ByteString) -> tuple[Struct, ...]:
    """The coded structs of a header segment, in order; unknown codes come back as
    :class:`UnknownStruct`.

    :raises RemoteProtocolError: (501) the segment is malformed.
    """
    entries: list[Struct] = []
    offset = 0
    end = len(payload)
    try:
        while offset < end:
            value, offset = decode_struct32(payload, offset, 0)
            entries.append(value)
    except (ValueError, IndexError, struct.error) as exc:
        raise _framing_error(f"malformed header segment: {exc}") from None
    return tuple(entries)


def encode_header_segment(out: bytearray, entries: Sequence[Struct]) -> None:
    """Append header segment entries: each a coded struct with a 4-octet size."""
    for entry in entries:
        if entry.SIZE != 4 or (entry.CODE is None and type(entry) is not UnknownStruct):
            raise ValueError(f"{entry.NAME} is not a coded struct: it can't be a header entry")
        entry.encode(out)


@final
class _Track:
    """What one channel's track is in the middle of."""

    __slots__ = (
        "asm",
        "command",
        "header_size",
        "headers",
        "parts",
        "seg_flags",
        "seg_size",
        "seg_type",
        "sync",
    )

    def __init__(self) -> None:
        # The segment being received (frames between b and e), or seg_type -1.
        self.seg_type = -1
        self.seg_flags = 0
        self.parts: list[bytes] = []
        self.seg_size = 0
        # The command assembly being received after its command segment: its size so far.
        self.asm = -1
        self.command: Command | None = None
        self.sync = False
        self.headers: tuple[Struct, ...] | None = None
        self.header_size = 0


@final
class AssemblyReader:
    """Turns frames into assemblies, checking flags and segment order per channel and track.

    ``max_message_size`` bounds an assembly's segments, checked before a payload is kept.
    ``max_unfinished`` bounds the octets of segments under way on all channels together (what
    :attr:`unfinished` counts): a peer that starts bodies on many sessions and never ends
    them holds at most that much, whatever ``max_message_size`` allows each one.
    """

    __slots__ = ("_tracks", "max_message_size", "max_unfinished", "unfinished")

    def __init__(
        self, max_message_size: int = 128 * 1024 * 1024, max_unfinished: int | None = None
    ) -> None:
        self.max_message_size = max_message_size
        self.max_unfinished = max_message_size if max_unfinished is None else max_unfinished
        #: Octets held in segments whose last frame has not come yet, on every track.
        self.unfinished = 0
        self._tracks: dict[int, _Track] = {}

    def in_progress(self, channel: int) -> bool:
        """Whether a segment or assembly on *channel* is incomplete."""
        for track in (channel << 1, channel << 1 | 1):
            state = self._tracks.get(track)
            if state is not None and (state.seg_type >= 0 or state.asm >= 0):
                return True
        return False

    def abort(self, channel: int) -> None:
        """Forget a partly received command on *channel* (``session.gap`` covered it)."""
        state = self._tracks.pop(channel << 1 | 1, None)
        if state is not None and state.seg_type >= 0:
            self.unfinished -= state.seg_size

    def receive(self, frame: Frame) -> Assembly | None:
        """Take one frame; return the assembly it completes, or None.

        :raises RemoteProtocolError: (501) flags or segment order are wrong, a segment does not
            decode; (320) an assembly exceeds ``max_message_size``.
        """
        seg_type = frame.type
        track = frame.track
        if (seg_type == 0) != (track == 0):
            raise _framing_error(
                f"a {_SEGMENT_NAMES[seg_type]} segment on track {track} "
                f"(channel {frame.channel}): controls go on track 0, commands on track 1"
            )
        key = frame.channel << 1 | track
        state = self._tracks.get(key)
        if state is None:
            state = self._tracks[key] = _Track()
        flags = frame.flags
        payload = frame.payload
        if state.seg_type < 0:
            if flags & 3 == 3:  # the usual case: a whole segment in one frame
                if seg_type == 1 and state.asm < 0 and flags & FIRST_SEGMENT:
                    # a command segment: one frame, assembly begins (checks of _begin_segment)
                    if len(payload) > self.max_message_size:
                        self._check_size(state, len(payload), frame.channel)
                    return self._segment_done(state, frame, payload)
                self._begin_segment(state, frame)
                return self._segment_done(state, frame, payload)
            if not flags & FIRST_FRAME:
                raise _framing_error(
                    f"a {_SEGMENT_NAMES[seg_type]} frame on channel {frame.channel} continues a "
                    "segment that never began"
                )
            self._begin_segment(state, frame)
            self._hold(len(payload), frame.channel)
            state.seg_type = seg_type
            state.seg_flags = flags & (FIRST_SEGMENT | LAST_SEGMENT)
            state.parts = [payload]
            state.seg_size = len(payload)
            return None
        if (
            flags & FIRST_FRAME
            or seg_type != state.seg_type
            or flags & (FIRST_SEGMENT | LAST_SEGMENT) != state.seg_flags
        ):
            raise _framing_error(
                f"a {_SEGMENT_NAMES[seg_type]} frame (flags {flags:#x}) on channel "
                f"{frame.channel} interrupts a {_SEGMENT_NAMES[state.seg_type]} segment"
            )
        size = state.seg_size + len(payload)
        self._check_size(state, size, frame.channel)
        if not flags & LAST_FRAME:
            self._hold(len(payload), frame.channel)
            state.seg_size = size
            state.parts.append(payload)
            return None
        self.unfinished -= state.seg_size
        state.seg_size = size
        state.parts.append(payload)
        whole = b"".join(state.parts)
        state.parts = []
        state.seg_type = -1
        return self._segment_done(state, frame, whole)

    def _hold(self, octets: int, channel: int) -> None:
        """Count *octets* of an unfinished segment, refusing them past ``max_unfinished``."""
        unfinished = self.unfinished + octets
        if unfinished > self.max_unfinished:
            raise RemoteProtocolError(
                f"unfinished segments would hold {unfinished} octets with this frame on "
                f"channel {channel}, over the connection's bound of {self.max_unfinished}",
                reply_code=320,
            )
        self.unfinished = unfinished

    def _check_size(self, state: _Track, size: int, channel: int) -> None:
        if max(state.asm, 0) + size > self.max_message_size:
            raise RemoteProtocolError(
                f"an assembly on channel {channel} exceeds max_message_size "
                f"{self.max_message_size}",
                reply_code=320,
            )

    def _begin_segment(self, state: _Track, frame: Frame) -> None:
        """Check that a segment may begin here (its first frame)."""
        seg_type = frame.type
        flags = frame.flags
        self._check_size(state, len(frame.payload), frame.channel)
        if seg_type == SEGMENT_CONTROL:
            if flags & (FIRST_SEGMENT | LAST_SEGMENT) != FIRST_SEGMENT | LAST_SEGMENT:
                raise _framing_error(
                    f"a control segment on channel {frame.channel} without both the first and "
                    "last segment flags: a control is one segment"
                )
            return
        if seg_type == SEGMENT_COMMAND:
            if not flags & FIRST_SEGMENT or state.asm >= 0:
                raise _framing_error(
                    f"a command segment on channel {frame.channel} "
                    + (
                        "before the previous command's last segment"
                        if state.asm >= 0
                        else "without the first segment flag"
                    )
                )
            return
        name = _SEGMENT_NAMES[seg_type]
        if state.asm < 0 or flags & FIRST_SEGMENT:
            raise _framing_error(
                f"a {name} segment on channel {frame.channel} "
                + ("with the first segment flag" if state.asm >= 0 else "without a command")
            )
        if seg_type == SEGMENT_HEADER and state.headers is not None:
            raise _framing_error(f"a second header segment on channel {frame.channel}")
        if seg_type == SEGMENT_BODY and not flags & LAST_SEGMENT:
            raise _framing_error(
                f"a body segment on channel {frame.channel} without the last segment flag: "
                "the body is an assembly's last segment"
            )

    def _segment_done(self, state: _Track, frame: Frame, payload: bytes) -> Assembly | None:
        seg_type = frame.type
        last = frame.flags & LAST_SEGMENT
        if seg_type == SEGMENT_CONTROL:
            return Assembly(frame.channel, _decode_control(payload))
        if seg_type == SEGMENT_COMMAND:
            command, sync = _decode_command(payload)
            if last:
                return Assembly(frame.channel, command, sync)
            if not command.SEGMENTS:
                raise _framing_error(
                    f"{command.NAME} on channel {frame.channel} is followed by segments it "
                    "does not define",
                    class_id=command.CLASS_CODE,
                    method_id=command.CODE,
                )
            state.asm = len(payload)
            state.command = command
            state.sync = sync
            state.headers = None
            state.header_size = 0
            return None
        state.asm += len(payload)
        command_op = state.command
        assert command_op is not None
        if seg_type == SEGMENT_HEADER:
            headers = decode_header_segment(payload)
            if not last:
                state.headers = headers
                state.header_size = len(payload)
                return None
            self._end_assembly(state)
            return Assembly(frame.channel, command_op, state.sync, headers, None, len(payload))
        headers_seen = state.headers
        size = state.header_size + len(payload)
        self._end_assembly(state)
        return Assembly(frame.channel, command_op, state.sync, headers_seen, payload, size)

    @staticmethod
    def _end_assembly(state: _Track) -> None:
        state.asm = -1
        state.command = None
        state.headers = None


#: Frame flags of the segments of a command assembly sent as one frame each (a transfer).
_WHOLE_COMMAND: Final = FIRST_SEGMENT | FIRST_FRAME | LAST_FRAME
_WHOLE_HEADER: Final = FIRST_FRAME | LAST_FRAME
_WHOLE_BODY: Final = LAST_SEGMENT | FIRST_FRAME | LAST_FRAME


def take_command_assembly(reader: FrameReader, assembler: AssemblyReader) -> Assembly | None:
    """What :meth:`AssemblyReader.receive` makes of the next three frames in the usual case of
    a received transfer, without a :class:`Frame` for each: a command, a header and a body
    segment, each one whole frame on the same channel's command track, no assembly under way
    there. None, with nothing taken, for anything else: the frame by frame path reads it and
    raises its errors."""
    data = reader._data
    pos = reader._pos
    available = len(data)
    if type(data) is not bytes or available - pos < 3 * FRAME_HEADER_SIZE:
        return None
    flags, seg_type, size, reserved, track, channel, zeros = _unpack_header(data, pos)
    if flags != _WHOLE_COMMAND or seg_type != SEGMENT_COMMAND or track != TRACK_COMMAND:
        return None
    largest = reader.max_frame_size
    header = pos + size
    if (
        reserved
        or zeros
        or size < FRAME_HEADER_SIZE
        or size > largest
        or header + FRAME_HEADER_SIZE > available
    ):
        return None
    flags, seg_type, header_size, reserved, track, on, zeros = _unpack_header(data, header)
    body = header + header_size
    if (
        flags != _WHOLE_HEADER
        or seg_type != SEGMENT_HEADER
        or track != TRACK_COMMAND
        or on != channel
        or reserved
        or zeros
        or header_size < FRAME_HEADER_SIZE
        or header_size > largest
        or body + FRAME_HEADER_SIZE > available
    ):
        return None
    flags, seg_type, body_size, reserved, track, on, zeros = _unpack_header(data, body)
    end = body + body_size
    if (
        flags != _WHOLE_BODY
        or seg_type != SEGMENT_BODY
        or track != TRACK_COMMAND
        or on != channel
        or reserved
        or zeros
        or body_size < FRAME_HEADER_SIZE
        or body_size > largest
        or end > available
        or size + header_size + body_size - 3 * FRAME_HEADER_SIZE > assembler.max_message_size
    ):
        return None
    state = assembler._tracks.get(channel << 1 | TRACK_COMMAND)
    if state is not None and (state.seg_type >= 0 or state.asm >= 0):
        return None
    command, sync = _decode_command(data[pos + FRAME_HEADER_SIZE : header])
    if not command.SEGMENTS:
        return None  # the frame by frame path refuses the segments
    headers = decode_header_segment(data[header + FRAME_HEADER_SIZE : body])
    reader._pos = end
    assembly = _new(Assembly)
    assembly.channel = channel
    assembly.op = command
    assembly.sync = sync
    assembly.headers = headers
    assembly.body = data[body + FRAME_HEADER_SIZE : end]
    assembly.size = header_size + body_size - 2 * FRAME_HEADER_SIZE
    return assembly


# --- encoding --------------------------------------------------------------------------------


def split_segment(
    out: bytearray,
    seg_type: int,
    track: int,
    channel: int,
    payload: Buffer,
    seg_flags: int,
    max_payload: int,
) -> None:
    """Append one segment as frames of at most *max_payload* payload octets (one frame, with
    an empty payload, for an empty segment)."""
    cls = type(payload)
    if (cls is bytes or cls is bytearray) and len(payload) <= max_payload:
        # the usual case, without a view: one frame
        out += _pack_header(seg_flags | 3, seg_type, len(payload) + 12, 0, track, channel, 0)
        out += payload
        return
    view = memoryview(payload)
    size = len(view)
    if size <= max_payload:
        out += _pack_header(seg_flags | 3, seg_type, size + 12, 0, track, channel, 0)
        out += view
        return
    start = 0
    while start < size:
        end = min(start + max_payload, size)
        flags = seg_flags | (FIRST_FRAME if start == 0 else 0) | (LAST_FRAME if end == size else 0)
        out += _pack_header(flags, seg_type, end - start + 12, 0, track, channel, 0)
        out += view[start:end]
        start = end


def encode_control(out: bytearray, channel: int, control: Control, max_frame_size: int) -> None:
    """Append a control as a control segment on track 0, split at *max_frame_size*."""
    payload = bytearray()
    control.encode(payload)
    split_segment(
        out,
        SEGMENT_CONTROL,
        TRACK_CONTROL,
        channel,
        payload,
        FIRST_SEGMENT | LAST_SEGMENT,
        max_frame_size - FRAME_HEADER_SIZE,
    )


def frame_command(
    out: bytearray,
    channel: int,
    segment: Buffer,
    header: Buffer | None,
    body: Buffer | None,
    max_frame_size: int,
) -> None:
    """Append an encoded command assembly as frames: the command segment's payload, then the
    header segment's (if not None), then the body (if not None)."""
    max_payload = max_frame_size - FRAME_HEADER_SIZE
    more = header is not None or body is not None
    flags = FIRST_SEGMENT if more else FIRST_SEGMENT | LAST_SEGMENT
    split_segment(out, SEGMENT_COMMAND, TRACK_COMMAND, channel, segment, flags, max_payload)
    if header is not None:
        flags = 0 if body is not None else LAST_SEGMENT
        split_segment(out, SEGMENT_HEADER, TRACK_COMMAND, channel, header, flags, max_payload)
    if body is not None:
        split_segment(out, SEGMENT_BODY, TRACK_COMMAND, channel, body, LAST_SEGMENT, max_payload)


def command_buffers(
    channel: int,
    segment: Buffer,
    header: Buffer | None,
    body: Buffer,
    max_frame_size: int,
) -> list[Buffer]:
    """:func:`frame_command` for a large body: the frames as buffers whose body parts are
    memoryview slices of *body* (never copied)."""
    max_payload = max_frame_size - FRAME_HEADER_SIZE
    head = bytearray()
    split_segment(
        head, SEGMENT_COMMAND, TRACK_COMMAND, channel, segment, FIRST_SEGMENT, max_payload
    )
    if header is not None:
        split_segment(head, SEGMENT_HEADER, TRACK_COMMAND, channel, header, 0, max_payload)
    buffers: list[Buffer] = [head]
    view = memoryview(body).cast("B")
    size = len(view)
    start = 0
    while True:
        end = min(start + max_payload, size)
        flags = (
            LAST_SEGMENT | (FIRST_FRAME if not start else 0) | (LAST_FRAME if end == size else 0)
        )
        buffers.append(
            _pack_header(flags, SEGMENT_BODY, end - start + 12, 0, TRACK_COMMAND, channel, 0)
        )
        buffers.append(view[start:end])
        start = end
        if start >= size:
            return buffers


def encode_command(
    out: bytearray,
    channel: int,
    command: Command,
    max_frame_size: int,
    *,
    sync: bool = False,
    headers: Sequence[Struct] | None = None,
    body: Buffer | None = None,
) -> None:
    """Append a command assembly: the command segment, then a header segment if *headers* is
    not None, then a body segment if *body* is not None, each split at *max_frame_size*."""
    segment = bytearray()
    command.encode(segment, sync)
    header = None
    if headers is not None:
        header = bytearray()
        encode_header_segment(header, headers)
    frame_command(out, channel, segment, header, body, max_frame_size)
