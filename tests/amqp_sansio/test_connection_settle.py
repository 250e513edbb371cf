"""The client's basic.ack, nack and reject on an open channel (send_method's fast path): the
same octets as the generic encoder, the same events at the server, and every check the generic
path makes still made, with nothing written when one fails."""

from __future__ import annotations

import pytest

from amqp_sansio import (
    BasicAck,
    BasicNack,
    BasicReject,
    ChannelClose,
    ChannelState,
    Connection,
    LocalProtocolError,
    Method,
    MethodReceived,
    RemoteProtocolError,
)
from amqp_sansio.testing import ConnectionPair, feed, method_frame

SETTLEMENTS: list[Method] = [
    BasicAck(delivery_tag=1),
    BasicAck(delivery_tag=0, multiple=True),
    BasicAck(delivery_tag=2**64 - 1, multiple=False),
    BasicNack(delivery_tag=7),
    BasicNack(delivery_tag=7, multiple=True, requeue=False),
    BasicNack(delivery_tag=8, multiple=False, requeue=True),
    BasicNack(delivery_tag=2**63, multiple=True, requeue=True),
    BasicReject(delivery_tag=3),
    BasicReject(delivery_tag=3, requeue=False),
]


def _opened() -> tuple[ConnectionPair, int]:
    pair = ConnectionPair()
    pair.handshake()
    return pair, pair.open_channel()


@pytest.mark.parametrize("method", SETTLEMENTS, ids=repr)
def test_settlement_octets_and_event(method: Method) -> None:
    pair, ch = _opened()
    pair.client.send_method(ch, method)
    sent = pair.client.data_to_send()
    assert sent == method_frame(ch, method)
    assert feed(pair.server, sent) == [MethodReceived(channel=ch, method=method, request=None)]
    assert pair.client.channel_state(ch) is ChannelState.OPEN


def test_settlements_on_a_high_channel_and_back_to_back() -> None:
    pair = ConnectionPair()
    pair.handshake()
    for _ in range(299):  # channel ids above 255 need both octets of the channel field
        pair.open_channel()
    ch = pair.open_channel()
    assert ch == 300
    for method in SETTLEMENTS:
        pair.client.send_method(ch, method)
    sent = pair.client.data_to_send()
    assert sent == b"".join(method_frame(ch, m) for m in SETTLEMENTS)
    assert feed(pair.server, sent) == [
        MethodReceived(channel=ch, method=m, request=None) for m in SETTLEMENTS
    ]


def _refused(conn: Connection, channel: object, method: Method) -> LocalProtocolError:
    """Check that *method* is refused; each caller checks that nothing was queued."""
    with pytest.raises(LocalProtocolError) as info:
        conn.send_method(channel, method)  # type: ignore[arg-type]
    return info.value


@pytest.mark.parametrize("method", SETTLEMENTS[:1] + SETTLEMENTS[3:4] + SETTLEMENTS[7:8], ids=repr)
def test_settlement_on_a_channel_never_opened(method: Method) -> None:
    pair, ch = _opened()
    error = _refused(pair.client, ch + 1, method)
    assert error.reply_code == 504
    assert "CLOSED" in error.reply_text
    assert pair.client.data_to_send() == b""


@pytest.mark.parametrize("method", SETTLEMENTS[:1] + SETTLEMENTS[3:4] + SETTLEMENTS[7:8], ids=repr)
def test_settlement_on_a_closing_channel(method: Method) -> None:
    pair, ch = _opened()
    pair.client.close_channel(ch, 200, "bye")
    close = method_frame(
        ch, ChannelClose(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    error = _refused(pair.client, ch, method)
    assert "CLIENT_CLOSING" in error.reply_text
    assert pair.client.data_to_send() == close  # the refused method added nothing
    feed(pair.server, close)
    pair.transfer(pair.server)  # close-ok: the channel is gone
    assert pair.client.channel_state(ch) is ChannelState.CLOSED
    assert _refused(pair.client, ch, method).reply_code == 504
    assert pair.client.data_to_send() == b""


@pytest.mark.parametrize("channel", [True, 1.0, "1", 0, -1, 65536])
def test_settlement_on_a_channel_that_is_no_channel_id(channel: object) -> None:
    pair, ch = _opened()
    assert ch == 1
    error = _refused(pair.client, channel, BasicAck(delivery_tag=1))
    assert error.reply_code in (503, 504)
    assert pair.client.data_to_send() == b""


@pytest.mark.parametrize(
    "method",
    [
        BasicAck(delivery_tag=-1),
        BasicAck(delivery_tag=2**64),
        BasicNack(delivery_tag="1"),  # type: ignore[arg-type]
        BasicReject(delivery_tag=None),  # type: ignore[arg-type]
    ],
    ids=repr,
)
def test_settlement_with_a_bad_delivery_tag(method: Method) -> None:
    pair, ch = _opened()
    error = _refused(pair.client, ch, method)
    assert error.reply_code == 502
    assert "delivery_tag" in error.reply_text
    assert pair.client.data_to_send() == b""


def test_settlement_after_a_connection_error() -> None:
    pair, ch = _opened()
    pair.client.receive_data(b"\x09garbage-frame")  # unknown frame type 9
    with pytest.raises(RemoteProtocolError):
        pair.client.next_event()
    pair.client.data_to_send()  # the close the core queued
    error = _refused(pair.client, ch, BasicAck(delivery_tag=1))
    assert "failed earlier" in error.reply_text
    assert pair.client.data_to_send() == b""


def test_settlement_before_the_connection_is_open() -> None:
    pair = ConnectionPair()
    pair.client.data_to_send()  # the protocol header
    error = _refused(pair.client, 1, BasicAck(delivery_tag=1))
    assert error.reply_code == 503
    assert pair.client.data_to_send() == b""


def test_server_may_not_reject_and_must_ack_publishes() -> None:
    pair, ch = _opened()
    error = _refused(pair.server, ch, BasicReject(delivery_tag=1))
    assert "server" in error.reply_text
    # The server's ack confirms a publish: without confirm mode it settles nothing.
    assert _refused(pair.server, ch, BasicAck(delivery_tag=1)).reply_code == 406
    assert pair.server.data_to_send() == b""
