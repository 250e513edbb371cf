"""Record real AMQP 0-9-1 traffic with RabbitMQ as replayable test fixtures.

This script talks to a live broker over a raw TCP socket.  It deliberately uses
only the standard library (``socket``, ``struct``, ``select``) and hand-encodes
the handful of client frames it needs, so the recorded bytes are independent of
every codec under test (ours, pamqp, pika, py-amqp).

Each scenario runs on its own connection and is written to
``OUT/<scenario>.json``::

    {"scenario": "...", "description": "...", "broker": "RabbitMQ 3.10.8",
     "recorded": "YYYY-MM-DD",
     "chunks": [{"from": "client", "hex": "..."}, {"from": "server", "hex": "..."}]}

A client chunk is the exact bytes of one ``sendall``; a server chunk is
everything received from the socket between two client sends (or after the
last one, up to EOF or the end of the scenario).  Server chunks are TCP read
boundaries, not frame boundaries.  Concatenating the chunks of one direction
gives that direction's byte stream exactly as it was on the wire.

Usage::

    python tools/capture_rabbitmq.py --out tests/fixtures/rabbitmq
    python tools/capture_rabbitmq.py --only heartbeat --only bad_frame
"""

from __future__ import annotations

import argparse
import datetime
import json
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TypeAlias

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
AMQP_0_10_HEADER = b"AMQP\x01\x01\x00\x0a"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_TYPES = frozenset({FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT})
FRAME_OVERHEAD = 8  # 7-octet header + frame-end octet
MAX_ACCEPTED_FRAME = 16 * 1024 * 1024  # sanity bound for the reader, far above frame_max

DEFAULT_TIMEOUT = 10.0

# (class-id, method-id) -> name, for the methods this script sends or expects.
METHOD_NAMES: dict[tuple[int, int], str] = {
    (10, 10): "connection.start",
    (10, 11): "connection.start-ok",
    (10, 30): "connection.tune",
    (10, 31): "connection.tune-ok",
    (10, 40): "connection.open",
    (10, 41): "connection.open-ok",
    (10, 50): "connection.close",
    (10, 51): "connection.close-ok",
    (10, 60): "connection.blocked",
    (10, 61): "connection.unblocked",
    (20, 10): "channel.open",
    (20, 11): "channel.open-ok",
    (20, 20): "channel.flow",
    (20, 21): "channel.flow-ok",
    (20, 40): "channel.close",
    (20, 41): "channel.close-ok",
    (50, 10): "queue.declare",
    (50, 11): "queue.declare-ok",
    (50, 40): "queue.delete",
    (50, 41): "queue.delete-ok",
    (60, 20): "basic.consume",
    (60, 21): "basic.consume-ok",
    (60, 30): "basic.cancel",
    (60, 31): "basic.cancel-ok",
    (60, 40): "basic.publish",
    (60, 50): "basic.return",
    (60, 60): "basic.deliver",
    (60, 70): "basic.get",
    (60, 71): "basic.get-ok",
    (60, 72): "basic.get-empty",
    (60, 80): "basic.ack",
    (60, 120): "basic.nack",
    (85, 10): "confirm.select",
    (85, 11): "confirm.select-ok",
}

CONNECTION_START = (10, 10)
CONNECTION_START_OK = (10, 11)
CONNECTION_TUNE = (10, 30)
CONNECTION_TUNE_OK = (10, 31)
CONNECTION_OPEN = (10, 40)
CONNECTION_OPEN_OK = (10, 41)
CONNECTION_CLOSE = (10, 50)
CONNECTION_CLOSE_OK = (10, 51)
CHANNEL_OPEN = (20, 10)
CHANNEL_OPEN_OK = (20, 11)
CHANNEL_CLOSE = (20, 40)
CHANNEL_CLOSE_OK = (20, 41)
QUEUE_DECLARE = (50, 10)
QUEUE_DECLARE_OK = (50, 11)
QUEUE_DELETE = (50, 40)
QUEUE_DELETE_OK = (50, 41)
BASIC_CONSUME = (60, 20)
BASIC_CONSUME_OK = (60, 21)
BASIC_CANCEL = (60, 30)
BASIC_CANCEL_OK = (60, 31)
BASIC_PUBLISH = (60, 40)
BASIC_RETURN = (60, 50)
BASIC_DELIVER = (60, 60)
BASIC_GET = (60, 70)
BASIC_GET_OK = (60, 71)
BASIC_GET_EMPTY = (60, 72)
BASIC_ACK = (60, 80)
BASIC_NACK = (60, 120)
CONFIRM_SELECT = (85, 10)
CONFIRM_SELECT_OK = (85, 11)

BASIC_CLASS = 60

FieldValue: TypeAlias = (
    "bool | int | float | str | bytes | Decimal | list[FieldValue] | dict[str, FieldValue] | None"
)


class CaptureError(Exception):
    """The broker did something this script did not expect."""


class PeerClosed(CaptureError):
    """The broker closed the TCP connection while we still expected bytes."""


# --------------------------------------------------------------------------
# Encoding: just enough of AMQP 0-9-1 to speak as a client.
# --------------------------------------------------------------------------


def _utf8(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def enc_shortstr(value: str | bytes) -> bytes:
    raw = _utf8(value)
    if len(raw) > 255:
        raise ValueError(f"shortstr too long ({len(raw)} octets)")
    return struct.pack(">B", len(raw)) + raw


def enc_longstr(value: str | bytes) -> bytes:
    raw = _utf8(value)
    return struct.pack(">I", len(raw)) + raw


def enc_bits(*flags: bool) -> bytes:
    """Pack up to eight consecutive bit fields into one octet, first flag = bit 0."""
    if len(flags) > 8:
        raise ValueError("more than eight bits in one octet")
    octet = 0
    for index, flag in enumerate(flags):
        if flag:
            octet |= 1 << index
    return struct.pack(">B", octet)


# A table entry is (name, encoded field value including its type octet).
TableEntry: TypeAlias = tuple[str, bytes]


def enc_table(entries: Sequence[TableEntry]) -> bytes:
    body = b"".join(enc_shortstr(name) + value for name, value in entries)
    return struct.pack(">I", len(body)) + body


def f_bool(value: bool) -> bytes:
    return b"t" + (b"\x01" if value else b"\x00")


def f_long_int(value: int) -> bytes:
    """Field type 'I': signed 32-bit integer."""
    return b"I" + struct.pack(">i", value)


def f_longstr(value: str | bytes) -> bytes:
    """Field type 'S': long string."""
    return b"S" + enc_longstr(value)


def f_table(entries: Sequence[TableEntry]) -> bytes:
    """Field type 'F': nested field table."""
    return b"F" + enc_table(entries)


def enc_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([FRAME_END])


def enc_method(channel: int, method: tuple[int, int], args: bytes = b"") -> bytes:
    class_id, method_id = method
    return enc_frame(FRAME_METHOD, channel, struct.pack(">HH", class_id, method_id) + args)


HEARTBEAT_FRAME = enc_frame(FRAME_HEARTBEAT, 0, b"")


@dataclass(frozen=True)
class BasicProperties:
    """The subset of basic properties the scenarios publish with."""

    content_type: str | None = None
    headers: Sequence[TableEntry] | None = None
    delivery_mode: int | None = None
    message_id: str | None = None
    timestamp: int | None = None

    def encode(self) -> bytes:
        """Property flags followed by the present properties, in flag order."""
        flags = 0
        values = b""
        if self.content_type is not None:
            flags |= 1 << 15
            values += enc_shortstr(self.content_type)
        if self.headers is not None:
            flags |= 1 << 13
            values += enc_table(self.headers)
        if self.delivery_mode is not None:
            flags |= 1 << 12
            values += struct.pack(">B", self.delivery_mode)
        if self.message_id is not None:
            flags |= 1 << 7
            values += enc_shortstr(self.message_id)
        if self.timestamp is not None:
            flags |= 1 << 6
            values += struct.pack(">Q", self.timestamp)
        return struct.pack(">H", flags) + values


def enc_content(
    channel: int, body: bytes, properties: BasicProperties, frame_max: int
) -> list[bytes]:
    """Content header frame plus as many body frames as frame_max requires."""
    header = struct.pack(">HHQ", BASIC_CLASS, 0, len(body)) + properties.encode()
    frames = [enc_frame(FRAME_HEADER, channel, header)]
    step = frame_max - FRAME_OVERHEAD
    frames.extend(
        enc_frame(FRAME_BODY, channel, body[offset : offset + step])
        for offset in range(0, len(body), step)
    )
    return frames


def enc_publish(
    channel: int,
    exchange: str,
    routing_key: str,
    body: bytes,
    properties: BasicProperties,
    frame_max: int,
    *,
    mandatory: bool = False,
) -> bytes:
    """basic.publish + content header + body frames, as one buffer."""
    method = enc_method(
        channel,
        BASIC_PUBLISH,
        struct.pack(">H", 0)
        + enc_shortstr(exchange)
        + enc_shortstr(routing_key)
        + enc_bits(mandatory, False),
    )
    return method + b"".join(enc_content(channel, body, properties, frame_max))


# --------------------------------------------------------------------------
# Decoding: enough to follow the conversation and validate the recording.
# --------------------------------------------------------------------------


class Cursor:
    """Sequential reader over one frame payload."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, count: int) -> bytes:
        end = self.pos + count
        if end > len(self.data):
            raise CaptureError(
                f"truncated payload: need {count} octets at {self.pos}, have {len(self.data)}"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def octet(self) -> int:
        return self.take(1)[0]

    def short(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def long(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def longlong(self) -> int:
        return int.from_bytes(self.take(8), "big")

    def signed(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big", signed=True)

    def shortstr(self) -> str:
        return self.take(self.octet()).decode("utf-8")

    def longstr(self) -> bytes:
        return self.take(self.long())

    def table(self) -> dict[str, FieldValue]:
        inner = Cursor(self.longstr())
        result: dict[str, FieldValue] = {}
        while inner.pos < len(inner.data):
            name = inner.shortstr()
            result[name] = inner.field_value()
        return result

    def field_value(self) -> FieldValue:
        kind = chr(self.octet())
        if kind == "t":
            return self.octet() != 0
        if kind in "bBsuIilL":
            size = {"b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "l": 8, "L": 8}[kind]
            raw = self.take(size)
            return int.from_bytes(raw, "big", signed=kind in "bsIl")
        if kind == "f":
            return float(struct.unpack(">f", self.take(4))[0])
        if kind == "d":
            return float(struct.unpack(">d", self.take(8))[0])
        if kind == "D":
            scale = self.octet()
            return Decimal(self.signed(4)).scaleb(-scale)
        if kind == "S":
            raw = self.longstr()
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw
        if kind == "x":
            return self.longstr()
        if kind == "T":
            return self.longlong()
        if kind == "F":
            return self.table()
        if kind == "A":
            inner = Cursor(self.longstr())
            items: list[FieldValue] = []
            while inner.pos < len(inner.data):
                items.append(inner.field_value())
            return items
        if kind == "V":
            return None
        raise CaptureError(f"unknown field type {kind!r} at offset {self.pos - 1}")


@dataclass(frozen=True)
class Frame:
    frame_type: int
    channel: int
    payload: bytes

    @property
    def method(self) -> tuple[int, int]:
        if self.frame_type != FRAME_METHOD or len(self.payload) < 4:
            return (0, 0)
        return (
            int.from_bytes(self.payload[0:2], "big"),
            int.from_bytes(self.payload[2:4], "big"),
        )

    def args(self) -> Cursor:
        return Cursor(self.payload[4:])

    def describe(self) -> str:
        if self.frame_type == FRAME_HEARTBEAT:
            return "heartbeat"
        if self.frame_type == FRAME_HEADER:
            return f"content-header ch={self.channel}"
        if self.frame_type == FRAME_BODY:
            return f"content-body ch={self.channel} {len(self.payload)}B"
        name = METHOD_NAMES.get(self.method, f"method{self.method}")
        if self.method in (CONNECTION_CLOSE, CHANNEL_CLOSE):
            args = self.args()
            code = args.short()
            text = args.shortstr()
            return f"{name} ch={self.channel} {code} {text!r} ({args.short()}, {args.short()})"
        return f"{name} ch={self.channel}"


def split_frames(data: bytes) -> list[Frame]:
    """Parse a complete byte stream into frames, checking every frame-end octet."""
    frames: list[Frame] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 7:
            raise CaptureError(f"trailing partial frame header at offset {pos}")
        frame_type, channel, size = struct.unpack_from(">BHI", data, pos)
        end = pos + 7 + int(size)
        if end >= len(data):
            raise CaptureError(f"truncated frame at offset {pos}")
        if data[end] != FRAME_END:
            raise CaptureError(f"bad frame-end 0x{data[end]:02x} at offset {end}")
        frames.append(Frame(int(frame_type), int(channel), data[pos + 7 : end]))
        pos = end + 1
    return frames


# --------------------------------------------------------------------------
# The recording session.
# --------------------------------------------------------------------------

Chunk: TypeAlias = tuple[str, bytes]


@dataclass(frozen=True)
class Options:
    host: str
    port: int
    user: str
    password: str
    rabbitmqctl: str
    timeout: float


@dataclass
class Tuned:
    channel_max: int
    frame_max: int
    heartbeat: int
    server_properties: dict[str, FieldValue]


@dataclass
class Content:
    properties: bytes
    body: bytes
    body_frames: int


class Session:
    """A raw socket that records both directions and reads whole frames."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.sock = socket.create_connection((opts.host, opts.port), timeout=opts.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.chunks: list[Chunk] = []
        self.frame_max = 131072
        self.heartbeats_received = 0
        self._pending = bytearray()  # received, not yet attributed to a chunk
        self._rx = bytearray()  # received, not yet parsed
        self.eof = False

    # -- raw I/O ---------------------------------------------------------

    def send(self, data: bytes, *, drain: bool = True) -> None:
        """Send one client chunk; whatever arrived before it becomes a server chunk.

        With ``drain`` the socket is first polled (without blocking) so that bytes
        the broker already sent are attributed to the server chunk before this send.
        """
        if drain:
            while self._recv(0.0):
                pass
        self._flush_server()
        self.chunks.append(("client", data))
        self.sock.sendall(data)

    def _flush_server(self) -> None:
        if self._pending:
            self.chunks.append(("server", bytes(self._pending)))
            self._pending.clear()

    def _recv(self, timeout: float) -> bool:
        if self.eof:
            return False
        readable, _, _ = select.select([self.sock], [], [], max(timeout, 0.0))
        if not readable:
            return False
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self._pending += data
        self._rx += data
        return True

    def _fill(self, count: int, deadline: float) -> None:
        """Block until at least ``count`` unparsed octets are buffered."""
        while len(self._rx) < count:
            if self.eof:
                raise PeerClosed(f"EOF with {len(self._rx)} of {count} octets buffered")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out waiting for {count} octets")
            self._recv(remaining)

    def read_frame(self, timeout: float | None = None) -> Frame:
        """Read exactly one frame, checking type, size and the frame-end octet.

        Nothing is consumed unless the whole frame has arrived, so a timeout
        leaves the stream in sync.
        """
        deadline = time.monotonic() + (self.opts.timeout if timeout is None else timeout)
        self._fill(7, deadline)
        frame_type, channel, size = struct.unpack_from(">BHI", self._rx, 0)
        header = bytes(self._rx[:7])
        if frame_type not in FRAME_TYPES:
            raise CaptureError(f"unknown frame type {frame_type} (header {header.hex()})")
        if size > MAX_ACCEPTED_FRAME:
            raise CaptureError(f"frame size {size} is implausible (header {header.hex()})")
        total = 7 + int(size) + 1
        self._fill(total, deadline)
        end = self._rx[total - 1]
        if end != FRAME_END:
            raise CaptureError(f"bad frame-end octet 0x{end:02x} after {header.hex()}")
        payload = bytes(self._rx[7 : total - 1])
        del self._rx[:total]
        return Frame(int(frame_type), int(channel), payload)

    def read_until_eof(self, timeout: float | None = None) -> bool:
        """Record everything until the broker closes the socket; True on EOF."""
        deadline = time.monotonic() + (self.opts.timeout if timeout is None else timeout)
        while not self.eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._recv(remaining)
        return True

    def finish(self) -> list[Chunk]:
        self._flush_server()
        self.sock.close()
        return self.chunks

    # -- frames and methods -----------------------------------------------

    def next_method(self, timeout: float | None = None) -> Frame:
        """The next method frame, counting (and skipping) heartbeats."""
        while True:
            frame = self.read_frame(timeout)
            if frame.frame_type == FRAME_HEARTBEAT:
                self.heartbeats_received += 1
                continue
            if frame.frame_type != FRAME_METHOD:
                raise CaptureError(f"expected a method frame, got {frame.describe()}")
            return frame

    def expect(self, channel: int, method: tuple[int, int]) -> Cursor:
        frame = self.next_method()
        if frame.method != method or frame.channel != channel:
            wanted = METHOD_NAMES.get(method, str(method))
            raise CaptureError(f"expected {wanted} on ch={channel}, got {frame.describe()}")
        return frame.args()

    def send_method(
        self, channel: int, method: tuple[int, int], args: bytes = b"", *, drain: bool = True
    ) -> None:
        self.send(enc_method(channel, method, args), drain=drain)

    def read_content(self, channel: int) -> Content:
        header = self.read_frame()
        if header.frame_type != FRAME_HEADER or header.channel != channel:
            raise CaptureError(f"expected a content header on ch={channel}: {header.describe()}")
        cursor = Cursor(header.payload)
        class_id, _weight, body_size = cursor.short(), cursor.short(), cursor.longlong()
        if class_id != BASIC_CLASS:
            raise CaptureError(f"content header for class {class_id}")
        body = b""
        body_frames = 0
        while len(body) < body_size:
            frame = self.read_frame()
            if frame.frame_type != FRAME_BODY or frame.channel != channel:
                raise CaptureError(f"expected a content body on ch={channel}: {frame.describe()}")
            body += frame.payload
            body_frames += 1
        if len(body) != body_size:
            raise CaptureError(f"body is {len(body)} octets, header said {body_size}")
        return Content(header.payload[12:], body, body_frames)

    # -- conversation helpers ------------------------------------------------

    def handshake(
        self, connection_name: str, *, frame_max: int | None = None, heartbeat: int = 60
    ) -> Tuned:
        self.send(PROTOCOL_HEADER)
        start = self.expect(0, CONNECTION_START)
        version = (start.octet(), start.octet())
        if version != (0, 9):
            raise CaptureError(f"connection.start offers version {version}")
        server_properties = start.table()
        mechanisms = start.longstr().split()
        if b"PLAIN" not in mechanisms:
            raise CaptureError(f"broker does not offer PLAIN: {mechanisms!r}")
        response = b"\x00" + _utf8(self.opts.user) + b"\x00" + _utf8(self.opts.password)
        self.send_method(
            0,
            CONNECTION_START_OK,
            client_properties(connection_name)
            + enc_shortstr("PLAIN")
            + enc_longstr(response)
            + enc_shortstr("en_US"),
        )
        tune = self.expect(0, CONNECTION_TUNE)
        channel_max, server_frame_max, _server_heartbeat = tune.short(), tune.long(), tune.short()
        self.frame_max = server_frame_max if frame_max is None else frame_max
        self.send_method(
            0, CONNECTION_TUNE_OK, struct.pack(">HIH", channel_max, self.frame_max, heartbeat)
        )
        self.send_method(0, CONNECTION_OPEN, enc_shortstr("/") + enc_shortstr("") + enc_bits(False))
        self.expect(0, CONNECTION_OPEN_OK)
        return Tuned(channel_max, self.frame_max, heartbeat, server_properties)

    def open_channel(self, channel: int) -> None:
        self.send_method(channel, CHANNEL_OPEN, enc_shortstr(""))
        self.expect(channel, CHANNEL_OPEN_OK)

    def close_channel(self, channel: int) -> None:
        self.send_method(channel, CHANNEL_CLOSE, close_args(200, "Goodbye"))
        self.expect(channel, CHANNEL_CLOSE_OK)

    def close_connection(self) -> None:
        self.send_method(0, CONNECTION_CLOSE, close_args(200, "Goodbye"))
        self.expect(0, CONNECTION_CLOSE_OK)
        # The peer that sent connection.close closes the socket once it has the
        # close-ok; RabbitMQ waits for us to do it, so finish() does.

    def declare_queue(
        self,
        channel: int,
        queue: str,
        *,
        passive: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
    ) -> None:
        self.send_method(
            channel,
            QUEUE_DECLARE,
            struct.pack(">H", 0)
            + enc_shortstr(queue)
            + enc_bits(passive, False, exclusive, auto_delete, False)
            + enc_table([]),
        )

    def delete_queue(self, channel: int, queue: str) -> None:
        self.send_method(
            channel,
            QUEUE_DELETE,
            struct.pack(">H", 0) + enc_shortstr(queue) + enc_bits(False, False, False),
        )

    def consume(self, channel: int, queue: str, consumer_tag: str) -> None:
        self.send_method(
            channel,
            BASIC_CONSUME,
            struct.pack(">H", 0)
            + enc_shortstr(queue)
            + enc_shortstr(consumer_tag)
            + enc_bits(False, False, False, False)
            + enc_table([]),
        )
        tag = self.expect(channel, BASIC_CONSUME_OK).shortstr()
        if tag != consumer_tag:
            raise CaptureError(f"consume-ok for {tag!r}, wanted {consumer_tag!r}")

    def ack(self, channel: int, delivery_tag: int, *, multiple: bool = False) -> None:
        self.send_method(channel, BASIC_ACK, struct.pack(">Q", delivery_tag) + enc_bits(multiple))

    def confirm_select(self, channel: int) -> None:
        self.send_method(channel, CONFIRM_SELECT, enc_bits(False))
        self.expect(channel, CONFIRM_SELECT_OK)

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: BasicProperties,
        *,
        mandatory: bool = False,
        drain: bool = True,
    ) -> None:
        data = enc_publish(
            channel, exchange, routing_key, body, properties, self.frame_max, mandatory=mandatory
        )
        self.send(data, drain=drain)


def close_args(code: int, text: str, class_id: int = 0, method_id: int = 0) -> bytes:
    return struct.pack(">H", code) + enc_shortstr(text) + struct.pack(">HH", class_id, method_id)


def client_properties(connection_name: str) -> bytes:
    capabilities = [
        ("publisher_confirms", f_bool(True)),
        ("exchange_exchange_bindings", f_bool(True)),
        ("basic.nack", f_bool(True)),
        ("consumer_cancel_notify", f_bool(True)),
        ("connection.blocked", f_bool(True)),
        ("authentication_failure_close", f_bool(True)),
        ("per_consumer_qos", f_bool(True)),
    ]
    return enc_table(
        [
            ("product", f_longstr("amqp-sansio tools/capture_rabbitmq.py")),
            ("version", f_longstr("0.1")),
            ("platform", f_longstr("Python")),
            ("capabilities", f_table(capabilities)),
            ("connection_name", f_longstr(connection_name)),
        ]
    )


def parse_delivery_tag_and_multiple(args: Cursor) -> tuple[int, bool]:
    tag = args.longlong()
    return tag, bool(args.octet() & 1)


# --------------------------------------------------------------------------
# Scenarios.
# --------------------------------------------------------------------------


@dataclass
class Capture:
    chunks: list[Chunk]
    notes: list[str] = field(default_factory=list)


ScenarioFn: TypeAlias = Callable[[Options], Capture]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    run: ScenarioFn
    # False for scenarios whose client stream is deliberately not valid framing.
    client_stream_valid: bool = True
    server_stream_is_frames: bool = True


FIXED_TIMESTAMP = 1767225600  # 2026-01-01T00:00:00Z, so the bytes do not depend on the clock
PLAIN_TEXT = BasicProperties(content_type="text/plain")


def conn_name(scenario: str) -> str:
    return f"capture.{scenario}"


def run_handshake(opts: Options) -> Capture:
    s = Session(opts)
    s.handshake(conn_name("handshake"), heartbeat=60)
    s.open_channel(1)
    s.close_channel(1)
    s.close_connection()
    return Capture(s.finish())


def run_delivery_with_headers(opts: Options) -> Capture:
    queue = "capture.delivery_with_headers"
    s = Session(opts)
    s.handshake(conn_name("delivery_with_headers"), frame_max=4096)
    s.open_channel(1)
    s.declare_queue(1, queue, exclusive=True, auto_delete=True)
    s.expect(1, QUEUE_DECLARE_OK)
    properties = BasicProperties(
        content_type="application/json",
        headers=[("a", f_long_int(1)), ("b", f_longstr("x")), ("c", f_bool(True))],
        delivery_mode=2,
        message_id="capture-msg-1",
        timestamp=FIXED_TIMESTAMP,
    )
    small = b'{"hello": "world"}'
    s.publish(1, "", queue, small, properties)
    s.consume(1, queue, "capture.ctag")
    notes: list[str] = []
    bodies = [small, bytes(i % 251 for i in range(10000))]
    for index, body in enumerate(bodies):
        if index:
            s.publish(1, "", queue, body, PLAIN_TEXT)
        deliver = s.expect(1, BASIC_DELIVER)
        _tag = deliver.shortstr()
        delivery_tag = deliver.longlong()
        content = s.read_content(1)
        if content.body != body:
            raise CaptureError("delivered body differs from the published one")
        frames = content.body_frames
        notes.append(f"delivery {delivery_tag}: {len(body)}-octet body in {frames} body frame(s)")
        s.ack(1, delivery_tag)
    s.send_method(1, BASIC_CANCEL, enc_shortstr("capture.ctag") + enc_bits(False))
    s.expect(1, BASIC_CANCEL_OK)
    s.delete_queue(1, queue)
    s.expect(1, QUEUE_DELETE_OK)
    s.close_channel(1)
    s.close_connection()
    return Capture(s.finish(), notes)


def run_basic_get(opts: Options) -> Capture:
    queue = "capture.basic_get"
    s = Session(opts)
    s.handshake(conn_name("basic_get"))
    s.open_channel(1)
    s.declare_queue(1, queue, exclusive=True, auto_delete=True)
    s.expect(1, QUEUE_DECLARE_OK)
    get = struct.pack(">H", 0) + enc_shortstr(queue) + enc_bits(False)
    s.send_method(1, BASIC_GET, get)
    s.expect(1, BASIC_GET_EMPTY)
    s.publish(1, "", queue, b"one message", PLAIN_TEXT)
    s.send_method(1, BASIC_GET, get)
    ok = s.expect(1, BASIC_GET_OK)
    delivery_tag = ok.longlong()
    content = s.read_content(1)
    if content.body != b"one message":
        raise CaptureError(f"get-ok body {content.body!r}")
    s.ack(1, delivery_tag)
    s.delete_queue(1, queue)
    s.expect(1, QUEUE_DELETE_OK)
    s.close_channel(1)
    s.close_connection()
    return Capture(s.finish())


def run_channel_close_404(opts: Options) -> Capture:
    s = Session(opts)
    s.handshake(conn_name("channel_close_404"))
    s.open_channel(1)
    s.declare_queue(1, "capture.missing", passive=True)
    close = s.expect(1, CHANNEL_CLOSE)
    code, text = close.short(), close.shortstr()
    failed = (close.short(), close.short())
    if code != 404:
        raise CaptureError(f"expected 404, got {code} {text!r}")
    s.send_method(1, CHANNEL_CLOSE_OK)
    s.open_channel(2)
    queue = "capture.channel_close_404"
    s.declare_queue(2, queue, exclusive=True, auto_delete=True)
    s.expect(2, QUEUE_DECLARE_OK)
    s.delete_queue(2, queue)
    s.expect(2, QUEUE_DELETE_OK)
    s.close_channel(2)
    s.close_connection()
    return Capture(s.finish(), [f"channel.close {code} {text!r} for method {failed}"])


def rabbitmqctl(opts: Options, *args: str) -> str:
    result = subprocess.run([opts.rabbitmqctl, *args], check=False, capture_output=True, text=True)
    if result.returncode:
        raise CaptureError(
            f"rabbitmqctl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
        )
    return result.stdout


def find_connection_pid(opts: Options, local_port: int, name: str) -> str:
    """The broker-side pid of our connection, matched on peer port and connection_name.

    The default (tab-separated) formatter prints the pid as ``<rabbit@host.N.N.N>``,
    which is what ``close_connection`` accepts; the json formatter does not.
    """
    for _attempt in range(10):
        listing = rabbitmqctl(
            opts, "list_connections", "-s", "pid", "peer_port", "client_properties"
        )
        for line in listing.splitlines():
            pid, _, rest = line.partition("\t")
            peer_port, _, properties = rest.partition("\t")
            if peer_port != str(local_port):
                continue
            if f'{{"connection_name","{name}"}}' not in properties:
                raise CaptureError(f"connection from port {local_port} is not ours: {line}")
            return pid
        time.sleep(0.5)
    raise CaptureError(f"rabbitmqctl does not list a connection from port {local_port}")


def run_connection_close_forced(opts: Options) -> Capture:
    name = conn_name("connection_close_forced")
    s = Session(opts)
    s.handshake(name)
    pid = find_connection_pid(opts, s.sock.getsockname()[1], name)
    rabbitmqctl(opts, "close_connection", pid, "capture test")
    close = s.expect(0, CONNECTION_CLOSE)
    code, text = close.short(), close.shortstr()
    if code != 320:
        raise CaptureError(f"expected 320, got {code} {text!r}")
    s.send_method(0, CONNECTION_CLOSE_OK)
    eof = s.read_until_eof(5.0)
    return Capture(s.finish(), [f"connection.close {code} {text!r}; socket closed: {eof}"])


def confirm_burst(opts: Options, burst: int) -> tuple[Capture, int]:
    """One attempt: returns the capture and how many acks had multiple=1."""
    queue = "capture.confirm_multiple"
    s = Session(opts)
    s.handshake(conn_name("confirm_multiple"))
    s.open_channel(1)
    s.confirm_select(1)
    s.declare_queue(1, queue, exclusive=True, auto_delete=True)
    s.expect(1, QUEUE_DECLARE_OK)
    for index in range(burst):
        body = f"message {index + 1}".encode()
        s.publish(1, "", queue, body, PLAIN_TEXT, drain=False)
    confirmed = 0
    acks: list[tuple[int, bool]] = []
    while confirmed < burst:
        frame = s.next_method()
        if frame.method == BASIC_NACK:
            raise CaptureError(f"broker nacked: {frame.args().longlong()}")
        if frame.method != BASIC_ACK or frame.channel != 1:
            raise CaptureError(f"expected basic.ack, got {frame.describe()}")
        tag, multiple = parse_delivery_tag_and_multiple(frame.args())
        if tag <= confirmed:
            raise CaptureError(f"ack for {tag} after {confirmed} were already confirmed")
        if not multiple and tag != confirmed + 1:
            raise CaptureError(f"single ack for {tag} skips {confirmed + 1}..{tag - 1}")
        acks.append((tag, multiple))
        confirmed = tag
    s.delete_queue(1, queue)
    s.expect(1, QUEUE_DELETE_OK)
    s.close_channel(1)
    s.close_connection()
    multiples = sum(1 for _tag, multiple in acks if multiple)
    pattern = ", ".join(f"{tag}{'*' if multiple else ''}" for tag, multiple in acks)
    notes = [
        (
            f"burst of {burst} publishes confirmed by {len(acks)} basic.ack frames, "
            f"{multiples} with multiple=1 (tags, * = multiple): {pattern}"
        )
    ]
    return Capture(s.finish(), notes), multiples


def run_confirm_multiple(opts: Options) -> Capture:
    burst = 50
    for attempt in range(6):  # the first try plus up to five retries
        capture, multiples = confirm_burst(opts, burst)
        if multiples:
            if attempt:
                capture.notes.append(f"multiple=1 first seen on attempt {attempt + 1}")
            return capture
        burst *= 2
    raise CaptureError("RabbitMQ never sent a basic.ack with multiple=1")


def run_mandatory_return(opts: Options) -> Capture:
    s = Session(opts)
    s.handshake(conn_name("mandatory_return"))
    s.open_channel(1)
    s.confirm_select(1)
    s.publish(1, "amq.direct", "capture.unbound", b"nobody listens", PLAIN_TEXT, mandatory=True)
    returned = s.expect(1, BASIC_RETURN)
    code, text = returned.short(), returned.shortstr()
    s.read_content(1)
    tag, multiple = parse_delivery_tag_and_multiple(s.expect(1, BASIC_ACK))
    if (tag, multiple) != (1, False):
        raise CaptureError(f"unexpected ack {tag} multiple={multiple}")
    s.close_channel(1)
    s.close_connection()
    return Capture(s.finish(), [f"basic.return {code} {text!r}, then basic.ack 1"])


def run_consumer_cancel(opts: Options) -> Capture:
    queue = "capture.consumer_cancel"
    s = Session(opts)
    s.handshake(conn_name("consumer_cancel"))
    s.open_channel(1)
    s.declare_queue(1, queue, exclusive=True)
    s.expect(1, QUEUE_DECLARE_OK)
    s.consume(1, queue, "capture.ctag")
    s.open_channel(2)
    s.delete_queue(2, queue)
    order: list[str] = []
    while len(order) < 2:
        frame = s.next_method()
        if frame.method == BASIC_CANCEL and frame.channel == 1:
            args = frame.args()
            tag, no_wait = args.shortstr(), bool(args.octet() & 1)
            order.append(f"basic.cancel({tag!r}, no-wait={no_wait}) on ch=1")
            if not no_wait:
                s.send_method(1, BASIC_CANCEL_OK, enc_shortstr(tag))
        elif frame.method == QUEUE_DELETE_OK and frame.channel == 2:
            order.append("queue.delete-ok on ch=2")
        else:
            raise CaptureError(f"unexpected {frame.describe()}")
    s.close_channel(2)
    s.close_channel(1)
    s.close_connection()
    return Capture(s.finish(), ["server order: " + ", then ".join(order)])


def run_heartbeat(opts: Options) -> Capture:
    s = Session(opts)
    s.handshake(conn_name("heartbeat"), heartbeat=1)
    started = time.monotonic()
    next_beat = started + 0.5
    sent = 0
    while (now := time.monotonic()) < started + 2.5:
        if now >= next_beat:
            s.send(HEARTBEAT_FRAME)
            sent += 1
            next_beat += 0.5
            continue
        try:
            frame = s.read_frame(timeout=min(next_beat, started + 2.5) - now)
        except TimeoutError:
            continue
        if frame != Frame(FRAME_HEARTBEAT, 0, b""):
            raise CaptureError(f"unexpected {frame.describe()} while idle")
        s.heartbeats_received += 1
    received = s.heartbeats_received
    if received < 2:
        raise CaptureError(f"only {received} heartbeat(s) from the broker in 2.5 s")
    s.close_connection()
    return Capture(
        s.finish(), [f"idle 2.5 s: {received} server heartbeats, {sent} client heartbeats"]
    )


def run_bad_header(opts: Options) -> Capture:
    s = Session(opts)
    s.send(AMQP_0_10_HEADER)
    eof = s.read_until_eof(5.0)
    chunks = s.finish()
    answer = b"".join(data for side, data in chunks if side == "server")
    if not eof:
        raise CaptureError("broker kept the socket open after a 0-10 header")
    if answer != PROTOCOL_HEADER:
        raise CaptureError(f"broker answered {answer!r}, expected the 0-9-1 header")
    return Capture(chunks, [f"broker answered {answer!r} and closed the socket"])


def run_bad_frame(opts: Options) -> Capture:
    s = Session(opts)
    s.handshake(conn_name("bad_frame"))
    good = enc_method(1, CHANNEL_OPEN, enc_shortstr(""))
    s.send(good[:-1] + b"\x00")  # channel.open(1) whose frame-end octet is 0x00, not 0xCE
    close = s.expect(0, CONNECTION_CLOSE)
    code, text = close.short(), close.shortstr()
    failed = (close.short(), close.short())
    if code != 501:
        raise CaptureError(f"expected 501, got {code} {text!r}")
    s.send_method(0, CONNECTION_CLOSE_OK)
    eof = s.read_until_eof(5.0)
    return Capture(s.finish(), [f"connection.close {code} {text!r} {failed}; socket closed: {eof}"])


SCENARIOS: list[Scenario] = [
    Scenario(
        "handshake",
        "Protocol header, connection.start (RabbitMQ server-properties incl. capabilities), "
        "start-ok (PLAIN guest/guest, client capabilities, connection_name), tune, tune-ok "
        "(channel_max/frame_max echoed, heartbeat 60), open '/', open-ok, channel.open(1), "
        "open-ok, channel.close(200), close-ok, connection.close(200), close-ok.",
        run_handshake,
    ),
    Scenario(
        "delivery_with_headers",
        "Handshake with frame_max 4096 in tune-ok; exclusive auto-delete queue; basic.publish "
        "to the default exchange with content_type=application/json, headers {a: I 1, b: S 'x', "
        "c: t true}, delivery_mode=2, message_id, timestamp; basic.consume; basic.deliver + "
        "header + body; ack; then a 10000-octet body delivered in several body frames; ack; "
        "basic.cancel, queue.delete, clean close.",
        run_delivery_with_headers,
    ),
    Scenario(
        "basic_get",
        "basic.get on an empty queue (get-empty), then publish one message and basic.get "
        "again (get-ok + header + body); ack; queue.delete; clean close.",
        run_basic_get,
    ),
    Scenario(
        "channel_close_404",
        "Passive queue.declare of a missing queue on channel 1: RabbitMQ sends channel.close "
        "404 NOT_FOUND, client answers close-ok; channel 2 then declares and deletes a queue "
        "successfully to show the connection survives; clean close.",
        run_channel_close_404,
    ),
    Scenario(
        "connection_close_forced",
        "After the handshake the connection is closed with `rabbitmqctl close_connection <pid> "
        "'capture test'`: RabbitMQ sends connection.close 320 CONNECTION_FORCED, the client "
        "answers close-ok and the broker closes the socket.",
        run_connection_close_forced,
    ),
    Scenario(
        "confirm_multiple",
        "confirm.select, exclusive queue, a burst of publishes to the default exchange sent "
        "without waiting (one client chunk per publish), then the broker's basic.ack frames "
        "until all are confirmed; at least one ack has multiple=1. queue.delete, clean close.",
        run_confirm_multiple,
    ),
    Scenario(
        "mandatory_return",
        "Confirm channel; mandatory basic.publish to amq.direct with an unbound routing key: "
        "basic.return 312 NO_ROUTE + header + body, then basic.ack; clean close.",
        run_mandatory_return,
    ),
    Scenario(
        "consumer_cancel",
        "Client advertises consumer_cancel_notify; basic.consume on channel 1, the queue is "
        "deleted from channel 2: RabbitMQ sends basic.cancel on channel 1 and queue.delete-ok "
        "on channel 2; clean close.",
        run_consumer_cancel,
    ),
    Scenario(
        "heartbeat",
        "tune-ok with heartbeat 1, then about 2.5 s idle: the broker's heartbeat frames "
        "(08 0000 00000000 ce) interleaved with the client's own every 0.5 s; clean close.",
        run_heartbeat,
    ),
    Scenario(
        "bad_header",
        "Client sends the AMQP 0-10 protocol header AMQP\\x01\\x01\\x00\\x0a; RabbitMQ answers "
        "with the header it supports and closes the socket.",
        run_bad_header,
        client_stream_valid=False,
        server_stream_is_frames=False,
    ),
    Scenario(
        "bad_frame",
        "After the handshake the client sends channel.open(1) with frame-end octet 0x00 "
        "instead of 0xCE: RabbitMQ sends connection.close 501 FRAME_ERROR, the client answers "
        "close-ok and the broker closes the socket.",
        run_bad_frame,
        client_stream_valid=False,
    ),
]


# --------------------------------------------------------------------------
# Driver.
# --------------------------------------------------------------------------


def probe_broker(opts: Options) -> str:
    """'RabbitMQ 3.10.8', from the server-properties of a throw-away connection."""
    s = Session(opts)
    tuned = s.handshake("capture.probe")
    s.close_connection()
    s.finish()
    product = tuned.server_properties.get("product")
    version = tuned.server_properties.get("version")
    if not isinstance(product, str) or not isinstance(version, str):
        raise CaptureError(f"server-properties lack product/version: {tuned.server_properties}")
    return f"{product} {version}"


def stream(chunks: Sequence[Chunk], side: str) -> bytes:
    return b"".join(data for who, data in chunks if who == side)


def validate(scenario: Scenario, chunks: Sequence[Chunk]) -> list[Frame]:
    """Re-parse both recorded streams; returns the server's frames."""
    client = stream(chunks, "client")
    server = stream(chunks, "server")
    if scenario.client_stream_valid:
        if not client.startswith(PROTOCOL_HEADER):
            raise CaptureError("client stream does not start with the protocol header")
        split_frames(client[len(PROTOCOL_HEADER) :])
    if not scenario.server_stream_is_frames:
        return []
    return split_frames(server)


def write_fixture(
    out: Path, scenario: Scenario, capture: Capture, broker: str, recorded: str
) -> Path:
    description = scenario.description
    if capture.notes:
        description += " Observed: " + "; ".join(capture.notes) + "."
    document = {
        "scenario": scenario.name,
        "description": description,
        "broker": broker,
        "recorded": recorded,
        "chunks": [{"from": side, "hex": data.hex()} for side, data in capture.chunks],
    }
    path = out / f"{scenario.name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--url-host", "--host", dest="host", default="127.0.0.1", help="broker host"
    )
    parser.add_argument("--port", type=int, default=5672, help="broker AMQP port")
    parser.add_argument("--user", default="guest", help="PLAIN user name")
    parser.add_argument("--password", default="guest", help="PLAIN password")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("tests/fixtures/rabbitmq"),
        help="directory for NAME.json (default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=[scenario.name for scenario in SCENARIOS],
        metavar="NAME",
        help="record only this scenario (repeatable); one of: "
        + ", ".join(scenario.name for scenario in SCENARIOS),
    )
    parser.add_argument("--rabbitmqctl", default="rabbitmqctl", help="for connection_close_forced")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="per read, seconds")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    opts = Options(
        host=str(args.host),
        port=int(args.port),
        user=str(args.user),
        password=str(args.password),
        rabbitmqctl=str(args.rabbitmqctl),
        timeout=float(args.timeout),
    )
    out = Path(args.out)
    only: list[str] | None = args.only
    selected = [s for s in SCENARIOS if only is None or s.name in only]

    try:
        broker = probe_broker(opts)
    except (OSError, CaptureError) as exc:
        print(f"cannot reach the broker at {opts.host}:{opts.port}: {exc}", file=sys.stderr)
        return 2
    recorded = datetime.date.today().isoformat()
    out.mkdir(parents=True, exist_ok=True)
    print(f"broker: {broker}")

    failures = 0
    for scenario in selected:
        try:
            capture = scenario.run(opts)
            server_frames = validate(scenario, capture.chunks)
        except (OSError, CaptureError) as exc:
            failures += 1
            print(f"FAILED {scenario.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        path = write_fixture(out, scenario, capture, broker, recorded)
        client_len = len(stream(capture.chunks, "client"))
        server_len = len(stream(capture.chunks, "server"))
        print(
            f"{path}: {len(capture.chunks)} chunks, "
            f"{client_len} client / {server_len} server octets"
        )
        for note in capture.notes:
            print(f"    {note}")
        if server_frames:
            summary = ", ".join(frame.describe() for frame in server_frames)
            print(f"    server: {summary}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
