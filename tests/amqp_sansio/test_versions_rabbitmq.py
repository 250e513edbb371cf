"""Our client core in 0-8 and in 0-9 mode against RabbitMQ 3.10 and the embedded broker, through a
minimal socket loop.

RabbitMQ serves ``AMQP 1 1 8 0`` with its 0-8 tables (connection.close at (10, 60), an empty
channel.open-ok, basic.recover at 110) and ``AMQP 1 1 0 9`` as 0-9-1, whose tables agree with
0-9's on everything used here. Each test declares what it uses and deletes it again.
"""

from __future__ import annotations

import datetime
import socket
import uuid
from typing import TYPE_CHECKING, TypeVar

import pytest

from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_9,
    NEED_DATA,
    ChannelClosed,
    ChannelOpened,
    Connection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    Event,
    FieldTable,
    MessageReceived,
    MethodReceived,
    ProtocolHeader,
    ProtocolHeaderRefused,
    ProtocolSpec,
    ProtocolVersion,
    Role,
    header_for,
    next_protocol,
)
from amqp_sansio._generated import spec_0_9_1
from amqp_sansio.client import ConnectionParameters
from amqp_sansio.testing import feed, parse_frames

if TYPE_CHECKING:
    from amqp_sansio import Method

_E = TypeVar("_E")

VERSIONS = pytest.mark.parametrize("spec", [AMQP_0_8, AMQP_0_9], ids=["0-8", "0-9"])


class Peer:
    """A client core on a blocking socket: flush what it wrote, read until an event comes."""

    def __init__(self, url: str, spec: ProtocolSpec) -> None:
        params = ConnectionParameters.from_url(url)
        self.sock = socket.create_connection((params.host, params.port), timeout=10)
        config = ConnectionConfig(
            protocol=spec,
            username=params.username,
            password=params.password,
            virtual_host=params.virtual_host,
            heartbeat=0,
            connection_name=f"amqp-sansio versions test {spec.version.value}",
        )
        self.conn = Connection(Role.CLIENT, config)
        self.spec = spec
        self.written = bytearray()  # everything we sent, to check the ids on the wire
        self.events: list[Event] = []

    def flush(self) -> None:
        data = self.conn.data_to_send()
        self.written += data
        self.sock.sendall(data)

    def next(self) -> Event:
        while True:
            if self.events:
                return self.events.pop(0)
            event = self.conn.next_event()
            if event is not NEED_DATA:
                return event
            self.flush()
            self.conn.receive_data(self.sock.recv(65536))

    def wait_for(self, kind: type[_E]) -> _E:
        while True:
            event = self.next()
            self.flush()
            if isinstance(event, kind):
                return event
            assert not isinstance(event, ConnectionClosed | ChannelClosed), event

    def call(self, channel: int, meaning: str, **fields: object) -> MethodReceived:
        """Send a request of this version and return the broker's reply."""
        method = self.spec.make(meaning, **fields)
        self.conn.send_method(channel, method)
        self.flush()
        reply = self.wait_for(MethodReceived)
        assert reply.request is method, reply
        return reply

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def name() -> str:
    return f"amqp-sansio.versions.{uuid.uuid4().hex[:8]}"


@VERSIONS
def test_a_session(amqp_url: str, spec: ProtocolSpec, name: str) -> None:
    peer = Peer(amqp_url, spec)
    try:
        _session(peer, spec, name)
    finally:
        peer.close()


def _session(peer: Peer, spec: ProtocolSpec, name: str) -> None:
    conn = peer.conn
    peer.flush()
    opened = peer.wait_for(ConnectionOpened)
    assert opened.server_properties["product"] in ("RabbitMQ", "amqp-sansio")
    channel = conn.open_channel()
    peer.flush()
    peer.wait_for(ChannelOpened)

    # declare, bind (tables narrowed to the version's types: the ints go as I)
    exchange, queue = f"{name}.x", f"{name}.q"
    peer.call(channel, "exchange.declare", exchange=exchange, type="direct", auto_delete=False)
    declared = peer.call(
        channel,
        "queue.declare",
        queue=queue,
        arguments={"x-max-length": 100, "x-queue-mode": "default"},
    )
    assert declared.method.NAME == "queue.declare-ok"
    peer.call(channel, "queue.bind", queue=queue, exchange=exchange, routing_key="k")
    peer.call(channel, "basic.qos", prefetch_count=10)

    # publish with properties and headers, get it back, ack it
    when = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    headers: FieldTable = {"n": 7, "s": "text", "nested": {"deep": 1}, "when": when}
    props = spec_0_9_1.BasicProperties(
        content_type="text/plain", delivery_mode=2, priority=3, message_id="m1", headers=headers
    )
    publish = spec.make("basic.publish", exchange=exchange, routing_key="k")
    conn.publish(channel, publish, props, b"first")
    get = spec.make("basic.get", queue=queue)
    conn.send_method(channel, get)
    peer.flush()
    got = peer.wait_for(MessageReceived)
    assert got.request is get
    assert got.method.NAME == "basic.get-ok"
    assert bytes(got.body) == b"first"
    assert got.properties.headers == headers  # type: ignore[attr-defined]
    assert (got.properties.content_type, got.properties.message_id) == ("text/plain", "m1")  # type: ignore[attr-defined]
    tag: int = got.method.delivery_tag  # type: ignore[attr-defined]
    conn.send_method(channel, spec.make("basic.ack", delivery_tag=tag))

    # consume (the version's basic.consume: no arguments in 0-8, a filter in 0-9), reject
    consume: dict[str, object] = {"queue": queue, "consumer_tag": "ctag"}
    if spec is AMQP_0_9:
        consume["filter"] = {}
    ok = peer.call(channel, "basic.consume", **consume)
    assert ok.method.NAME == "basic.consume-ok"
    conn.publish(channel, publish, spec_0_9_1.BasicProperties(), b"second")
    peer.flush()
    delivered = peer.wait_for(MessageReceived)
    assert delivered.method.NAME == "basic.deliver"
    assert bytes(delivered.body) == b"second"
    tag = delivered.method.delivery_tag  # type: ignore[attr-defined]
    conn.send_method(channel, spec.make("basic.reject", delivery_tag=tag, requeue=False))
    peer.call(channel, "basic.cancel", consumer_tag="ctag")
    if spec is AMQP_0_8:
        # RabbitMQ's 0-8 has the synchronous basic.recover at (60, 110)
        peer.call(channel, "basic.recover", requeue=True)

    # a channel error: a passive declare of a queue that does not exist
    missing = spec.make("queue.declare", queue=f"{name}.missing", passive=True)
    conn.send_method(channel, missing)
    peer.flush()
    closed = peer.next()
    while not isinstance(closed, ChannelClosed):
        closed = peer.next()
    peer.flush()
    assert (closed.reply_code, closed.by_peer) == (404, True)
    assert (closed.class_id, closed.method_id) == (50, 10)

    # clean up on a fresh channel, then close the connection
    channel = conn.open_channel()
    peer.flush()
    peer.wait_for(ChannelOpened)
    peer.call(channel, "queue.delete", queue=queue)
    peer.call(channel, "exchange.delete", exchange=exchange)
    conn.close(200, "done")
    peer.flush()
    closed_conn = peer.wait_for(ConnectionClosed)
    assert (closed_conn.reply_code, closed_conn.by_peer) == (200, False)
    methods = [
        f.method for f in parse_frames(bytes(peer.written), protocol=spec) if hasattr(f, "method")
    ]
    close: Method = methods[-1]
    assert close.NAME == "connection.close"
    assert spec.ids(type(close)) == ((10, 60) if spec is AMQP_0_8 else (10, 50))


@pytest.mark.parametrize(
    "header",
    [header_for("0-10"), header_for("1.0"), b"HTTP/1.1"],
    ids=["0-10", "1.0", "http"],
)
def test_rabbitmq_answers_other_headers_with_0_9_1(rabbitmq_url: str, header: bytes) -> None:
    """RabbitMQ writes AMQP 0 0 9 1 and resets the connection: read before the reset. Fed to a
    client core that asked for something else, that is "the server speaks 0-9-1"."""
    params = ConnectionParameters.from_url(rabbitmq_url)
    with socket.create_connection((params.host, params.port), timeout=10) as sock:
        sock.sendall(header)
        answer = b""
        try:
            while len(answer) < 8 and (chunk := sock.recv(8 - len(answer))):
                answer += chunk
        except ConnectionResetError:
            pass
    assert answer == header_for("0-9-1")
    client = Connection(Role.CLIENT, ConnectionConfig(protocol="0-8"))
    client.data_to_send()
    with pytest.raises(ProtocolHeaderRefused) as info:
        feed(client, answer)
    assert info.value.offered == ProtocolHeader(answer)
    assert next_protocol(["0-8"], info.value.offered) is ProtocolVersion.AMQP_0_9_1
