"""Version negotiation: every header against the server role, the client's reading of a server
that answers with another version's header, and "auto" as a pure function over them."""

from __future__ import annotations

import pytest

from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_9,
    AMQP_0_9_1,
    AUTO_ORDER,
    NEED_DATA,
    AuthenticationRequested,
    ConnectionConfig,
    ConnectionOpened,
    ConnectionStart,
    ConnectionState,
    MethodReceived,
    ProtocolHeader,
    ProtocolHeaderRefused,
    ProtocolSpec,
    ProtocolVersion,
    RemoteProtocolError,
    VirtualHostRequested,
    choose_version,
    header_for,
    next_protocol,
    requested_version,
)
from amqp_sansio.framing import (
    PROTOCOL_HEADER_0_8,
    PROTOCOL_HEADER_0_8_PDF,
    PROTOCOL_HEADER_0_9,
    PROTOCOL_HEADER_0_9_1,
    PROTOCOL_HEADER_0_10,
    PROTOCOL_HEADER_1_0,
    PROTOCOL_HEADER_1_0_SASL,
    MethodFrame,
)
from amqp_sansio.testing import ConnectionPair, feed, method_frame, parse_frames

V = ProtocolVersion

# --- each header against the server role -----------------------------------------------------

ACCEPTED = [
    # header, header_0_9 reading, the version served, connection.start's version
    (PROTOCOL_HEADER_0_9_1, "0-9-1", AMQP_0_9_1, (0, 9)),
    (PROTOCOL_HEADER_0_9, "0-9-1", AMQP_0_9_1, (0, 9)),  # RabbitMQ's reading
    (PROTOCOL_HEADER_0_9, "0-9", AMQP_0_9, (0, 9)),  # qpid-python's
    (PROTOCOL_HEADER_0_8, "0-9-1", AMQP_0_8, (8, 0)),
    (PROTOCOL_HEADER_0_8_PDF, "0-9-1", AMQP_0_8, (8, 0)),  # py-amqplib
]


def test_the_0_9_header_is_read_as_the_version_served() -> None:
    # read as 0-9-1 by default, but a server of 0-9 and 0-8 only serves it as 0-9
    config = ConnectionConfig(protocols=["0-9", "0-8"])
    server = ConnectionPair(server_config=config).server
    feed(server, PROTOCOL_HEADER_0_9)
    assert server.protocol is AMQP_0_9
    assert choose_version(PROTOCOL_HEADER_0_9, ["0-9-1"], header_0_9="0-9") is V.AMQP_0_9_1


@pytest.mark.parametrize(("header", "reading", "spec", "start"), ACCEPTED)
def test_server_binds_to_the_version_the_header_asks_for(
    header: bytes, reading: str, spec: ProtocolSpec, start: tuple[int, int]
) -> None:
    server = ConnectionPair(server_config=ConnectionConfig(header_0_9=reading)).server
    assert server.protocol is AMQP_0_9_1  # the preferred one, until the header arrives
    assert feed(server, header, byte_at_a_time=True) == []
    assert server.protocol is spec
    assert server.state is ConnectionState.AWAIT_START_OK
    [frame] = parse_frames(server.data_to_send(), protocol=spec)
    assert isinstance(frame, MethodFrame)
    assert isinstance(frame.method, ConnectionStart)
    assert (frame.method.version_major, frame.method.version_minor) == start
    capabilities = frame.method.server_properties["capabilities"]
    # RabbitMQ's capabilities are 0-9-1 booleans; 0-8/0-9 tables have no t, as RabbitMQ's 0-8
    assert bool(capabilities) is (spec is AMQP_0_9_1)


REFUSED = [
    PROTOCOL_HEADER_0_10,
    PROTOCOL_HEADER_1_0,
    PROTOCOL_HEADER_1_0_SASL,
    b"AMQP\x02\x01\x00\x00",  # 1.0 over TLS
    b"AMQP\x01\x01\x00\x0b",  # unknown
    b"HTTP/1.1 200 OK\r\n",
    b"GET / HTTP/1.1\r\n\r\n",
]


@pytest.mark.parametrize("header", REFUSED)
@pytest.mark.parametrize("preferred", [AMQP_0_9_1, AMQP_0_8])
def test_server_answers_other_headers_with_its_preferred_one(
    header: bytes, preferred: ProtocolSpec
) -> None:
    protocols = [preferred, *(s for s in (AMQP_0_9_1, AMQP_0_9, AMQP_0_8) if s is not preferred)]
    server = ConnectionPair(server_config=ConnectionConfig(protocols=protocols)).server
    with pytest.raises(RemoteProtocolError) as info:
        feed(server, header)
    # 540 for an AMQP header we do not serve, 501 for octets that are no AMQP header
    assert info.value.reply_code == (540 if header.startswith(b"AMQP") else 501)
    assert server.data_to_send() == preferred.header
    assert server.state is ConnectionState.ERROR


@pytest.mark.parametrize(
    ("header", "protocols", "reading", "answer"),
    [
        (PROTOCOL_HEADER_0_9_1, ["0-8"], "0-9-1", PROTOCOL_HEADER_0_8),
        (PROTOCOL_HEADER_0_8, ["0-9-1", "0-9"], "0-9-1", PROTOCOL_HEADER_0_9_1),
        (PROTOCOL_HEADER_0_9, ["0-8"], "0-9-1", PROTOCOL_HEADER_0_8),
    ],
)
def test_server_refuses_versions_it_does_not_serve(
    header: bytes, protocols: list[str], reading: str, answer: bytes
) -> None:
    config = ConnectionConfig(protocols=protocols, header_0_9=reading)
    server = ConnectionPair(server_config=config).server
    with pytest.raises(RemoteProtocolError, match="unsupported protocol header") as info:
        feed(server, header)
    assert info.value.reply_code == 540
    assert server.data_to_send() == answer


def test_config_checks_the_versions() -> None:
    with pytest.raises(ValueError, match=r"0-10 is amqp_sansio\.v0_10"):
        ConnectionConfig(protocol="0-10")
    with pytest.raises(ValueError, match="unknown protocol version"):
        ConnectionConfig(protocol="0-7")
    with pytest.raises(ValueError, match="twice"):
        ConnectionConfig(protocols=["0-8", V.AMQP_0_8])
    with pytest.raises(ValueError, match="at least one"):
        ConnectionConfig(protocols=[])
    with pytest.raises(ValueError, match="header_0_9"):
        ConnectionConfig(header_0_9="0-8")
    assert ConnectionConfig(protocols="0-8").protocols == (AMQP_0_8,)
    assert ConnectionConfig(protocol=V.AMQP_0_9).protocol is AMQP_0_9


# --- the client side --------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [AMQP_0_9_1, AMQP_0_9, AMQP_0_8])
def test_client_sends_its_version_s_header(spec: ProtocolSpec) -> None:
    pair = ConnectionPair(ConnectionConfig(protocol=spec))
    assert pair.client.protocol is spec
    assert pair.client.data_to_send() == spec.header
    assert header_for(spec.version) == spec.header


@pytest.mark.parametrize("offered", [PROTOCOL_HEADER_0_8, PROTOCOL_HEADER_0_10])
def test_client_reads_a_refusal_as_the_version_the_server_speaks(offered: bytes) -> None:
    pair = ConnectionPair()
    pair.client.data_to_send()
    with pytest.raises(ProtocolHeaderRefused) as info:
        feed(pair.client, offered, byte_at_a_time=True)
    error = info.value
    assert isinstance(error, RemoteProtocolError)
    assert error.reply_code == 540
    assert error.requested is V.AMQP_0_9_1
    assert error.offered == ProtocolHeader(offered)
    assert "refused our protocol header (0-9-1)" in error.reply_text
    assert pair.client.data_to_send() == b""  # nothing to answer a header with


def test_client_asked_for_events_before_any_data_still_reads_a_refusal() -> None:
    # amqp_blocking asks the core for an event before the first read: framing must not start
    # on an empty input, or the server's header would be read as a frame (a 501).
    pair = ConnectionPair()
    pair.client.data_to_send()
    assert pair.client.next_event() is NEED_DATA
    with pytest.raises(ProtocolHeaderRefused) as info:
        feed(pair.client, PROTOCOL_HEADER_0_8)
    assert info.value.offered.version is V.AMQP_0_8


def test_client_checks_the_version_connection_start_says() -> None:
    # A 0-8 client against a server that calls itself 0-9: a refused negotiation.
    pair = ConnectionPair(ConnectionConfig(protocol="0-8"))
    pair.client.data_to_send()
    start = ConnectionStart(version_major=0, version_minor=9, server_properties={})
    with pytest.raises(RemoteProtocolError, match="speaks 0-9, not 0-8") as info:
        feed(pair.client, method_frame(0, start))
    assert info.value.reply_code == 540


def _finish_handshake(pair: ConnectionPair) -> None:
    """Move bytes both ways until neither side has more, the server accepting everything."""
    moved = True
    while moved:
        moved = False
        for sender in (pair.server, pair.client):
            data = sender.data_to_send()
            if not data:
                continue
            moved = True
            receiver = pair.peer(sender)
            for event in feed(receiver, data):
                if isinstance(event, AuthenticationRequested):
                    receiver.accept_authentication()
                elif isinstance(event, VirtualHostRequested):
                    receiver.accept_virtual_host()
    assert pair.client.state is pair.server.state is ConnectionState.OPEN


def _auto(server_config: ConnectionConfig) -> tuple[list[ProtocolVersion], ConnectionPair]:
    """protocol="auto" as an adapter runs it: try, read the refusal, reconnect."""
    tried: list[ProtocolVersion] = []
    offered: ProtocolHeader | None = None
    while (version := next_protocol(tried, offered)) is not None:
        tried.append(version)
        pair = ConnectionPair(ConnectionConfig(protocol=version), server_config)
        try:
            feed(pair.server, pair.client.data_to_send())
        except RemoteProtocolError:
            # the server refused the header: it wrote its own, which the client reads
            with pytest.raises(ProtocolHeaderRefused) as info:
                feed(pair.client, pair.server.data_to_send())
            offered = info.value.offered
            continue
        _finish_handshake(pair)
        return tried, pair
    raise AssertionError(f"auto gave up after {tried}")


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (["0-9-1", "0-9", "0-8"], [V.AMQP_0_9_1]),
        (["0-8"], [V.AMQP_0_9_1, V.AMQP_0_8]),
        (["0-8", "0-9"], [V.AMQP_0_9_1, V.AMQP_0_8]),  # the server's answer wins the order
    ],
)
def test_auto_reconnects_with_what_the_server_answered(
    served: list[str], expected: list[ProtocolVersion]
) -> None:
    tried, pair = _auto(ConnectionConfig(protocols=served))
    assert tried == expected
    assert pair.client.protocol is pair.server.protocol
    assert pair.client.protocol.version is expected[-1]
    # and the version is really spoken: a queue.declare round trip
    channel = pair.open_channel()
    spec = pair.client.protocol
    declare = spec.make("queue.declare", queue="q", arguments={"x-max-length": 10})
    pair.client.send_method(channel, declare)
    [received] = pair.transfer(pair.client)
    assert isinstance(received, MethodReceived)
    assert received.method.NAME == "queue.declare"


def test_auto_with_qpid_s_reading_of_the_0_9_header() -> None:
    # A server of 0-9 only (the 0-9 header read as 0-9) answers 0-9-1 with AMQP 1 1 0 9.
    tried, pair = _auto(ConnectionConfig(protocols=["0-9"], header_0_9="0-9"))
    assert tried == [V.AMQP_0_9_1, V.AMQP_0_9]
    assert pair.server.protocol is pair.client.protocol is AMQP_0_9
    assert pair.client.state is pair.server.state is ConnectionState.OPEN


# --- the pure functions -----------------------------------------------------------------------


def test_requested_version_reads_all_eight_octets() -> None:
    assert requested_version(PROTOCOL_HEADER_0_9_1) is V.AMQP_0_9_1
    assert requested_version(PROTOCOL_HEADER_0_9) is V.AMQP_0_9_1
    assert requested_version(PROTOCOL_HEADER_0_9, header_0_9="0-9") is V.AMQP_0_9
    assert requested_version(ProtocolHeader(PROTOCOL_HEADER_0_8_PDF)) is V.AMQP_0_8
    assert requested_version(PROTOCOL_HEADER_0_10) is V.AMQP_0_10
    assert requested_version(PROTOCOL_HEADER_1_0_SASL) is V.AMQP_1_0
    assert requested_version(b"AMQP\x01\x01\x00\x0b") is V.UNKNOWN
    assert requested_version(b"HTTP/1.1") is V.UNKNOWN
    assert requested_version(b"AMQP") is V.UNKNOWN


def test_choose_version_is_the_seam_for_a_server_of_several_families() -> None:
    everything = ["0-10", "0-9-1", "0-9", "0-8"]
    assert choose_version(PROTOCOL_HEADER_0_10, everything) is V.AMQP_0_10
    assert choose_version(PROTOCOL_HEADER_0_9_1, everything) is V.AMQP_0_9_1
    assert choose_version(PROTOCOL_HEADER_0_8_PDF, everything) is V.AMQP_0_8
    assert choose_version(PROTOCOL_HEADER_0_10, ["0-9-1"]) is None
    assert choose_version(PROTOCOL_HEADER_1_0, everything) is None
    assert choose_version(b"GET / HT", everything) is None
    assert header_for("0-10") == PROTOCOL_HEADER_0_10
    with pytest.raises(ValueError, match="no protocol header"):
        header_for(V.UNKNOWN)


def test_next_protocol() -> None:
    assert AUTO_ORDER == (V.AMQP_0_9_1, V.AMQP_0_9, V.AMQP_0_8)
    assert next_protocol([], None) is V.AMQP_0_9_1
    # the server's answer first, then the order; 0-10 only when the server answers with it
    assert next_protocol(["0-9-1"], ProtocolHeader(PROTOCOL_HEADER_0_8)) is V.AMQP_0_8
    assert next_protocol(["0-9-1"], ProtocolHeader(PROTOCOL_HEADER_0_10)) is V.AMQP_0_10
    assert next_protocol(["0-9-1"], ProtocolHeader(PROTOCOL_HEADER_0_9)) is V.AMQP_0_9
    assert next_protocol(["0-9-1"], None) is V.AMQP_0_9
    assert next_protocol(["0-9-1"], ProtocolHeader(PROTOCOL_HEADER_1_0)) is V.AMQP_0_9
    assert next_protocol(["0-9-1", "0-9"], None) is V.AMQP_0_8
    assert next_protocol(AUTO_ORDER, None) is None
    # a server that offers what it just refused: give up rather than loop
    assert next_protocol(["0-9-1"], ProtocolHeader(PROTOCOL_HEADER_0_9_1)) is None


def test_opened_event_after_negotiation() -> None:
    pair = ConnectionPair(
        ConnectionConfig(protocol="0-8"), ConnectionConfig(protocols=["0-9-1", "0-8"])
    )
    client_events, server_events = pair.handshake()
    assert any(isinstance(e, ConnectionOpened) for e in client_events)
    assert any(isinstance(e, ConnectionOpened) for e in server_events)
    assert pair.server.protocol is AMQP_0_8
