"""The frame layer on the wire: protocol headers, the frame reader and the frame writers.

Every reader test runs three ways (h11's ``t_body_reader``): the whole input at once, one byte
at a time, and followed by the start of the next frame, which must stay buffered.
"""

from __future__ import annotations

import array
import datetime
import itertools
import re
import warnings
from typing import TYPE_CHECKING, ClassVar, Final, Protocol, cast, final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import base as pamqp_base
from pamqp import body as pamqp_body
from pamqp import commands as pamqp_commands
from pamqp import frame as pamqp_frame
from pamqp import header as pamqp_header
from pamqp import heartbeat as pamqp_heartbeat

from amqp_sansio import ContentProperties, LocalProtocolError, Method, RemoteProtocolError
from amqp_sansio._frames import (
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
from amqp_sansio._generated.spec_0_9_1 import (
    FRAME_MIN_SIZE,
    METHODS,
    BasicAck,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    BasicQos,
    ConnectionSecureOk,
    ConnectionStartOk,
    ConnectionTune,
    QueueDeclare,
)
from tests.support.strategies import methods, properties

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from amqp_sansio._method import FieldSpec

ALL_METHODS: Final = sorted(METHODS.values(), key=lambda cls: cls.INDEX)
MAX_FRAME: Final = 0xFFFF_FFFF

#: The next frame's complete 7-octet header, still waiting for its frame-end.
TRAILER: Final = HEARTBEAT_FRAME[:-1]


# --- helpers -----------------------------------------------------------------------------------


def drain(reader: FrameReader) -> list[Frame]:
    frames: list[Frame] = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    return frames


def feed_all(reader: FrameReader, chunks: Iterable[bytes]) -> list[Frame]:
    frames: list[Frame] = []
    for chunk in chunks:
        reader.feed(chunk)
        frames += drain(reader)
    return frames


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def read_three_ways(data: bytes, *, frame_max: int = FRAME_MIN_SIZE) -> list[Frame]:
    """Read *data* whole, byte by byte, and with the next frame's start; all must agree."""
    whole = FrameReader(frame_max=frame_max)
    frames = feed_all(whole, [data])
    assert whole.buffered == 0

    one_by_one = FrameReader(frame_max=frame_max)
    assert feed_all(one_by_one, bytewise(data)) == frames
    assert one_by_one.buffered == 0

    trailing = FrameReader(frame_max=frame_max)
    assert feed_all(trailing, [data + TRAILER]) == frames
    assert trailing.buffered == len(TRAILER)
    assert feed_all(trailing, [HEARTBEAT_FRAME[-1:]]) == [HeartbeatFrame(0)]
    assert trailing.buffered == 0
    return frames


def read_error_three_ways(
    data: bytes, reply_code: int, match: str, *, frame_max: int = FRAME_MIN_SIZE
) -> RemoteProtocolError:
    """Feed *data* the three ways; each must fail with the same error (offsets included)."""
    errors: list[RemoteProtocolError] = []
    for chunks in ([data], bytewise(data), [data + TRAILER]):
        reader = FrameReader(frame_max=frame_max)
        with pytest.raises(RemoteProtocolError) as info:
            feed_all(reader, chunks)
        errors.append(info.value)
    first = errors[0]
    assert first.reply_code == reply_code
    assert re.search(match, first.reply_text), first.reply_text
    assert [(e.reply_text, e.reply_code, e.class_id, e.method_id) for e in errors] == [
        (first.reply_text, first.reply_code, first.class_id, first.method_id)
    ] * 3
    return first


def frame_bytes(frame_type: int, channel: int, payload: bytes, *, end: bytes = b"\xce") -> bytes:
    """A frame built by hand, so that broken ones can be built too."""
    return (
        bytes([frame_type])
        + channel.to_bytes(2, "big")
        + len(payload).to_bytes(4, "big")
        + payload
        + end
    )


def method_payload(method: Method) -> bytes:
    out = bytearray()
    method.encode(out)
    return bytes(out)


def header_payload(body_size: int, props: BasicProperties, *, weight: int = 0) -> bytes:
    out = bytearray(b"\x00\x3c" + weight.to_bytes(2, "big") + body_size.to_bytes(8, "big"))
    props.encode(out)
    return bytes(out)


def encoded(write: Callable[[bytearray], None]) -> bytes:
    out = bytearray()
    write(out)
    return bytes(out)


# Values for every wire type that pamqp's validators accept as well.
SAMPLES: Final[dict[str, object]] = {
    "bit": True,
    "octet": 7,
    "short": 513,
    "long": 70_000,
    "longlong": 2**40 + 1,
    "timestamp": 1_700_000_000,
    "shortstr": "amq.gen-Xy_1",
    "longstr": b"PLAIN AMQPLAIN",
    "table": {"x-message-ttl": 60_000, "name": "value", "flag": True, "small": -1, "n": {"i": 300}},
}
# Reserved fields that must keep their spec value (and pamqp insists on it).
RESERVED: Final = frozenset(
    {"ticket", "capabilities", "insist", "known_hosts", "out_of_band", "channel_id", "cluster_id"}
)


class _MethodFactory(Protocol):
    def __call__(self, **fields: object) -> Method: ...


def sample_method(cls: type[Method]) -> Method:
    factory = cast("_MethodFactory", cls)  # generated classes take their fields as keywords
    return factory(**{n: SAMPLES[w] for n, w in cls.FIELDS if n not in RESERVED})


DELIVER: Final = BasicDeliver(
    consumer_tag="ctag1.0", delivery_tag=42, redelivered=True, exchange="ex", routing_key="rk"
)
PROPS: Final = BasicProperties(
    content_type="application/json",
    delivery_mode=2,
    headers={"a": 1, "b": "two", "c": True},
    message_id="abc-123",
    timestamp=1_700_000_000,
)


# --- protocol headers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("octets", "version"),
    [
        (PROTOCOL_HEADER_0_9_1, ProtocolVersion.AMQP_0_9_1),
        (b"AMQP\x00\x00\x09\x01", ProtocolVersion.AMQP_0_9_1),
        (PROTOCOL_HEADER_0_9, ProtocolVersion.AMQP_0_9),
        (b"AMQP\x01\x01\x00\x09", ProtocolVersion.AMQP_0_9),
        (PROTOCOL_HEADER_0_8, ProtocolVersion.AMQP_0_8),
        (b"AMQP\x01\x01\x08\x00", ProtocolVersion.AMQP_0_8),
        (PROTOCOL_HEADER_0_8_PDF, ProtocolVersion.AMQP_0_8),
        (b"AMQP\x01\x01\x09\x01", ProtocolVersion.AMQP_0_8),
        (PROTOCOL_HEADER_0_10, ProtocolVersion.AMQP_0_10),
        (b"AMQP\x01\x01\x00\x0a", ProtocolVersion.AMQP_0_10),
        (PROTOCOL_HEADER_1_0, ProtocolVersion.AMQP_1_0),
        (b"AMQP\x00\x01\x00\x00", ProtocolVersion.AMQP_1_0),
        (PROTOCOL_HEADER_1_0_SASL, ProtocolVersion.AMQP_1_0),
        (b"AMQP\x03\x01\x00\x00", ProtocolVersion.AMQP_1_0),
        (b"AMQP\x02\x01\x00\x00", ProtocolVersion.AMQP_1_0),  # 1.0's TLS layer
        (b"AMQP\x00\x00\x09\x02", ProtocolVersion.UNKNOWN),
        (b"AMQP\x00\x00\x00\x00", ProtocolVersion.UNKNOWN),
        (b"AMQP\x01\x01\x00\x0b", ProtocolVersion.UNKNOWN),  # the 0-9 PDF's stray %d0.11
    ],
)
def test_protocol_headers_are_classified(octets: bytes, version: ProtocolVersion) -> None:
    header = parse_protocol_header(octets)
    assert header == ProtocolHeader(octets)
    assert header.version is version
    assert header.version_octets == tuple(octets[4:])
    # What follows the header is not the header's business.
    assert parse_protocol_header(bytearray(octets + b"\x01\x00")) == header
    assert parse_protocol_header(memoryview(octets)) == header


@pytest.mark.parametrize("octets", [PROTOCOL_HEADER_0_9_1, PROTOCOL_HEADER_0_10])
def test_partial_protocol_header_waits(octets: bytes) -> None:
    for n in range(8):
        assert parse_protocol_header(octets[:n]) is None


@pytest.mark.parametrize(
    ("received", "shown"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", r"b'GET / HTTP/1.1\r\n'"),
        (b"\x16\x03\x01", r"b'\x16\x03\x01'"),  # a TLS ClientHello on the plain port
        (b"AMQX", "b'AMQX'"),
        (b"AMq", "b'AMq'"),
        (b"amqp\x00\x00\x09\x01", r"b'amqp\x00\x00\t\x01'"),
    ],
)
def test_garbage_instead_of_a_protocol_header(received: bytes, shown: str) -> None:
    with pytest.raises(RemoteProtocolError, match=re.escape(f"received {shown}")) as info:
        parse_protocol_header(received)
    assert info.value.reply_code == 501


def test_protocol_header_value_is_checked() -> None:
    with pytest.raises(ValueError, match="protocol header"):
        ProtocolHeader(b"HTTP/1.1")
    with pytest.raises(ValueError, match="protocol header"):
        ProtocolHeader(b"AMQP\x00\x00\x09")


# --- writers: exact bytes ----------------------------------------------------------------------


def test_heartbeat_frame_bytes() -> None:
    assert HEARTBEAT_FRAME.hex(" ") == "08 00 00 00 00 00 00 ce"
    assert feed_all(FrameReader(), [HEARTBEAT_FRAME]) == [HeartbeatFrame(0)]


def test_method_frame_bytes() -> None:
    out = bytearray(b"earlier")
    encode_method_frame(out, 3, BasicAck(delivery_tag=5, multiple=True))
    assert out == b"earlier" + bytes.fromhex(
        "01 0003 0000000d"  # method frame, channel 3, 13 octets
        " 003c 0050"  # basic.ack
        " 0000000000000005 01"  # delivery tag 5, multiple
        " ce"
    )


def test_method_frame_bytes_with_strings_and_table() -> None:
    out = bytearray()
    encode_method_frame(out, 1, QueueDeclare(queue="q1", durable=True, arguments={}))
    assert out == bytes.fromhex(
        "01 0001 0000000e"
        " 0032 000a"  # queue.declare
        " 0000 02 7131"  # ticket, "q1"
        " 02"  # durable
        " 00000000"  # empty arguments table
        " ce"
    )


PUBLISH_FRAME: Final = bytes.fromhex(
    "01 0002 0000000d 003c 0028 0000 02 6578 02 726b 00 ce"  # basic.publish "ex" "rk"
)


def header_frame_hex(body_size: int) -> bytes:
    return bytes.fromhex(
        "02 0002 0000001a 003c 0000"
        + body_size.to_bytes(8, "big").hex()
        + "9000 0a 746578742f706c61696e 02 ce"  # content-type text/plain, delivery-mode 2
    )


def test_content_is_split_at_frame_max_minus_8() -> None:
    body = bytes(range(256)) * 40  # 10240 octets: 4088 + 4088 + 2064
    out = bytearray()
    encode_content(
        out,
        2,
        BasicPublish(exchange="ex", routing_key="rk"),
        BasicProperties(content_type="text/plain", delivery_mode=2),
        body,
        4096,
    )
    assert out == (
        PUBLISH_FRAME
        + header_frame_hex(10240)
        + b"\x03\x00\x02\x00\x00\x0f\xf8"
        + body[:4088]
        + b"\xce"
        + b"\x03\x00\x02\x00\x00\x0f\xf8"
        + body[4088:8176]
        + b"\xce"
        + b"\x03\x00\x02\x00\x00\x08\x10"
        + body[8176:]
        + b"\xce"
    )
    assert max(len(f) for f in out.split(b"\xce\x03")) <= 4096


def test_empty_body_has_no_body_frame() -> None:
    out = bytearray()
    props = BasicProperties(content_type="text/plain", delivery_mode=2)
    encode_content(out, 2, BasicPublish(exchange="ex", routing_key="rk"), props, b"", 4096)
    assert out == PUBLISH_FRAME + header_frame_hex(0)
    assert content_buffers(2, BasicPublish(exchange="ex", routing_key="rk"), props, b"", 4096) == [
        out
    ]


def test_body_of_exactly_one_frame() -> None:
    body = b"x" * 4088
    out = bytearray()
    encode_content(out, 1, BasicPublish(), BasicProperties(), body, 4096)
    assert out.endswith(b"\x03\x00\x01\x00\x00\x0f\xf8" + body + b"\xce")
    assert out.count(b"\xce\x03") == 1


def test_content_header_frame_bytes() -> None:
    out = bytearray()
    encode_content_header(out, 2, 60, 10240, BasicProperties(content_type="text/plain"))
    assert out == bytes.fromhex(
        "02 0002 00000019 003c 0000 0000000000002800 8000 0a 746578742f706c61696e ce"
    )


@pytest.mark.parametrize("size", [0, 1, 4087, 4088, 4089, 8176, 10240])
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_content_buffers_are_the_same_frames_without_copying_the_body(
    size: int, kind: Callable[[bytes], bytes | bytearray | memoryview]
) -> None:
    body = kind(bytes(range(256)) * (size // 256) + b"z" * (size % 256))
    method = BasicPublish(exchange="ex", routing_key="rk")
    props = BasicProperties(content_type="text/plain", delivery_mode=2)
    expected = bytearray()
    encode_content(expected, 2, method, props, body, 4096)

    buffers = content_buffers(2, method, props, body, 4096)
    assert b"".join(buffers) == expected
    chunks = -(-size // 4088)
    assert len(buffers) == (1 if not size else 2 * chunks + 1)
    for piece in buffers[1::2]:
        assert isinstance(piece, memoryview)
        assert piece.obj is (body.obj if isinstance(body, memoryview) else body)
        assert piece.nbytes <= 4088


# --- writers: refused values -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "match"),
    [
        (
            QueueDeclare(queue="q" * 256),
            (
                r"queue\.declare \(50, 10\).*field 'queue' \(shortstr\): str of 256 octets, "
                r"more than 255"
            ),
        ),
        (
            QueueDeclare(queue="\ud800"),
            r"field 'queue' \(shortstr\): str is not encodable as UTF-8",
        ),
        (
            BasicAck(delivery_tag=-1),
            (
                r"basic\.ack \(60, 80\).*field 'delivery_tag' \(longlong\): int -1 out of range "
                r"0\.\.18446744073709551615"
            ),
        ),
        (
            BasicAck(delivery_tag=2**64),
            r"field 'delivery_tag' \(longlong\): int 18446744073709551616 out of range",
        ),
        (
            BasicQos(prefetch_count=65_536),
            r"basic\.qos .*field 'prefetch_count' \(short\): int 65536 out of range 0\.\.65535",
        ),
        (
            ConnectionTune(channel_max=-1, frame_max=131_072, heartbeat=60),
            r"field 'channel_max' \(short\): int -1 out of range",
        ),
        (
            QueueDeclare(queue=5),  # type: ignore[arg-type]
            r"field 'queue' \(shortstr\): expected str, got int",
        ),
        (
            ConnectionStartOk(client_properties={}, response=b"\0guest\0guest", locale="l" * 256),
            r"connection\.start-ok .*field 'locale' \(shortstr\): str of 256 octets",
        ),
        (
            BasicQos(prefetch_count="10"),  # type: ignore[arg-type]
            r"field 'prefetch_count' \(short\): expected int, got str",
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Method) else "",
)
def test_unencodable_field_writes_nothing(method: Method, match: str) -> None:
    out = bytearray(b"earlier")
    with pytest.raises(LocalProtocolError, match=match) as info:
        encode_method_frame(out, 1, method)
    assert out == b"earlier"
    assert info.value.reply_code == 502
    assert (info.value.class_id, info.value.method_id) == (method.CLASS_ID, method.METHOD_ID)


def test_channel_out_of_range_writes_nothing() -> None:
    out = bytearray(b"earlier")
    with pytest.raises(LocalProtocolError, match=r"channel must be an int in 0\.\.65535"):
        encode_method_frame(out, 65_536, BasicAck())
    assert out == b"earlier"


def test_method_frame_over_frame_max_writes_nothing() -> None:
    method = QueueDeclare(queue="q", arguments={"k": "v" * 5000})
    out = bytearray(b"earlier")
    with pytest.raises(
        LocalProtocolError,
        match=r"queue\.declare frame of 50\d\d octets exceeds "
        r"frame_max 4096",
    ) as info:
        encode_method_frame(out, 1, method)
    assert out == b"earlier"
    assert info.value.reply_code == 501
    encode_method_frame(out, 1, method, frame_max=131_072)
    assert read_three_ways(bytes(out[7:]), frame_max=131_072) == [MethodFrame(1, method)]


@pytest.mark.parametrize(
    ("props", "match"),
    [
        (BasicProperties(delivery_mode=256), r"field 'delivery_mode' \(octet\): int 256"),
        (BasicProperties(priority=-1), r"field 'priority' \(octet\): int -1"),
        (BasicProperties(message_id="m" * 300), r"field 'message_id' \(shortstr\): str of 300"),
        (BasicProperties(timestamp=-5), r"field 'timestamp' \(timestamp\): int -5"),
    ],
)
def test_unencodable_property_writes_nothing(props: BasicProperties, match: str) -> None:
    out = bytearray(b"earlier")
    with pytest.raises(LocalProtocolError, match=match) as info:
        encode_content(out, 1, BasicPublish(), props, b"body", 4096)
    assert out == b"earlier"
    assert info.value.reply_code == 502
    with pytest.raises(LocalProtocolError, match=match):
        encode_content_header(out, 1, 60, 4, props)
    assert out == b"earlier"
    with pytest.raises(LocalProtocolError, match=match):
        content_buffers(1, BasicPublish(), props, b"body", 4096)


def test_content_needs_a_content_method() -> None:
    out = bytearray(b"earlier")
    with pytest.raises(LocalProtocolError, match=r"basic\.ack carries no content") as info:
        encode_content(out, 1, BasicAck(), BasicProperties(), b"x", 4096)
    assert (info.value.reply_code, info.value.class_id, info.value.method_id) == (503, 60, 80)
    with pytest.raises(LocalProtocolError, match=r"needs properties of class 60, got "):
        content_buffers(1, BasicPublish(), FileProperties(), b"x", 4096)
    assert out == b"earlier"


@final
class FileProperties(ContentProperties):
    """Properties of a content class that 0-9-1 does not have."""

    __slots__ = ()
    CLASS_ID = 70
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()

    def encode(self, out: bytearray) -> None:
        out += b"\x00\x00"


@final
class HalfWritten(Method):
    """A method whose encoder fails after writing, for no field's fault."""

    __slots__ = ()
    CLASS_ID = 60
    METHOD_ID = 999
    NAME = "basic.half-written"
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (("flag", "bit"),)
    flag = True

    def encode(self, out: bytearray) -> None:
        out += b"\x00\x3c\x03\xe7"
        raise ValueError("disk full")


def test_encoder_failure_without_a_bad_field_is_reported_as_is() -> None:
    out = bytearray(b"earlier")
    with pytest.raises(
        LocalProtocolError,
        match=r"basic\.half-written \(60, 999\) on channel 1: ValueError: disk full",
    ):
        encode_method_frame(out, 1, HalfWritten())
    assert out == b"earlier"


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"x-bad": object()}, r"field 'arguments' \(table\): .*object"),
        ([("x-max-length", 1)], r"field 'arguments' \(table\): expected a mapping, got list"),
    ],
)
def test_unencodable_table_names_the_field(arguments: object, match: str) -> None:
    out = bytearray(b"earlier")
    with pytest.raises(LocalProtocolError, match=match) as info:
        encode_method_frame(out, 1, QueueDeclare(queue="q", arguments=arguments))  # type: ignore[arg-type]
    assert out == b"earlier"
    assert info.value.reply_code == 502


def test_longstr_must_be_bytes() -> None:
    out = bytearray()
    with pytest.raises(
        LocalProtocolError, match=r"field 'response' \(longstr\): expected bytes, got str"
    ):
        encode_method_frame(out, 0, ConnectionSecureOk(response="secret"))  # type: ignore[arg-type]

    class Huge(bytes):
        def __len__(self) -> int:
            return 2**32

    with pytest.raises(
        LocalProtocolError, match=r"Huge of 4294967296 octets, more than 4294967295"
    ):
        encode_method_frame(out, 0, ConnectionSecureOk(response=Huge()))
    assert out == b""


def test_unencodable_method_in_content_writes_nothing() -> None:
    out = bytearray(b"earlier")
    with pytest.raises(LocalProtocolError, match=r"basic\.publish .*field 'exchange' \(shortstr\)"):
        encode_content(out, 1, BasicPublish(exchange="e" * 256), BasicProperties(), b"x", 4096)
    assert out == b"earlier"


def test_content_frames_over_frame_max_write_nothing() -> None:
    out = bytearray(b"earlier")
    with pytest.raises(
        LocalProtocolError, match=r"basic\.publish frame of 117 octets exceeds frame_max 64"
    ):
        encode_content(out, 1, BasicPublish(exchange="e" * 100), BasicProperties(), b"x", 64)
    big = BasicProperties(headers={"k": "v" * 5000})
    with pytest.raises(
        LocalProtocolError, match=r"content header frame of 50\d\d octets exceeds"
    ) as info:
        encode_content(out, 1, BasicPublish(), big, b"x", 4096)
    assert (info.value.reply_code, info.value.class_id) == (501, 0)
    with pytest.raises(LocalProtocolError, match=r"content header frame of 50\d\d octets exceeds"):
        encode_content_header(out, 1, 60, 1, big)
    assert out == b"earlier"


def test_content_header_ids_out_of_range() -> None:
    out = bytearray(b"earlier")
    with pytest.raises(LocalProtocolError, match=r"class id 70000 or body size 1 out of range"):
        encode_content_header(out, 1, 70_000, 1, BasicProperties())
    with pytest.raises(LocalProtocolError, match=r"class id 60 or body size -1 out of range"):
        encode_content_header(out, 1, 60, -1, BasicProperties())
    assert out == b"earlier"


def test_body_must_be_contiguous() -> None:
    out = bytearray(b"earlier")
    with pytest.raises(ValueError, match="C-contiguous"):
        encode_content(out, 1, BasicPublish(), BasicProperties(), memoryview(b"abcdef")[::2], 4096)
    assert out == b"earlier"


def test_body_of_wide_items_is_counted_in_octets() -> None:
    body = memoryview(array.array("I", range(3000)))  # 12000 octets
    out = bytearray()
    encode_content(out, 1, BasicPublish(), BasicProperties(), body, 4096)
    frames = read_three_ways(bytes(out))
    assert frames[1] == ContentHeaderFrame(1, 60, 12_000, BasicProperties())
    assert (
        b"".join(f.payload for f in frames[2:] if isinstance(f, ContentBodyFrame)) == body.tobytes()
    )
    assert b"".join(content_buffers(1, BasicPublish(), BasicProperties(), body, 4096)) == out
    small = bytearray()
    encode_content(
        small, 1, BasicPublish(), BasicProperties(), memoryview(array.array("H", [1, 2])), 4096
    )
    assert small.endswith(
        b"\x03\x00\x01\x00\x00\x00\x04" + array.array("H", [1, 2]).tobytes() + b"\xce"
    )


# --- reader: frames ----------------------------------------------------------------------------


def test_read_a_delivery() -> None:
    data = (
        frame_bytes(1, 1, method_payload(DELIVER))
        + frame_bytes(2, 1, header_payload(5, PROPS))
        + frame_bytes(3, 1, b"hello")
        + HEARTBEAT_FRAME
    )
    assert read_three_ways(data) == [
        MethodFrame(1, DELIVER),
        ContentHeaderFrame(1, 60, 5, PROPS),
        ContentBodyFrame(1, b"hello"),
        HeartbeatFrame(0),
    ]


def test_body_frames_are_bytes() -> None:
    small, large = b"s" * 100, bytes(range(256)) * 100
    frames = read_three_ways(
        frame_bytes(3, 7, small) + frame_bytes(3, 7, large) + frame_bytes(3, 7, b""),
        frame_max=131_072,
    )
    assert frames == [
        ContentBodyFrame(7, small),
        ContentBodyFrame(7, large),
        ContentBodyFrame(7, b""),
    ]
    assert all(type(f.payload) is bytes for f in frames if isinstance(f, ContentBodyFrame))


def test_frame_of_exactly_frame_max() -> None:
    data = frame_bytes(3, 1, b"x" * (FRAME_MIN_SIZE - 8))
    assert read_three_ways(data) == [ContentBodyFrame(1, b"x" * 4088)]


def test_buffered_counts_a_partial_frame() -> None:
    reader = FrameReader()
    data = frame_bytes(1, 1, method_payload(DELIVER)) + frame_bytes(3, 1, b"y" * 3000)
    reader.feed(data[:-100])
    assert reader.next_frame() == MethodFrame(1, DELIVER)
    assert reader.next_frame() is None
    assert reader.buffered == 7 + 3000 + 1 - 100
    reader.feed(memoryview(data)[-100:])
    assert reader.buffered == 7 + 3000 + 1
    assert reader.next_frame() == ContentBodyFrame(1, b"y" * 3000)
    assert reader.buffered == 0


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda cls: cls.NAME)
def test_every_method_round_trips(cls: type[Method]) -> None:
    method = sample_method(cls)
    out = bytearray()
    encode_method_frame(out, 9, method)
    assert read_three_ways(bytes(out)) == [MethodFrame(9, method)]


def test_content_round_trips() -> None:
    body = bytes(range(256)) * 40
    out = bytearray()
    encode_content(out, 4, DELIVER, PROPS, body, 4096)
    out += HEARTBEAT_FRAME
    encode_content(out, 5, DELIVER, BasicProperties(), b"", 4096)
    frames = read_three_ways(bytes(out))
    assert frames == [
        MethodFrame(4, DELIVER),
        ContentHeaderFrame(4, 60, len(body), PROPS),
        ContentBodyFrame(4, body[:4088]),
        ContentBodyFrame(4, body[4088:8176]),
        ContentBodyFrame(4, body[8176:]),
        HeartbeatFrame(0),
        MethodFrame(5, DELIVER),
        ContentHeaderFrame(5, 60, 0, BasicProperties()),
    ]


def test_all_properties_round_trip() -> None:
    props = BasicProperties(
        **{n: SAMPLES[w] for n, w in BasicProperties.FIELDS if n != "cluster_id"},  # type: ignore[arg-type]
        cluster_id="",
    )
    out = bytearray()
    encode_content_header(out, 3, 60, 2**64 - 1, props)
    assert read_three_ways(bytes(out)) == [ContentHeaderFrame(3, 60, 2**64 - 1, props)]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_chunking_reads_the_same_frames(data: st.DataObject) -> None:
    method = data.draw(st.sampled_from(ALL_METHODS).flatmap(methods))
    props = data.draw(properties(BasicProperties))
    body = data.draw(st.binary(max_size=9000))
    out = bytearray()
    encode_method_frame(out, 1, method, frame_max=MAX_FRAME)
    encode_content(out, 2, DELIVER, props, body, 4096)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(out)), max_size=12)))
    chunks = [bytes(out[a:b]) for a, b in zip([0, *cuts], [*cuts, len(out)], strict=True)]
    reader = FrameReader(frame_max=MAX_FRAME)
    frames = feed_all(reader, chunks)
    assert reader.buffered == 0
    assert frames[:3] == [
        MethodFrame(1, method),
        MethodFrame(2, DELIVER),
        ContentHeaderFrame(2, 60, len(body), props),
    ]
    assert b"".join(f.payload for f in frames[3:] if isinstance(f, ContentBodyFrame)) == body


# --- reader: agreement with pamqp as an independent encoder ----------------------------------

# Our field name -> pamqp's attribute name, where they differ.
PAMQP_NAMES: Final = {"type": "exchange_type"}
PAMQP_PROPERTY_NAMES: Final = {"type": "message_type"}


def same_value(ours: object, theirs: object) -> bool:
    if isinstance(ours, bytes) and isinstance(theirs, str):
        return ours == theirs.encode()  # pamqp hands out decodable longstrs as str
    return ours == theirs


def pamqp_methods() -> list[pamqp_base.Frame]:
    out = []
    for index, pamqp_cls in sorted(pamqp_commands.INDEX_MAPPING.items()):
        ours = METHODS[index]
        kwargs = {}
        for name, wire in ours.FIELDS:
            if name not in RESERVED:
                value = SAMPLES[wire]
                kwargs[PAMQP_NAMES.get(name, name)] = (
                    value.decode() if isinstance(value, bytes) else value
                )
        with warnings.catch_warnings():
            # pamqp warns that basic.recover-async is deprecated; it is still on the wire.
            warnings.simplefilter("ignore", DeprecationWarning)
            out.append(pamqp_cls(**kwargs))
    return out


@pytest.mark.parametrize("theirs", pamqp_methods(), ids=lambda m: m.name)
def test_pamqp_method_frames_decode_identically(theirs: pamqp_base.Frame) -> None:
    [frame] = read_three_ways(pamqp_frame.marshal(theirs, 11))
    assert isinstance(frame, MethodFrame)
    assert frame.channel == 11
    ours = frame.method
    assert theirs.index == ours.INDEX
    for name, _ in ours.FIELDS:
        assert same_value(getattr(ours, name), getattr(theirs, PAMQP_NAMES.get(name, name))), name


def test_pamqp_content_decodes_identically() -> None:
    when = datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)
    theirs = pamqp_commands.Basic.Properties(
        content_type="application/json",
        content_encoding="gzip",
        headers={"a": 1, "b": "two", "c": True, "big": 2**40, "neg": -40_000, "nested": {"x": 1}},
        delivery_mode=2,
        priority=9,
        correlation_id="corr",
        reply_to="amq.rabbitmq.reply-to",
        expiration="60000",
        message_id="abc-123",
        timestamp=when,
        message_type="event",
        user_id="guest",
        app_id="tests",
    )
    body = b"payload" * 1000
    data = (
        pamqp_frame.marshal(pamqp_commands.Basic.Deliver("ctag", 7, False, "ex", "rk"), 3)
        + pamqp_frame.marshal(pamqp_header.ContentHeader(0, len(body), theirs), 3)
        + pamqp_frame.marshal(pamqp_body.ContentBody(body[:4000]), 3)
        + pamqp_frame.marshal(pamqp_body.ContentBody(body[4000:]), 3)
        + pamqp_frame.marshal(pamqp_heartbeat.Heartbeat(), 0)
    )
    frames = read_three_ways(data)
    assert frames == [
        MethodFrame(
            3,
            BasicDeliver(
                consumer_tag="ctag",
                delivery_tag=7,
                redelivered=False,
                exchange="ex",
                routing_key="rk",
            ),
        ),
        ContentHeaderFrame(
            3,
            60,
            len(body),
            BasicProperties(
                content_type="application/json",
                content_encoding="gzip",
                headers={
                    "a": 1,
                    "b": "two",
                    "c": True,
                    "big": 2**40,
                    "neg": -40_000,
                    "nested": {"x": 1},
                },
                delivery_mode=2,
                priority=9,
                correlation_id="corr",
                reply_to="amq.rabbitmq.reply-to",
                expiration="60000",
                message_id="abc-123",
                timestamp=int(when.timestamp()),
                type="event",
                user_id="guest",
                app_id="tests",
            ),
        ),
        ContentBodyFrame(3, body[:4000]),
        ContentBodyFrame(3, body[4000:]),
        HeartbeatFrame(0),
    ]
    header = frames[1]
    assert isinstance(header, ContentHeaderFrame)
    for name, _ in BasicProperties.FIELDS:
        if name != "cluster_id":
            expected = getattr(theirs, PAMQP_PROPERTY_NAMES.get(name, name))
            got = getattr(header.properties, name)
            assert got == (int(expected.timestamp()) if name == "timestamp" else expected), name


# --- reader: bad input -------------------------------------------------------------------------


def test_bad_frame_end() -> None:
    read_error_three_ways(
        HEARTBEAT_FRAME[:-1] + b"\x00",
        501,
        r"^heartbeat frame on channel 0 \(payload size 0\) at stream offset 0: "
        r"frame-end octet is 0x00, expected 0xce$",
    )
    read_error_three_ways(
        frame_bytes(1, 2, method_payload(BasicAck()), end=b"\xcf"),
        501,
        r"method frame on channel 2 \(payload size 13\).*frame-end octet is 0xcf",
    )


def test_error_offset_counts_the_whole_stream() -> None:
    read_error_three_ways(
        HEARTBEAT_FRAME * 3 + frame_bytes(3, 1, b"abc", end=b"\x00"),
        501,
        r"content body frame on channel 1 \(payload size 3\) at stream offset 24",
    )


@pytest.mark.parametrize("frame_type", [0, 4, 5, 6, 7, 9, 10, 206, 255])
def test_unknown_frame_type(frame_type: int) -> None:
    # Refused from the 7-octet header alone: nothing more needs to arrive.
    read_error_three_ways(
        frame_bytes(frame_type, 1, b"")[:7],
        501,
        rf"type {frame_type} frame on channel 1.*unknown frame type {frame_type} "
        r"\(expected 1, 2, 3 or 8\)",
    )


@pytest.mark.parametrize("frame_type", [1, 2, 3, 8])
def test_frame_over_frame_max_is_refused_from_its_header(frame_type: int) -> None:
    header = bytes([frame_type]) + b"\x00\x01" + (4089).to_bytes(4, "big")
    read_error_three_ways(header, 501, r"frame of 4097 octets exceeds frame_max 4096")


@pytest.mark.parametrize("frame_max", [FRAME_MIN_SIZE, 131_072, MAX_FRAME])
def test_largest_announced_size_is_refused_at_once(frame_max: int) -> None:
    reader = FrameReader(frame_max=frame_max)
    reader.feed(b"\x03\x00\x01\xff\xff\xff")
    assert reader.next_frame() is None
    reader.feed(b"\xff")
    with pytest.raises(RemoteProtocolError, match=r"frame of 4294967303 octets exceeds") as info:
        reader.next_frame()
    assert info.value.reply_code == 501
    read_error_three_ways(
        b"\x03\x00\x01\xff\xff\xff\xff", 501, "exceeds frame_max", frame_max=frame_max
    )


def test_frame_max_can_be_raised_after_tune() -> None:
    reader = FrameReader()
    assert reader.frame_max == FRAME_MIN_SIZE
    reader.frame_max = 131_072
    assert reader.frame_max == 131_072
    body = b"b" * 100_000
    assert feed_all(reader, [frame_bytes(3, 1, body)]) == [ContentBodyFrame(1, body)]


@pytest.mark.parametrize("frame_max", [0, 8, FRAME_MIN_SIZE - 1, MAX_FRAME + 1])
def test_frame_max_out_of_range(frame_max: int) -> None:
    with pytest.raises(ValueError, match=r"frame_max must be in 4096\.\.4294967295"):
        FrameReader(frame_max=frame_max)
    reader = FrameReader()
    with pytest.raises(ValueError, match="frame_max"):
        reader.frame_max = frame_max
    assert reader.frame_max == FRAME_MIN_SIZE


def test_heartbeat_on_a_channel() -> None:
    error = read_error_three_ways(
        frame_bytes(8, 1, b""), 505, r"heartbeat frame on channel 1.*must be on channel 0"
    )
    assert (error.class_id, error.method_id) == (0, 0)


def test_heartbeat_with_a_payload() -> None:
    read_error_three_ways(
        frame_bytes(8, 0, b"\x00"), 501, r"heartbeat frame .*must have an empty payload"
    )


def test_method_payload_shorter_than_its_ids() -> None:
    read_error_three_ways(
        frame_bytes(1, 1, b"\x00\x3c\x00"), 501, "shorter than 4 octets of class and method id"
    )


def test_truncated_method_arguments() -> None:
    payload = method_payload(DELIVER)
    error = read_error_three_ways(
        frame_bytes(1, 1, payload[:-1]),
        502,
        r"^method frame on channel 1 \(payload size 26\) at stream offset 0: "
        r"cannot decode basic\.deliver \(60, 60\): the fields run 1 octets past the payload$",
    )
    assert (error.class_id, error.method_id) == (60, 60)
    # Cut inside a fixed-size field, so the decoder reads past the payload.
    read_error_three_ways(frame_bytes(1, 1, method_payload(BasicAck())[:6]), 502, "basic.ack")


def test_trailing_bytes_in_a_method_payload() -> None:
    error = read_error_three_ways(
        frame_bytes(1, 1, method_payload(BasicAck()) + b"\x00\x00"),
        502,
        r"cannot decode basic\.ack \(60, 80\): 2 octets of the payload left over",
    )
    assert (error.class_id, error.method_id) == (60, 80)


def test_unknown_method() -> None:
    error = read_error_three_ways(
        frame_bytes(1, 1, b"\x00\x3c\x03\xe7"), 540, r"unknown method \(60, 999\)"
    )
    assert (error.class_id, error.method_id) == (60, 999)
    error = read_error_three_ways(frame_bytes(1, 1, b"\x00\x46\x00\x0a"), 540, r"\(70, 10\)")
    assert (error.class_id, error.method_id) == (70, 10)


def test_malformed_utf8_in_a_method() -> None:
    payload = bytearray(method_payload(DELIVER))
    payload[5] = 0xFF  # inside the consumer tag
    error = read_error_three_ways(
        frame_bytes(1, 1, bytes(payload)), 502, "basic.deliver.*UnicodeDecodeError"
    )
    assert (error.class_id, error.method_id) == (60, 60)


def test_content_header_with_weight() -> None:
    error = read_error_three_ways(
        frame_bytes(2, 1, header_payload(5, PROPS, weight=1)),
        502,
        "content header weight is 1, must be 0",
    )
    assert error.class_id == 60


def test_content_header_of_unknown_class() -> None:
    payload = b"\x00\x46" + header_payload(5, PROPS)[2:]
    error = read_error_three_ways(frame_bytes(2, 1, payload), 502, "no content class 70")
    assert error.class_id == 70


def test_content_header_shorter_than_its_fixed_part() -> None:
    read_error_three_ways(frame_bytes(2, 1, b"\x00\x3c\x00\x00\x00"), 501, "shorter than 12 octets")


def test_content_header_properties_truncated_or_too_long() -> None:
    payload = header_payload(5, PROPS)
    read_error_three_ways(
        frame_bytes(2, 1, payload[:-3]), 502, "cannot decode the properties of class 60"
    )
    read_error_three_ways(
        frame_bytes(2, 1, payload + b"\x00"),
        502,
        "properties of class 60: 1 octets of the payload left over",
    )
    read_error_three_ways(
        frame_bytes(2, 1, payload[:12] + b"\x00\x02"), 502, "properties of class 60: ValueError"
    )


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_random_bytes_give_frames_or_remote_protocol_errors(data: bytes) -> None:
    reader = FrameReader()
    try:
        feed_all(reader, [data])
    except RemoteProtocolError as exc:
        reply_code = exc.reply_code
    else:
        reply_code = 0
    assert reply_code in (0, 501, 502, 505, 540)


@settings(max_examples=300)
@given(
    index=st.sampled_from(sorted(METHODS)),
    arguments=st.binary(max_size=48),
    frame_type=st.sampled_from([1, 2]),
)
def test_random_payloads_give_frames_or_remote_protocol_errors(
    index: int, arguments: bytes, frame_type: int
) -> None:
    prefix = index.to_bytes(4, "big") if frame_type == 1 else b"\x00\x3c\x00\x00" + bytes(8)
    reader = FrameReader()
    try:
        frames = feed_all(reader, [frame_bytes(frame_type, 1, prefix + arguments)])
    except RemoteProtocolError as exc:
        reply_code, frames = exc.reply_code, []
    else:
        reply_code = 0
    assert (reply_code, len(frames)) in ((0, 1), (502, 0))


# --- reader: buffers as received, and large bodies collected piece by piece --------------------

BIG: Final = bytes(range(256)) * 400  # 102400 octets: one body frame, collected in pieces
BIG_STREAM: Final = (
    frame_bytes(1, 1, method_payload(DELIVER))
    + frame_bytes(2, 1, header_payload(len(BIG), PROPS))
    + frame_bytes(3, 1, BIG)
    + frame_bytes(1, 1, method_payload(DELIVER))
)
BIG_FRAMES: Final = [
    MethodFrame(1, DELIVER),
    ContentHeaderFrame(1, 60, len(BIG), PROPS),
    ContentBodyFrame(1, BIG),
    MethodFrame(1, DELIVER),
]


def pieces(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    bounds = sorted(set(cuts) | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "view of bytearray"])
@pytest.mark.parametrize("size", [1, 1000, 4096, 65536, 70000])
def test_large_body_in_pieces_of_any_kind(kind: str, size: int) -> None:
    reader = FrameReader(frame_max=MAX_FRAME)
    frames: list[Frame] = []
    for piece in pieces(BIG_STREAM, range(0, len(BIG_STREAM), size)):
        if kind == "bytes":
            reader.feed(piece)
        else:
            # The caller reuses its buffer at once: what was fed must not depend on it.
            reused = bytearray(piece)
            reader.feed(reused if kind == "bytearray" else memoryview(reused))
            reused[:] = b"\xff" * len(reused)
            if kind == "memoryview":
                reader.feed(memoryview(b""))
        frames += drain(reader)
    assert frames == BIG_FRAMES
    assert reader.buffered == 0


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(0, len(BIG_STREAM)), max_size=8), lazy=st.booleans())
def test_large_body_cut_anywhere(cuts: list[int], lazy: bool) -> None:
    """Cut anywhere, and fed all before reading (lazy) or read after every piece."""
    reader = FrameReader(frame_max=MAX_FRAME)
    chunks = pieces(BIG_STREAM, cuts)
    if lazy:
        for chunk in chunks:
            reader.feed(chunk)
        frames = drain(reader)
    else:
        frames = feed_all(reader, chunks)
    assert frames == BIG_FRAMES
    assert reader.buffered == 0


def test_buffered_counts_a_large_body_still_arriving() -> None:
    reader = FrameReader(frame_max=MAX_FRAME)
    head = len(BIG_STREAM) - len(frame_bytes(1, 1, method_payload(DELIVER)))
    reader.feed(BIG_STREAM[:60000])
    assert drain(reader) == BIG_FRAMES[:2]
    start = 60000 - reader.buffered  # where the body frame starts
    assert reader.buffered == 60000 - start
    reader.feed(BIG_STREAM[60000:head])  # the whole body, frame-end included
    assert reader.buffered == head - start
    reader.feed(BIG_STREAM[head:])  # more after it, before the body was read
    assert reader.buffered == len(BIG_STREAM) - start
    assert drain(reader) == BIG_FRAMES[2:]
    assert reader.buffered == 0


def test_bad_frame_end_of_a_large_body_collected_in_pieces() -> None:
    stream = BIG_STREAM[: -len(frame_bytes(1, 1, method_payload(DELIVER))) - 1] + b"\x00"
    body_at = len(stream) - len(BIG) - 8
    reader = FrameReader(frame_max=MAX_FRAME)
    assert feed_all(reader, [stream[:1000], stream[1000:50000]]) == BIG_FRAMES[:2]
    reader.feed(stream[50000:])
    with pytest.raises(RemoteProtocolError) as info:
        reader.next_frame()
    assert info.value.reply_code == 501
    assert info.value.reply_text == (
        f"content body frame on channel 1 (payload size {len(BIG)}) at stream offset "
        f"{body_at}: frame-end octet is 0x00, expected 0xce"
    )


def test_error_offset_after_reads_kept_as_received() -> None:
    good = frame_bytes(1, 1, method_payload(DELIVER))
    stream = good * 3 + frame_bytes(9, 0, b"")
    reader = FrameReader()
    with pytest.raises(RemoteProtocolError, match=f"at stream offset {3 * len(good)}:"):
        feed_all(reader, pieces(stream, [5, len(good) + 3, 2 * len(good)]))
