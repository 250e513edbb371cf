"""A raw AMQP 0-9-1 client for the end-to-end benchmark: plain sockets and pre-encoded frames.

It is the broker's ceiling on this machine: after the handshake it writes pre-encoded publish
frames in large writes, counts publisher confirms and deliveries by reading frame headers, and
sends pre-encoded multiple acks. It also does the harness's setup (declare a queue, fill it,
read its depth, delete it). It encodes the few methods it needs with ``struct`` itself and uses
only the standard library, so the async_amqp peer can import it from its own virtualenv and the
ceiling does not depend on the codec under test.
"""

from __future__ import annotations

import socket
import struct
import time
from urllib.parse import unquote, urlsplit

__all__ = ["RawClient", "RawProtocolError"]

_FRAME_HEADER = struct.Struct(">BHI")
_CLASS_METHOD = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_FRAME_END = b"\xce"
_METHOD, _HEADER, _BODY, _HEARTBEAT = 1, 2, 3, 8
_FRAME_MAX = 131072
_CONSUMER_TAG = "raw-bench"


def _cm(class_id: int, method_id: int) -> int:
    return class_id << 16 | method_id


START, START_OK, TUNE, TUNE_OK = _cm(10, 10), _cm(10, 11), _cm(10, 30), _cm(10, 31)
OPEN, OPEN_OK, CLOSE, CLOSE_OK = _cm(10, 40), _cm(10, 41), _cm(10, 50), _cm(10, 51)
BLOCKED, UNBLOCKED = _cm(10, 60), _cm(10, 61)
CH_OPEN, CH_OPEN_OK, CH_CLOSE, CH_CLOSE_OK = _cm(20, 10), _cm(20, 11), _cm(20, 40), _cm(20, 41)
Q_DECLARE, Q_DECLARE_OK, Q_DELETE, Q_DELETE_OK = _cm(50, 10), _cm(50, 11), _cm(50, 40), _cm(50, 41)
QOS, QOS_OK, CONSUME, CONSUME_OK = _cm(60, 10), _cm(60, 11), _cm(60, 20), _cm(60, 21)
CANCEL, CANCEL_OK, PUBLISH, DELIVER = _cm(60, 30), _cm(60, 31), _cm(60, 40), _cm(60, 60)
ACK, NACK = _cm(60, 80), _cm(60, 120)
SELECT, SELECT_OK = _cm(85, 10), _cm(85, 11)


class RawProtocolError(Exception):
    """The broker closed the channel or connection, or sent something this client can't use."""


def _shortstr(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw)]) + raw


def _longstr(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def _client_properties(product: str) -> bytes:
    # the capability makes the broker tell us when it blocks publishers (a memory alarm)
    capabilities = _longstr(_shortstr("connection.blocked") + b"t\x01")
    return _longstr(
        _shortstr("product")
        + b"S"
        + _longstr(product.encode())
        + _shortstr("capabilities")
        + b"F"
        + capabilities
    )


def _frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + _FRAME_END


def _method(channel: int, class_method: int, args: bytes) -> bytes:
    return _frame(_METHOD, channel, _CLASS_METHOD.pack(class_method) + args)


def encode_publish(channel: int, routing_key: str, body: bytes, frame_max: int) -> bytes:
    """One ``basic.publish`` to the default exchange: method, header and body frames."""
    parts = [
        _method(channel, PUBLISH, b"\x00\x00" + _shortstr("") + _shortstr(routing_key) + b"\x00"),
        # class 60, weight 0, body size, no properties
        _frame(_HEADER, channel, struct.pack(">HHQH", 60, 0, len(body), 0)),
    ]
    chunk = frame_max - 8
    parts.extend(_frame(_BODY, channel, body[i : i + chunk]) for i in range(0, len(body), chunk))
    return b"".join(parts)


def encode_ack(channel: int, delivery_tag: int, *, multiple: bool) -> bytes:
    return _method(channel, ACK, _U64.pack(delivery_tag) + (b"\x01" if multiple else b"\x00"))


class RawClient:
    """One connection with channel 1 open; every call is synchronous."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "amqp":
            raise ValueError(f"the raw client speaks amqp:// only, not {parts.scheme!r}")
        host = parts.hostname or "127.0.0.1"
        port = parts.port or 5672
        user = unquote(parts.username or "guest")
        password = unquote(parts.password or "guest")
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self.frame_max = _FRAME_MAX
        #: The broker blocks publishers now / did so since the last :meth:`check_blocked`.
        self.blocked = self.was_blocked = False
        self._handshake(user, password, vhost)

    # -- plumbing ---------------------------------------------------------------------------

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise RawProtocolError("the broker closed the connection")
        self._buf += data

    def _next_frame(self) -> tuple[int, int, bytes]:
        while True:
            if len(self._buf) >= 7:
                frame_type, channel, size = _FRAME_HEADER.unpack_from(self._buf, 0)
                end = 7 + size
                if len(self._buf) > end:
                    if self._buf[end] != 0xCE:
                        raise RawProtocolError("bad frame end octet")
                    payload = bytes(self._buf[7:end])
                    del self._buf[: end + 1]
                    return frame_type, channel, payload
            self._fill()

    def _expect(self, class_method: int) -> bytes:
        """Read frames until the method ``class_method``; return its arguments."""
        while True:
            frame_type, channel, payload = self._next_frame()
            if frame_type == _HEARTBEAT:
                continue
            if frame_type != _METHOD:
                raise RawProtocolError(f"unexpected frame type {frame_type} on channel {channel}")
            (got,) = _CLASS_METHOD.unpack_from(payload, 0)
            if got == class_method:
                return payload[4:]
            self._unexpected(got, channel, payload)

    def _unexpected(self, got: int, channel: int, payload: bytes) -> None:
        if got in (CLOSE, CH_CLOSE):
            (code,) = struct.unpack_from(">H", payload, 4)
            text = payload[7 : 7 + payload[6]].decode(errors="replace")
            if got == CLOSE:
                self.sock.sendall(_method(0, CLOSE_OK, b""))
            else:
                self.sock.sendall(_method(channel, CH_CLOSE_OK, b""))
            raise RawProtocolError(
                f"broker closed {'connection' if got == CLOSE else 'channel'}: {code} {text}"
            )
        if got == BLOCKED:
            self.blocked = self.was_blocked = True
            return
        if got == UNBLOCKED:
            self.blocked = False
            return
        raise RawProtocolError(f"unexpected method {got >> 16}.{got & 0xFFFF} on ch {channel}")

    def _handshake(self, user: str, password: str, vhost: str) -> None:
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self._expect(START)
        props = _client_properties("amqp-sansio bench raw client")
        response = b"\x00" + user.encode() + b"\x00" + password.encode()
        self.sock.sendall(
            _method(
                0, START_OK, props + _shortstr("PLAIN") + _longstr(response) + _shortstr("en_US")
            )
        )
        tune = self._expect(TUNE)
        channel_max, server_frame_max, _heartbeat = struct.unpack_from(">HIH", tune, 0)
        if server_frame_max:
            self.frame_max = min(self.frame_max, server_frame_max)
        self.sock.sendall(
            _method(0, TUNE_OK, struct.pack(">HIH", channel_max, self.frame_max, 0))
            + _method(0, OPEN, _shortstr(vhost) + _shortstr("") + b"\x00")
        )
        self._expect(OPEN_OK)
        self.sock.sendall(_method(1, CH_OPEN, _shortstr("")))
        self._expect(CH_OPEN_OK)

    # -- setup calls --------------------------------------------------------------------------

    def queue_declare(self, queue: str, *, passive: bool = False) -> int:
        """Declare (or passively check) a classic, non-durable queue; return its message count."""
        args = b"\x00\x00" + _shortstr(queue) + (b"\x01" if passive else b"\x00") + b"\x00" * 4
        self.sock.sendall(_method(1, Q_DECLARE, args))
        ok = self._expect(Q_DECLARE_OK)
        (message_count,) = struct.unpack_from(">I", ok, 1 + ok[0])
        return int(message_count)

    def queue_declare_exclusive(self, queues: list[str], *, batch: int = 500) -> None:
        """Declare exclusive, non-durable queues (gone with this connection), pipelined:
        *batch* declares per write, then their replies."""
        for start in range(0, len(queues), batch):
            names = queues[start : start + batch]
            self.sock.sendall(
                b"".join(
                    _method(1, Q_DECLARE, b"\x00\x00" + _shortstr(name) + b"\x04" + b"\x00" * 4)
                    for name in names
                )
            )
            for _ in names:
                self._expect(Q_DECLARE_OK)

    def queue_delete(self, queue: str) -> int:
        self.sock.sendall(_method(1, Q_DELETE, b"\x00\x00" + _shortstr(queue) + b"\x00"))
        (message_count,) = struct.unpack_from(">I", self._expect(Q_DELETE_OK), 0)
        return int(message_count)

    def wait_for_depth(self, queue: str, depth: int, *, timeout: float = 30.0) -> int:
        """Poll the queue's message count until it equals ``depth`` (or the timeout passes)."""
        deadline = time.monotonic() + timeout
        while True:
            count = self.queue_declare(queue, passive=True)
            if count == depth or time.monotonic() > deadline:
                return count
            time.sleep(0.02)

    def check_blocked(self, *, wait: float = 0.0) -> bool:
        """Read what arrived on this idle connection; True when the broker blocked publishers
        (``connection.blocked``) at any time since the last call. Waits up to ``wait`` seconds
        for an ``unblocked`` if still blocked."""
        deadline = time.monotonic() + wait
        self.sock.setblocking(False)
        try:
            while True:
                self._handle_buffered_methods()
                try:
                    data = self.sock.recv(1 << 16)
                except BlockingIOError:
                    if not self.blocked or time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                    continue
                if not data:
                    raise RawProtocolError("the broker closed the connection")
                self._buf += data
        finally:
            self.sock.setblocking(True)
        seen, self.was_blocked = self.was_blocked, self.blocked
        return seen

    def _handle_buffered_methods(self) -> None:
        while len(self._buf) >= 8:
            frame_type, channel, size = _FRAME_HEADER.unpack_from(self._buf, 0)
            if len(self._buf) < size + 8:
                return
            payload = bytes(self._buf[7 : 7 + size])
            del self._buf[: size + 8]
            if frame_type == _METHOD:
                self._unexpected(_CLASS_METHOD.unpack_from(payload, 0)[0], channel, payload)

    def close(self) -> None:
        try:
            self.sock.sendall(_method(0, CLOSE, struct.pack(">H", 200) + _shortstr("") + b"\0" * 4))
            self._expect(CLOSE_OK)
        finally:
            self.sock.close()

    # -- the timed operations -------------------------------------------------------------------

    def publish(self, queue: str, count: int, body: bytes, *, batch_bytes: int = 1 << 20) -> None:
        """Publish ``count`` messages without confirms, then one round trip on the channel.

        The round trip (a passive ``queue.declare``) returns after the broker's channel has
        handled every publish before it.
        """
        one = encode_publish(1, queue, body, self.frame_max)
        per_batch = max(1, batch_bytes // len(one))
        batch = one * per_batch
        sent = 0
        while sent < count:
            todo = min(per_batch, count - sent)
            self.sock.sendall(batch if todo == per_batch else one * todo)
            sent += todo
        self.queue_declare(queue, passive=True)

    def confirm_select(self) -> None:
        self.sock.sendall(_method(1, SELECT, b"\x00"))
        self._expect(SELECT_OK)

    def publish_confirmed(self, queue: str, count: int, body: bytes, *, window: int) -> None:
        """Publish ``count`` messages in confirm mode, at most ``window`` unconfirmed at a time.

        Call :meth:`confirm_select` first (on this connection, once). Returns when every publish
        is acked; a nack raises.
        """
        one = encode_publish(1, queue, body, self.frame_max)
        per_write = max(1, min(window, (1 << 20) // len(one)))
        block = one * per_write
        sent = confirmed = 0
        singles: set[int] = set()
        buf = self._buf
        sock = self.sock
        while confirmed < count:
            room = min(per_write, count - sent, window - (sent - confirmed))
            if room > 0:
                sock.sendall(block if room == per_write else one * room)
                sent += room
                sock.setblocking(False)
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    data = None
                finally:
                    sock.setblocking(True)
                if data is None:
                    continue
            else:
                data = sock.recv(1 << 16)
            if not data:
                raise RawProtocolError("the broker closed the connection")
            buf += data
            pos = 0
            end_of_data = len(buf)
            while end_of_data - pos >= 8:
                frame_type, channel, size = _FRAME_HEADER.unpack_from(buf, pos)
                end = pos + 8 + size
                if end > end_of_data:
                    break
                if frame_type == _METHOD:
                    (got,) = _CLASS_METHOD.unpack_from(buf, pos + 7)
                    if got == ACK:
                        (tag,) = _U64.unpack_from(buf, pos + 11)
                        if buf[pos + 19]:
                            confirmed = max(confirmed, tag)
                        else:
                            singles.add(tag)
                        while confirmed + 1 in singles:
                            confirmed += 1
                            singles.discard(confirmed)
                    elif got == NACK:
                        raise RawProtocolError("the broker nacked a publish")
                    else:
                        self._unexpected(got, channel, bytes(buf[pos + 7 : end - 1]))
                pos = end
            del buf[:pos]

    def consume(
        self, queue: str, count: int, body_size: int, *, prefetch: int, ack_every: int
    ) -> None:
        """Consume ``count`` messages, acking with ``multiple`` every ``ack_every`` deliveries.

        Returns when every delivery and all of its body octets have arrived and the last ack is
        written. Delivery tags are checked to be 1, 2, ...; the consumer stays active (see
        :meth:`cancel`).
        """
        self.sock.sendall(_method(1, QOS, struct.pack(">IHB", 0, prefetch, 0)))
        self._expect(QOS_OK)
        last = count - count % ack_every
        acks = {t: encode_ack(1, t, multiple=True) for t in range(ack_every, last + 1, ack_every)}
        if count % ack_every:
            acks[count] = encode_ack(1, count, multiple=True)
        consume = b"\x00\x00" + _shortstr(queue) + _shortstr(_CONSUMER_TAG) + b"\x00" + b"\x00" * 4
        self.sock.sendall(_method(1, CONSUME, consume))
        self._expect(CONSUME_OK)
        buf = self._buf
        sock = self.sock
        delivered = body_octets = 0
        expected_octets = count * body_size
        while delivered < count or body_octets < expected_octets:
            if len(buf) < 8 or len(buf) < 8 + _FRAME_HEADER.unpack_from(buf, 0)[2]:
                data = sock.recv(1 << 20)
                if not data:
                    raise RawProtocolError("the broker closed the connection")
                buf += data
            pos = 0
            end_of_data = len(buf)
            while end_of_data - pos >= 8:
                frame_type, channel, size = _FRAME_HEADER.unpack_from(buf, pos)
                end = pos + 8 + size
                if end > end_of_data:
                    break
                if frame_type == _BODY:
                    body_octets += size
                elif frame_type == _METHOD:
                    (got,) = _CLASS_METHOD.unpack_from(buf, pos + 7)
                    if got == DELIVER:
                        delivered += 1
                        (tag,) = _U64.unpack_from(buf, pos + 12 + buf[pos + 11])
                        if tag != delivered:
                            raise RawProtocolError(f"delivery tag {tag}, expected {delivered}")
                        ack = acks.get(tag)
                        if ack is not None:
                            sock.sendall(ack)
                    else:
                        self._unexpected(got, channel, bytes(buf[pos + 7 : end - 1]))
                pos = end
            del buf[:pos]
        if delivered != count or body_octets != expected_octets:
            raise RawProtocolError(
                f"got {delivered} deliveries with {body_octets} body octets, "
                f"expected {count} with {expected_octets}"
            )

    def cancel(self) -> None:
        """Cancel the consumer; skip any deliveries still arriving before the cancel-ok."""
        self.sock.sendall(_method(1, CANCEL, _shortstr(_CONSUMER_TAG) + b"\x00"))
        while True:
            frame_type, channel, payload = self._next_frame()
            if frame_type != _METHOD:
                continue
            (got,) = _CLASS_METHOD.unpack_from(payload, 0)
            if got == CANCEL_OK:
                return
            if got != DELIVER:
                self._unexpected(got, channel, payload)
