"""The broker's server side on the wire: publisher confirms coalesced as RabbitMQ does (against
both brokers), the consumer timeout, the TLS listener, shutdown (leaving ``running()``,
SIGTERM) with 320 CONNECTION_FORCED, and closing: reading after close-ok until the client
closes (against both brokers), and 541 INTERNAL_ERROR for the broker's own failures."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
import time
from contextlib import ExitStack, suppress
from typing import TYPE_CHECKING, Final

import pika
import pika.exceptions
import pytest
import trio

import amqp_blocking
import amqp_broker
import amqp_trio
from amqp_broker import BrokerOptions
from amqp_broker._channel import ModelChannel
from amqp_sansio import (
    NEED_DATA,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionConfig,
    ConnectionOpened,
    MethodReceived,
    PublishConfirmed,
    QueueDeclare,
    Role,
)
from amqp_sansio import Connection as Core
from amqp_sansio.client import (
    ConnectionForced,
    ConnectionParameters,
    InternalError,
    PreconditionFailed,
)
from amqp_sansio.framing import MethodFrame
from amqp_sansio.testing import method_frame, parse_frames
from tests.support.scenarios import RawAMQP

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from amqp_sansio import Event

LIMIT: Final = 30
SHUTDOWN: Final = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"


class Raw:
    """A client core on a blocking socket."""

    def __init__(self, url: str) -> None:
        params = ConnectionParameters.from_url(url)
        self.sock = socket.create_connection((params.host, params.port), timeout=LIMIT)
        self.core = Core(Role.CLIENT, ConnectionConfig(username="guest", password="guest"))
        self.flush()

    def flush(self) -> None:
        if data := self.core.data_to_send():
            self.sock.sendall(data)

    def next_event(self) -> Event:
        while True:
            event = self.core.next_event()
            self.flush()
            if event is not NEED_DATA:
                return event
            self.core.receive_data(self.sock.recv(65536))

    def until(self, kind: type[Event]) -> Event:
        while not isinstance(event := self.next_event(), kind):
            pass
        return event


# --- publisher confirms -----------------------------------------------------------------------


def test_confirms_are_coalesced_as_rabbitmq_does(amqp_url: str) -> None:
    """1,000 publishes written at once are confirmed in far fewer basic.ack frames, most with
    multiple, each publish exactly once."""
    client = Raw(amqp_url)
    client.until(ConnectionOpened)
    channel = client.core.open_channel()
    client.core.send_method(channel, QueueDeclare(queue="", exclusive=True))
    client.core.send_method(channel, ConfirmSelect())
    client.flush()
    declared = client.until(MethodReceived)
    assert isinstance(declared, MethodReceived)
    queue = declared.method.queue  # type: ignore[attr-defined]
    client.until(MethodReceived)  # confirm.select-ok
    count = 1000
    for _ in range(count):
        client.core.publish(channel, BasicPublish(routing_key=queue), BasicProperties(), b"m")
    client.flush()
    frames: list[tuple[int, ...]] = []
    while sum(map(len, frames)) < count:
        confirmed = client.until(PublishConfirmed)
        assert isinstance(confirmed, PublishConfirmed)
        frames.append(confirmed.publish_numbers)
    numbers = [n for frame in frames for n in frame]
    assert sorted(numbers) == list(range(1, count + 1))
    assert len(frames) < count // 2
    assert any(len(frame) > 1 for frame in frames)
    client.sock.close()


# --- consumer timeout -------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_consumer_that_never_acks_is_closed_with_406() -> None:
    options = BrokerOptions(consumer_timeout=0.3)
    with trio.fail_after(LIMIT):
        async with (
            amqp_broker.running(options=options) as url,
            amqp_trio.connect(url) as conn,
            conn.channel() as ch,
        ):
            queue = (await ch.queue_declare("", exclusive=True)).queue
            await ch.basic_publish(b"never acked", routing_key=queue)
            await ch.basic_qos(1)
            with pytest.raises(PreconditionFailed) as failed:
                await _consume_without_acking(ch, queue)
            assert failed.value.reply_text == (
                "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. "
                "Timeout value used: 300 ms. This timeout value can be configured, see "
                "consumers doc guide to learn more"
            )
            assert (failed.value.class_id, failed.value.method_id) == (0, 0)
            async with conn.channel() as again:
                message = await again.basic_get(queue, no_ack=True)
                assert message is not None
                assert message.redelivered  # requeued when the channel closed


async def _consume_without_acking(ch: amqp_trio.Channel, queue: str) -> None:
    async with ch.basic_consume(queue) as consumer:
        async for _message in consumer:  # the first one, never acked; then the close
            pass


# --- TLS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_tls_listener(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    body = b"x" * 300_000  # several TLS records and frames each way
    with amqp_broker.run_in_thread(ssl_context=context, host="localhost") as url:
        assert url.startswith("amqps://guest:guest@localhost:")
        with amqp_blocking.connect(f"{url}?cacertfile={cert}") as conn, conn.channel() as ch:
            queue = ch.queue_declare("", exclusive=True).queue
            ch.confirm_select()
            ch.basic_publish(body, routing_key=queue)
            message = ch.basic_get(queue, no_ack=True)
            assert message is not None
            assert message.body == body


def test_a_client_that_never_starts_tls_is_dropped(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    options = BrokerOptions(handshake_timeout=0.3)
    with amqp_broker.run_in_thread(ssl_context=context, options=options) as url:
        params = ConnectionParameters.from_url(url)
        with (
            socket.create_connection((params.host, params.port), timeout=LIMIT) as sock,
            suppress(ConnectionResetError),
        ):
            assert sock.recv(1) == b""  # closed without a word


# --- shutdown ---------------------------------------------------------------------------------


def test_leaving_running_closes_every_client_with_320() -> None:
    with ExitStack() as stack:
        with amqp_broker.run_in_thread() as url:
            conn = stack.enter_context(amqp_blocking.connect(url))
            ch = stack.enter_context(conn.channel())
        with pytest.raises(ConnectionForced) as forced:
            ch.queue_declare("after")
        assert forced.value.reply_text == SHUTDOWN


@pytest.fixture
def broker_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "amqp_broker", "--port", "0", "--close-timeout", "0.5"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith("amqp_broker listening on 127.0.0.1:"), line
        yield process, f"amqp://guest:guest@127.0.0.1:{int(line.rsplit(':', 1)[1])}/"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=LIMIT)
        assert process.stderr is not None
        process.stderr.close()


def test_sigterm_sends_320_and_waits_a_bounded_time_for_close_ok(
    broker_process: tuple[subprocess.Popen[str], str],
) -> None:
    process, url = broker_process
    polite = pika.BlockingConnection(pika.URLParameters(url))
    silent = Raw(url)  # reads the close but never answers it
    silent.until(ConnectionOpened)
    silent_sock = silent.sock
    process.send_signal(signal.SIGTERM)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        polite.process_data_events(time_limit=LIMIT)
    assert (closed.value.reply_code, closed.value.reply_text) == (320, SHUTDOWN)
    data = b""
    started = time.monotonic()
    while time.monotonic() - started < LIMIT:
        try:
            chunk = silent_sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    [frame] = parse_frames(data)
    assert isinstance(frame, MethodFrame)
    assert frame.method == ConnectionClose(
        reply_code=320, reply_text=SHUTDOWN, class_id=0, method_id=0
    )
    assert process.wait(timeout=LIMIT) == 0  # gave up on the silent one after close_timeout
    silent_sock.close()


# --- closing ----------------------------------------------------------------------------------


def test_after_close_ok_the_client_input_is_read_until_it_closes(amqp_url: str) -> None:
    """After close-ok the broker reads and discards what the client still writes (amqplib
    writes the publishes it queued before its connection.close) until the client closes its
    end, as RabbitMQ does: closing at once would reset the socket under the close-ok. 64 MB are
    more than the socket buffers hold, so they go through only while the broker reads."""
    raw = RawAMQP(amqp_url)
    try:
        raw.send(0, ConnectionClose(reply_code=200, reply_text="", class_id=0, method_id=0))
        publish = method_frame(1, BasicPublish(routing_key="nowhere"))
        raw.sock.sendall(publish * 100)  # written after our close
        raw.expect(ConnectionCloseOk)
        raw.sock.sendall(publish * (64_000_000 // len(publish)))
        raw.sock.shutdown(socket.SHUT_WR)
        try:
            ended = raw.sock.recv(65536) == b""
        except ConnectionResetError:  # RabbitMQ resets when it finds input left unread
            ended = True
        assert ended
    finally:
        raw.close()


def test_a_client_that_never_closes_after_close_ok_is_dropped() -> None:
    with amqp_broker.run_in_thread(options=BrokerOptions(close_timeout=0.2)) as url:
        raw = RawAMQP(url)
        try:
            raw.send(0, ConnectionClose(reply_code=200, reply_text="", class_id=0, method_id=0))
            raw.expect(ConnectionCloseOk)
            assert raw.sock.recv(65536) == b""  # after close_timeout, not our end
        finally:
            raw.close()


def test_an_internal_error_closes_the_connection_with_541(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the broker while it handles a method ends that connection with
    connection.close 541 INTERNAL_ERROR and a log line, never a dropped socket; the broker
    serves every other connection on."""

    def fail(self: object) -> None:
        raise RuntimeError("a bug in basic.recover")

    monkeypatch.setattr(ModelChannel, "recover", fail)
    with amqp_broker.run_in_thread() as url, amqp_blocking.connect(url) as other:
        with amqp_blocking.connect(url) as conn, conn.channel() as ch:
            with pytest.raises(InternalError) as info:
                ch.basic_recover()
            assert info.value.reply_code == 541
            assert info.value.reply_text == (
                "INTERNAL_ERROR - the broker failed handling basic.recover"
            )
        with other.channel() as ch:
            assert ch.queue_declare("", exclusive=True).queue.startswith("amq.gen-")
    assert "internal error serving client" in caplog.text
    assert "a bug in basic.recover" in caplog.text
