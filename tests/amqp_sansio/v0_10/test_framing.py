"""0-10 framing: the 12-octet header, segments and assemblies, their flags and order, splitting
to a frame size, large bodies passed through uncopied, and clear framing errors."""

from __future__ import annotations

import struct

import pytest

from amqp_sansio.v0_10 import (
    PROTOCOL_HEADER_0_10,
    DeliveryProperties,
    ExecutionSync,
    MessageTransfer,
    QueueDeclare,
    RemoteProtocolError,
    SessionFlush,
    is_protocol_header_0_10,
)
from amqp_sansio.v0_10.framing import (
    FIRST_FRAME,
    FIRST_SEGMENT,
    LAST_FRAME,
    LAST_SEGMENT,
    Assembly,
    AssemblyReader,
    Frame,
    FrameReader,
    command_buffers,
    decode_header_segment,
    encode_command,
    encode_control,
    frame_command,
)
from amqp_sansio.v0_10.testing import command_frames, control_frames, parse_assemblies

HEADER = struct.Struct(">BBHBBHI")


def frame(
    flags: int, seg_type: int, payload: bytes, *, track: int | None = None, channel: int = 1
) -> bytes:
    track = (0 if seg_type == 0 else 1) if track is None else track
    return HEADER.pack(flags, seg_type, 12 + len(payload), 0, track, channel, 0) + payload


def read(data: bytes, *, max_frame_size: int = 0xFFFF) -> list[Assembly]:
    frames = FrameReader(max_frame_size)
    assemblies = AssemblyReader()
    frames.feed(data)
    out = []
    while (f := frames.next_frame()) is not None:
        assembly = assemblies.receive(f)
        if assembly is not None:
            out.append(assembly)
    assert frames.buffered == 0
    return out


def test_protocol_header_recognition() -> None:
    assert PROTOCOL_HEADER_0_10 == b"AMQP\x01\x01\x00\x0a"
    assert is_protocol_header_0_10(b"AMQP\x01\x01\x00\x0aextra")
    assert not is_protocol_header_0_10(b"AMQP\x00\x00\x09\x01")
    assert not is_protocol_header_0_10(memoryview(b"AMQP"))


def test_a_control_is_one_frame_with_every_flag() -> None:
    data = control_frames(2, SessionFlush(completed=True))
    assert data[:12] == HEADER.pack(0x0F, 0, 16, 0, 0, 2, 0)
    assert data[12:] == b"\x02\x0c\x04\x00"


def test_a_transfer_splits_each_segment_into_frames() -> None:
    body = bytes(range(256)) * 40  # 10240 octets
    out = bytearray()
    headers = [DeliveryProperties(routing_key="q")]
    encode_command(out, 1, MessageTransfer(destination="d"), 4096, headers=headers, body=body)
    frames = []
    reader = FrameReader()
    reader.feed(bytes(out))
    while (f := reader.next_frame()) is not None:
        frames.append(f)
    kinds = [(f.type, f.flags) for f in frames]
    assert kinds == [
        (1, FIRST_SEGMENT | FIRST_FRAME | LAST_FRAME),
        (2, FIRST_FRAME | LAST_FRAME),
        (3, LAST_SEGMENT | FIRST_FRAME),
        (3, LAST_SEGMENT),
        (3, LAST_SEGMENT | LAST_FRAME),
    ]
    assert max(len(f.payload) + 12 for f in frames) == 4096
    (assembly,) = read(bytes(out))
    assert assembly.body == body
    assert assembly.headers == tuple(headers)
    assert assembly.size == len(body) + 10  # the header segment counts too


def test_a_control_between_the_frames_of_a_command_on_the_same_channel() -> None:
    out = bytearray()
    encode_command(out, 1, MessageTransfer(), 64, body=b"x" * 200)
    chunks = []
    reader = FrameReader()
    reader.feed(bytes(out))
    while (f := reader.next_frame()) is not None:
        chunks.append(
            HEADER.pack(f.flags, f.type, 12 + len(f.payload), 0, f.track, f.channel, 0) + f.payload
        )
    control = control_frames(1, SessionFlush(expected=True))
    data = b"".join(chunks[:3]) + control + b"".join(chunks[3:])
    first, second = read(data)
    assert first.op == SessionFlush(expected=True)
    assert second.op == MessageTransfer()
    assert second.body == b"x" * 200


def split_frames(data: bytes) -> list[bytes]:
    """The octets of each frame in *data*."""
    out = []
    offset = 0
    while offset < len(data):
        size = struct.unpack_from(">H", data, offset + 2)[0]
        out.append(data[offset : offset + size])
        offset += size
    return out


def test_assemblies_on_two_channels_interleave() -> None:
    a = split_frames(
        command_frames(1, MessageTransfer(destination="a"), body=b"A" * 100, max_frame_size=60)
    )
    b = split_frames(
        command_frames(2, MessageTransfer(destination="b"), body=b"B" * 100, max_frame_size=60)
    )
    mixed = b"".join(x for pair in zip(a, b, strict=True) for x in pair)
    got = {(x.channel, x.body) for x in read(mixed)}
    assert got == {(1, b"A" * 100), (2, b"B" * 100)}


def test_empty_body_and_no_body_differ() -> None:
    (empty,) = read(command_frames(1, MessageTransfer(), body=b""))
    (none,) = read(command_frames(1, MessageTransfer()))
    assert (empty.body, none.body) == (b"", None)


def test_large_bodies_are_memoryview_slices() -> None:
    body = bytearray(b"z" * 200_000)
    segment = bytearray()
    MessageTransfer(destination="d").encode(segment)
    buffers = command_buffers(1, segment, None, body, 65535)
    views = [b for b in buffers if isinstance(b, memoryview)]
    assert views
    assert all(v.obj is body for v in views)
    (assembly,) = read(b"".join(bytes(b) for b in buffers))
    assert assembly.body == bytes(body)
    flat = bytearray()
    frame_command(flat, 1, segment, None, body, 65535)
    assert flat == b"".join(bytes(b) for b in buffers)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (HEADER.pack(0x4F, 0, 16, 0, 0, 1, 0) + b"\x02\x0c\x00\x00", "version bits"),
        (HEADER.pack(0x1F, 0, 16, 0, 0, 1, 0) + b"\x02\x0c\x00\x00", "reserved flag"),
        (HEADER.pack(0x0F, 4, 16, 0, 0, 1, 0) + b"\x02\x0c\x00\x00", "segment type 4"),
        (HEADER.pack(0x0F, 0, 16, 0, 2, 1, 0) + b"\x02\x0c\x00\x00", "track 2"),
        (HEADER.pack(0x0F, 0, 16, 1, 0, 1, 0) + b"\x02\x0c\x00\x00", "reserved octets"),
        (HEADER.pack(0x0F, 0, 16, 0, 0, 1, 9) + b"\x02\x0c\x00\x00", "reserved octets"),
        (HEADER.pack(0x0F, 0, 11, 0, 0, 1, 0), "frame size 11"),
        (frame(0x0F, 1, b"\x02\x0c\x00\x00", track=0), "track 0"),
        (frame(0x0F, 0, b"\x02\x0c\x00\x00", track=1), "track 1"),
        (frame(0x0B, 0, b"\x02\x0c\x00\x00"), "first and last segment"),
        (frame(0x0E, 1, b"\x03\x01\x01\x00\x00\x00") + frame(0x0E, 1, b""), "interrupts"),
        (frame(0x0C, 1, b"\x03\x01\x01\x00\x00\x00"), "never began"),
        (frame(0x07, 1, b"\x03\x01\x01\x00\x00\x00"), "without the first segment"),
        (frame(0x07, 2, b""), "without a command"),
        (
            frame(0x0B, 1, b"\x04\x01\x01\x00\x00\x00")
            + frame(0x0B, 1, b"\x03\x01\x01\x00\x00\x00"),
            "before the previous",
        ),
        (frame(0x0B, 1, b"\x04\x01\x01\x00\x00\x00") + frame(0x03, 3, b"x"), "last segment flag"),
        (
            frame(0x0B, 1, b"\x04\x01\x01\x00\x00\x00") + frame(0x03, 2, b"") + frame(0x07, 2, b""),
            "second header",
        ),
        (frame(0x0B, 1, b"\x04\x01\x01\x00\x00\x00") + frame(0x0B, 2, b""), "first segment flag"),
        (frame(0x0B, 1, b"\x03\x01\x01\x00\x00\x00") + frame(0x07, 3, b"x"), "does not define"),
        (frame(0x0F, 0, b"\x02"), "can't hold"),
        (frame(0x0F, 0, b"\x02\x99\x00\x00"), "unknown control"),
        (frame(0x0F, 1, b"\x99\x01\x01\x00\x00\x00"), "unknown command"),
        (frame(0x0F, 1, b"\x03\x01\x02\x00\x00\x00"), "session.header"),
        (frame(0x0F, 1, b"\x03\x01\x01\x02\x00\x00"), "session.header"),
        (frame(0x0F, 0, b"\x02\x0c\x00\x00\x00"), "after its fields"),
        (frame(0x0F, 0, b"\x02\x07\x01\x00\x00"), "malformed session.command-point"),
        (frame(0x0F, 0, b"\x02\x0c\x00\x01"), "packing flags"),
        (frame(0x0F, 1, b"\x04\x01\x01\x00\x01\x00\x09ab"), "run 7 octets past"),
        (
            frame(0x0B, 1, b"\x04\x01\x01\x00\x00\x00") + frame(0x07, 2, b"\x00\x00\x00\x09"),
            "header segment",
        ),
    ],
)
def test_malformed_framing_is_a_framing_error(data: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message) as caught:
        read(data)
    assert caught.value.reply_code == 501


def test_frames_over_the_limit_and_assemblies_over_max_message_size() -> None:
    big = command_frames(1, MessageTransfer(), body=b"x" * 5000, max_frame_size=65535)
    with pytest.raises(RemoteProtocolError, match=r"outside 12\.\.4096"):
        read(big, max_frame_size=4096)
    reader = AssemblyReader(max_message_size=100)
    frames = FrameReader()
    frames.feed(command_frames(1, MessageTransfer(), body=b"x" * 150, max_frame_size=60))
    parts = []
    while (f := frames.next_frame()) is not None:
        parts.append(f)
    reader.receive(parts[0])  # the command segment: 6 octets
    reader.receive(parts[1])  # 48 body octets
    with pytest.raises(RemoteProtocolError, match="max_message_size") as caught:
        reader.receive(parts[2])  # 48 more: over 100, refused before it is kept
    assert caught.value.reply_code == 320


def test_header_segment_holds_unknown_structs() -> None:
    data = struct.pack(">IH", 3, 0x0999) + b"\x00" + struct.pack(">IH", 4, 0x0401) + b"\x00\x00"
    entries = decode_header_segment(data)
    assert entries[1] == DeliveryProperties()
    assert entries[0].CODE is None
    assert type(entries[0]).__name__ == "UnknownStruct"
    with pytest.raises(RemoteProtocolError, match="header segment"):
        decode_header_segment(data[:-1])


def test_reader_keeps_partial_frames_and_reports_buffered() -> None:
    data = command_frames(1, QueueDeclare(queue="q"), sync=True)
    reader = FrameReader()
    for octet in data[:-1]:
        reader.feed(bytes([octet]))
        assert reader.next_frame() is None
    assert reader.buffered == len(data) - 1
    reader.feed(data[-1:])
    f = reader.next_frame()
    assert isinstance(f, Frame)
    assert f.type == 1
    assert reader.buffered == 0
    assert "command" in repr(f)
    assert f == Frame(f.flags, 1, 1, 1, f.payload)


def test_parse_assemblies_skips_a_header_and_refuses_a_cut_assembly() -> None:
    data = PROTOCOL_HEADER_0_10 + command_frames(1, ExecutionSync(), sync=True)
    (assembly,) = parse_assemblies(data)
    assert assembly.sync
    assert assembly.op == ExecutionSync()
    cut = command_frames(1, MessageTransfer(), body=b"x" * 100, max_frame_size=50)
    with pytest.raises(ValueError, match="inside an assembly"):
        parse_assemblies(cut[:68])  # the command frame (18 octets) and one body frame
    with pytest.raises(ValueError, match="after the last whole frame"):
        parse_assemblies(cut[:5])


def test_encode_control_writes_frames_a_reader_splits_back() -> None:
    out = bytearray()
    flush = SessionFlush(expected=True, confirmed=True, completed=True)
    encode_control(out, 7, flush, 13)  # one payload octet per frame
    assert len(out) == 4 * 13
    (assembly,) = read(bytes(out))
    assert (assembly.channel, assembly.op) == (7, flush)
    assert "SessionFlush" in repr(assembly)
