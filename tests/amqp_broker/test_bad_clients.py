"""Misbehaving clients over real sockets: each gets the reply code RabbitMQ would send, and a
connection opened before it keeps working afterwards."""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import TYPE_CHECKING, final

import pika
import pika.exceptions
import pytest

import amqp_broker
from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_9_1,
    NEED_DATA,
    BasicAck,
    BasicGet,
    BasicProperties,
    BasicPublish,
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ConnectionOpened,
    ConnectionStartOk,
    MessageReceived,
    MethodReceived,
    QueueDeclare,
    Role,
)
from amqp_sansio import Connection as Core
from amqp_sansio.client import ConnectionParameters
from amqp_sansio.framing import MethodFrame
from amqp_sansio.testing import method_frame, parse_frames

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amqp_sansio import Event, FieldTable, ProtocolSpec
    from amqp_sansio.framing import Frame


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with amqp_broker.run_in_thread(users={"guest": "guest"}) as broker_url:
        yield broker_url


def address(url: str) -> tuple[str, int]:
    params = ConnectionParameters.from_url(url)
    return params.host, params.port


@final
class RawClient:
    """A client core on a blocking socket, so a test can also write bytes of its own."""

    def __init__(self, url: str, *, password: str = "guest") -> None:
        self.sock = socket.create_connection(address(url), timeout=10)
        self.core = Core(Role.CLIENT, ConnectionConfig(username="guest", password=password))
        self.flush()

    def flush(self) -> None:
        data = self.core.data_to_send()
        if data:
            self.sock.sendall(data)

    def next_event(self) -> Event:
        while True:
            event = self.core.next_event()
            self.flush()
            if event is not NEED_DATA:
                return event
            self.core.receive_data(self.sock.recv(65536))

    def wait_for(self, kind: type[Event]) -> Event:
        while True:
            event = self.next_event()
            if isinstance(event, kind):
                return event
            assert not isinstance(event, ConnectionLost | ConnectionClosed), event

    def open(self) -> int:
        self.wait_for(ConnectionOpened)
        channel = self.core.open_channel()
        self.flush()
        self.wait_for(ChannelOpened)
        return channel

    def closed_by_broker(self) -> ConnectionClosed:
        """Read until the broker's connection.close (answered by the core), then the end of
        the stream: EOF, or a reset when the broker closed with our bytes unread (RabbitMQ
        3.10 resets in both cases checked here as well)."""
        while True:
            event = self.next_event()
            if isinstance(event, ConnectionClosed):
                assert event.by_peer
                with contextlib.suppress(ConnectionResetError):
                    assert self.sock.recv(1) == b""
                self.close()
                return event
            assert not isinstance(event, ConnectionLost), "closed without connection.close"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def bystander(url: str) -> Iterator[RawClient]:
    """A connection opened before the misbehaving one; it must keep working after."""
    client = RawClient(url)
    client.open()
    yield client
    client.close()


def still_serves(client: RawClient) -> None:
    channel = client.core.open_channel()
    client.flush()
    client.wait_for(ChannelOpened)
    client.core.send_method(channel, QueueDeclare(queue="", exclusive=True))
    client.flush()
    declared = client.wait_for(MethodReceived)
    assert isinstance(declared, MethodReceived)
    queue = declared.method.queue  # type: ignore[attr-defined]
    client.core.publish(channel, BasicPublish(routing_key=queue), BasicProperties(), b"alive")
    client.core.send_method(channel, BasicGet(queue=queue, no_ack=True))
    client.flush()
    message = client.wait_for(MessageReceived)
    assert isinstance(message, MessageReceived)
    assert message.body == b"alive"


@pytest.mark.parametrize(
    "header",
    [b"AMQP\x00\x00\x0a\x00", b"AMQP\x00\x01\x00\x00", b"GET / HTTP/1.1\r\n\r\n"],
    ids=["0-10", "1.0", "http"],
)
def test_wrong_protocol_header_gets_ours_and_a_close(
    url: str, bystander: RawClient, header: bytes
) -> None:
    with socket.create_connection(address(url), timeout=10) as sock:
        sock.sendall(header)
        received = b""
        while chunk := sock.recv(64):
            received += chunk
    assert received == b"AMQP\x00\x00\x09\x01"  # the version we speak, then EOF
    still_serves(bystander)


def test_bad_password_is_403(url: str, bystander: RawClient) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(pika.URLParameters(url.replace("guest@", "wrong@")))
    assert "(403) 'ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN." in (
        str(info.value)
    )
    client = RawClient(url, password="wrong")
    closed = client.closed_by_broker()
    assert closed.reply_code == 403
    still_serves(bystander)


def _refused_login(url: str, spec: ProtocolSpec, capabilities: FieldTable | None) -> socket.socket:
    """A socket whose start-ok (with *capabilities*, or none) carries a wrong password."""
    sock = socket.create_connection(address(url), timeout=20)
    sock.sendall(spec.header)
    data = b""
    while len(data) < 7 or len(data) < 8 + struct.unpack(">I", data[3:7])[0]:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    properties: FieldTable = {} if capabilities is None else {"capabilities": capabilities}
    start_ok = ConnectionStartOk(
        client_properties=properties,
        mechanism="PLAIN",
        response=b"\0guest\0wrong",
        locale="en_US",
    )
    sock.sendall(method_frame(0, start_ok, protocol=spec))
    return sock


def _until_the_end(sock: socket.socket, spec: ProtocolSpec) -> list[Frame]:
    """What the server writes until it ends the stream (EOF or reset), answering a close."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:  # RabbitMQ resets the silent ones
            break
        if not chunk:
            break
        data += chunk
        if any(isinstance(f, MethodFrame) for f in parse_frames(data, protocol=spec)):
            close_ok = spec.make("connection.close-ok")
            with contextlib.suppress(OSError):
                sock.sendall(method_frame(0, close_ok, protocol=spec))
    return parse_frames(data, protocol=spec)


def test_a_refused_login_is_told_only_to_clients_that_ask(amqp_url: str) -> None:
    """RabbitMQ sends connection.close 403 after a refused login only to clients that advertise
    the authentication_failure_close capability; it closes the socket of any other (0-9-1's
    rule; aioamqp, which does not advertise it, fails on an unasked close). The same in 0-8.
    RabbitMQ waits 3 s first, so every case runs at once."""
    asks: FieldTable = {"authentication_failure_close": True}
    cases = [
        (spec, capabilities) for spec in (AMQP_0_9_1, AMQP_0_8) for capabilities in (asks, {}, None)
    ]
    with contextlib.ExitStack() as stack:
        sockets = [
            stack.enter_context(_refused_login(amqp_url, spec, capabilities))
            for spec, capabilities in cases
        ]
        answers = [
            _until_the_end(sock, spec) for sock, (spec, _) in zip(sockets, cases, strict=True)
        ]
    for frames, (spec, capabilities) in zip(answers, cases, strict=True):
        if capabilities:
            [frame] = frames
            assert isinstance(frame, MethodFrame)
            assert frame.method == spec.make(
                "connection.close",
                reply_code=403,
                reply_text="ACCESS_REFUSED - Login was refused using authentication mechanism "
                "PLAIN. For details see the broker logfile.",
                class_id=0,
                method_id=0,
            )
        else:
            assert frames == [], spec


def test_frame_over_frame_max_is_501(url: str, bystander: RawClient) -> None:
    client = RawClient(url)
    opened = client.wait_for(ConnectionOpened)
    assert isinstance(opened, ConnectionOpened)
    # a method frame well over the limit (RabbitMQ tolerates frames up to 8 octets over)
    size = opened.frame_max + 1024
    client.sock.sendall(struct.pack(">BHI", 1, 0, size) + b"\0" * size + b"\xce")
    assert client.closed_by_broker().reply_code == 501
    still_serves(bystander)


def test_method_on_unopened_channel_is_504(url: str, bystander: RawClient) -> None:
    client = RawClient(url)
    client.wait_for(ConnectionOpened)
    client.sock.sendall(method_frame(7, QueueDeclare(queue="q")))
    closed = client.closed_by_broker()
    assert (closed.reply_code, closed.class_id, closed.method_id) == (504, 50, 10)
    still_serves(bystander)


def test_publish_to_missing_exchange_is_404(url: str, bystander: RawClient) -> None:
    client = RawClient(url)
    channel = client.open()
    client.core.publish(channel, BasicPublish(exchange="no-such"), BasicProperties(), b"x")
    client.flush()
    closed = client.wait_for(ChannelClosed)
    assert isinstance(closed, ChannelClosed)
    assert (closed.reply_code, closed.reply_text) == (
        404,
        "NOT_FOUND - no exchange 'no-such' in vhost '/'",
    )
    still_serves(client)  # only the channel closed
    still_serves(bystander)
    client.close()


def test_ack_of_unknown_delivery_tag_is_406(url: str, bystander: RawClient) -> None:
    client = RawClient(url)
    channel = client.open()
    client.core.send_method(channel, BasicAck(delivery_tag=42))
    client.flush()
    closed = client.wait_for(ChannelClosed)
    assert isinstance(closed, ChannelClosed)
    assert (closed.reply_code, closed.reply_text) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 42",
    )
    still_serves(client)
    still_serves(bystander)
    client.close()


def test_client_vanishing_mid_frame_loses_nothing(url: str, bystander: RawClient) -> None:
    client = RawClient(url)
    channel = client.open()
    client.core.send_method(channel, QueueDeclare(queue="", exclusive=True))
    client.flush()
    client.wait_for(MethodReceived)
    client.sock.sendall(method_frame(channel, QueueDeclare(queue="half"))[:9])
    client.close()
    still_serves(bystander)
