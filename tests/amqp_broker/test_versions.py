"""The broker serves 0-8, 0-9 and 0-9-1 on one port, choosing by the client's protocol header
(the spec's protocol header section); any other header gets the preferred version's header and
a close. Over real sockets: what the broker writes back tells which version it serves.

The sessions themselves (declare, publish, consume, ...) in 0-8 and 0-9 run through the core in
``tests/amqp_sansio/test_versions_rabbitmq.py`` and through each adapter in
``tests/project/test_adapter_versions.py``, against RabbitMQ and this broker alike.
"""

from __future__ import annotations

import socket
import struct
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
import amqp_broker
from amqp_broker import BrokerOptions
from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_8_QPID,
    AMQP_0_9,
    AMQP_0_9_1,
    BasicGet,
    BasicProperties,
    BasicPublish,
    BasicRecover,
    BasicRecoverAsync,
    BasicRecoverOk,
    ConnectionConfig,
    ConnectionOpened,
    ConnectionStart,
    MessageReceived,
    MethodReceived,
    ProtocolSpec,
    ProtocolVersion,
    QueueDeclare,
    header_for,
)
from amqp_sansio.client import ConnectionForced, ConnectionParameters
from amqp_sansio.testing import parse_frames

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amqp_sansio import Event, FieldTable, Method
    from amqp_sansio.testing import ConnectionPair

HEADER_1109 = b"AMQP\x01\x01\x00\x09"  # 0-9's header; aioamqp and qpid-python both send it
HEADER_1191 = b"AMQP\x01\x01\x09\x01"  # the June 2006 0-8 PDF's (py-amqplib)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with amqp_broker.run_in_thread() as broker_url:
        yield broker_url


def _answer(url: str, header: bytes, *, eof: bool = False) -> bytes:
    """Everything the broker writes after *header* (and our EOF), until its EOF or a whole
    first frame."""
    params = ConnectionParameters.from_url(url)
    with socket.create_connection((params.host, params.port), timeout=10) as sock:
        sock.sendall(header)
        if eof:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
            if len(data) >= 7 and len(data) >= 8 + struct.unpack(">I", data[3:7])[0]:
                break  # a whole frame: connection.start
    return data


def _start(data: bytes, spec: ProtocolSpec) -> ConnectionStart:
    (frame,) = parse_frames(data, protocol=spec)
    method = frame.method  # type: ignore[union-attr]
    assert isinstance(method, ConnectionStart)
    return method


@pytest.mark.parametrize(
    ("header", "spec"),
    [
        (header_for("0-9-1"), AMQP_0_9_1),
        (HEADER_1109, AMQP_0_9_1),  # RabbitMQ's reading, by default
        (header_for("0-8"), AMQP_0_8),
        (HEADER_1191, AMQP_0_8),
    ],
    ids=["0-9-1", "1109-as-0-9-1", "0-8", "1191-as-0-8"],
)
def test_each_header_is_served_as_its_version(url: str, header: bytes, spec: ProtocolSpec) -> None:
    start = _start(_answer(url, header), spec)
    assert (start.version_major, start.version_minor) == spec.start_version
    capabilities = start.server_properties["capabilities"]
    # 0-9-1 announces RabbitMQ's capabilities; 0-8 and 0-9 leave the table empty
    assert bool(capabilities) is (spec is AMQP_0_9_1)


@pytest.mark.parametrize(
    "header",
    [header_for("1.0"), b"HTTP/1.1", b"AMQP\x01\x01\x00\x0b", b"\0" * 8],
    ids=["1.0", "http", "amqp-1-1-0-11", "zeros"],
)
def test_other_headers_get_the_preferred_header_and_a_close(url: str, header: bytes) -> None:
    assert _answer(url, header) == header_for("0-9-1")  # then EOF


def test_the_0_10_header_is_served_by_the_0_10_server(url: str) -> None:
    # the 0-10 server answers with the 0-10 header, then connection.start: one whole control
    # frame (0-10's 12-octet frame header gives the frame's size at octet 2)
    params = ConnectionParameters.from_url(url)
    with socket.create_connection((params.host, params.port), timeout=10) as sock:
        sock.sendall(header_for("0-10"))
        data = b""
        while len(data) < 12 or len(data) < 8 + struct.unpack(">H", data[10:12])[0]:
            chunk = sock.recv(4096)
            assert chunk, data
            data += chunk
    assert data.startswith(header_for("0-10"))
    assert data[8:10] == b"\x0f\x00"  # first and last frame of a control segment
    assert data[20:22] == b"\x01\x01"  # connection.start


def test_a_short_header_then_eof_gets_nothing(url: str) -> None:
    assert _answer(url, b"AMQP", eof=True) == b""


def test_the_0_9_reading_serves_1109_as_0_9() -> None:
    options = BrokerOptions(header_0_9="0-9")
    with amqp_broker.run_in_thread(options=options) as url:
        start = _start(_answer(url, HEADER_1109), AMQP_0_9)
        assert (start.version_major, start.version_minor) == (0, 9)
        assert start.server_properties["capabilities"] == {}
        # 0-9-1 clients keep their own header
        assert _start(_answer(url, header_for("0-9-1")), AMQP_0_9_1).server_properties[
            "capabilities"
        ]


def test_the_accepted_set_is_configured() -> None:
    options = BrokerOptions(protocols=("0-8", "0-9"))
    with amqp_broker.run_in_thread(options=options) as url:
        # not served: the preferred one's header (0-8's) and a close
        assert _answer(url, header_for("0-9-1")) == header_for("0-8")
        # a server of 0-9 alone serves 1109 as 0-9, whatever header_0_9 says
        assert _start(_answer(url, HEADER_1109), AMQP_0_9).server_properties["capabilities"] == {}
        assert _start(_answer(url, header_for("0-8")), AMQP_0_8).version_major == 8


@pytest.mark.parametrize(
    ("header", "spec"), [(header_for("0-9-1"), AMQP_0_9_1), (header_for("0-8"), AMQP_0_8)]
)
def test_the_server_properties_name_rabbitmq_3_10_8(
    amqp_url: str, header: bytes, spec: ProtocolSpec
) -> None:
    """Clients read connection.start's product and version (amqplib's tests expect RabbitMQ's
    product, aioamqp parses the version): by default the broker says what RabbitMQ 3.10.8
    says there, in every version."""
    properties = _start(_answer(amqp_url, header), spec).server_properties
    assert (properties["product"], properties["version"]) == ("RabbitMQ", "3.10.8")


def test_the_server_properties_are_configured() -> None:
    with amqp_broker.run_in_thread() as url:
        properties = _start(_answer(url, header_for("0-9-1")), AMQP_0_9_1).server_properties
    information = properties["information"]
    assert isinstance(information, str)
    assert information.startswith("amqp_broker ")  # who it really is
    assert information.endswith(", behaving as RabbitMQ 3.10.8")
    assert str(properties["platform"]).startswith("Python ")
    options = BrokerOptions(server_product="Rabbit", server_version="3.13.7")
    with amqp_broker.run_in_thread(options=options) as url:
        for header, spec in ((header_for("0-9-1"), AMQP_0_9_1), (HEADER_1191, AMQP_0_8)):
            properties = _start(_answer(url, header), spec).server_properties
            assert (properties["product"], properties["version"]) == ("Rabbit", "3.13.7")
            assert bool(properties["capabilities"]) is (spec is AMQP_0_9_1)
    # the in-memory broker says the same
    pair = amqp_broker.memory_pair(server=amqp_broker.memory_server(options=options))
    [opened], _ = pair.handshake()
    assert isinstance(opened, ConnectionOpened)
    assert opened.server_properties["product"] == "Rabbit"
    with pytest.raises(ValueError, match="server_version must be a non-empty string"):
        BrokerOptions(server_version="")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"protocols": ("1.0",)}, "the broker serves '0-9-1', '0-9', '0-8', '0-10', not '1.0'"),
        ({"protocols": ("1.0", "0-9-1")}, "not '1.0'"),
        ({"protocols": ()}, "at least one version"),
        ({"protocols": ("0-8", "0-8")}, "twice"),
        ({"protocols": ("0-7",)}, "unknown protocol version '0-7'"),
        ({"header_0_9": "0-8"}, "header_0_9 is '0-9-1' or '0-9', not '0-8'"),
    ],
)
def test_version_options_are_checked(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BrokerOptions(**options)  # type: ignore[arg-type]


def test_version_options_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from amqp_broker._cli import _options, parse_args

    options = _options(
        parse_args(["--protocols", "0-9,0-8", "--header-0-9", "0-9", "--heartbeat", "0"])
    )
    assert options.protocols == (ProtocolVersion.AMQP_0_9, ProtocolVersion.AMQP_0_8)
    assert options.header_0_9 is ProtocolVersion.AMQP_0_9
    assert options.heartbeat == 0
    assert _options(parse_args([])).protocols == BrokerOptions().protocols
    with pytest.raises(SystemExit):
        parse_args(["--protocols", "0-9-1,1.0"])
    assert "the broker serves '0-9-1', '0-9', '0-8', '0-10', not '1.0'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--header-0-9", "0-8"])


def test_heartbeat_option_is_proposed() -> None:
    with (
        amqp_broker.run_in_thread(options=BrokerOptions(heartbeat=0)) as url,
        amqp_blocking.connect(url, protocol="0-8") as conn,
    ):
        assert (conn.protocol, conn.heartbeat) == ("0-8", 0)
    with pytest.raises(ValueError, match=r"heartbeat must be 0\.\.65535"):
        BrokerOptions(heartbeat=-1)


def test_headers_are_relayed_as_published(url: str) -> None:
    """A 0-9-1 publisher's headers reach a 0-8 consumer as they were sent, types 0-8 lacks
    included (RabbitMQ relays them too); what the broker itself sends is still narrowed."""
    headers: FieldTable = {"flag": True, "ratio": 1.5, "n": 7}
    with amqp_blocking.connect(url) as publisher, publisher.channel() as pub:
        queue = pub.queue_declare("", exclusive=False, auto_delete=True).queue
        with amqp_blocking.connect(url, protocol="0-8") as consumer, consumer.channel() as sub:
            pub.basic_publish(b"x", routing_key=queue, properties=BasicProperties(headers=headers))
            pub.queue_declare(queue, passive=True)  # a round trip: the publish was routed
            message = sub.basic_get(queue, no_ack=True)
            assert message is not None
            assert message.properties.headers == headers
            sub.queue_delete(queue)


@pytest.mark.parametrize("version", ["0-8", "0-9"])
def test_a_broker_shutdown_closes_0_8_and_0_9_clients_with_320(version: str) -> None:
    # connection.close from the server side: (10, 60) in 0-8, (10, 50) in 0-9
    with amqp_broker.run_in_thread() as url:
        conn = amqp_blocking.connect(url, protocol=version)
        assert conn.protocol == version
    # leaving the block shut the broker down, which waited for our close-ok
    try:
        assert conn.is_closed
        error = conn.close_error
        assert isinstance(error, ConnectionForced)
        assert error.reply_code == 320
        assert "broker forced connection closure with reason 'shutdown'" in error.reply_text
    finally:
        conn.close()


def _recover(pair: ConnectionPair, recover: Method) -> list[Event]:
    """Through a memory pair: get a message unacknowledged, basic.recover, get it again; the
    client's events after the recover."""
    pair.handshake()
    channel = pair.open_channel()
    pair.client.send_method(channel, QueueDeclare(queue="", exclusive=True))
    pair.transfer(pair.client)
    [declared] = pair.transfer(pair.server)
    assert isinstance(declared, MethodReceived)
    queue = declared.method.queue  # type: ignore[attr-defined]
    pair.client.publish(channel, BasicPublish(routing_key=queue), BasicProperties(), b"m")
    pair.client.send_method(channel, BasicGet(queue=queue))
    pair.transfer(pair.client)
    [got] = pair.transfer(pair.server)
    assert isinstance(got, MessageReceived)
    pair.client.send_method(channel, recover)
    pair.client.send_method(channel, BasicGet(queue=queue, no_ack=True))
    pair.transfer(pair.client)
    return pair.transfer(pair.server)


def test_qpid_python_s_0_8_client_gets_its_recover_ok() -> None:
    """qpid-python's 0-8 spec makes basic.recover (60, 100) wait for a recover-ok (60, 101)
    that RabbitMQ's 0-8 (and the 0-8 XML) lacks: RabbitMQ leaves it waiting (until a heartbeat
    frame kills qpid's 0-8 reader). The broker speaks qpid's dialect to the client whose
    start-ok names qpid-python's product, and RabbitMQ's to any other."""
    qpid = ConnectionConfig(
        protocol=AMQP_0_8_QPID, client_properties={"product": "qpid python client"}
    )
    ok, again = _recover(amqp_broker.memory_pair(qpid), BasicRecover(requeue=True))
    assert isinstance(ok, MethodReceived)
    assert isinstance(ok.method, BasicRecoverOk)
    assert isinstance(again, MessageReceived)
    assert again.method.redelivered  # type: ignore[attr-defined]
    # another 0-8 client's (60, 100) is RabbitMQ's recover-async: requeued, not answered
    plain = amqp_broker.memory_pair(ConnectionConfig(protocol="0-8"))
    [again] = _recover(plain, BasicRecoverAsync(requeue=True))
    assert isinstance(again, MessageReceived)
    assert again.method.redelivered  # type: ignore[attr-defined]
