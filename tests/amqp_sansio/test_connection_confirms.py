"""Publisher confirms and returns through a ConnectionPair: publish numbers, acks and nacks with
``multiple`` expanded, returns tied to their publish, and nothing forgotten on close or loss."""

from __future__ import annotations

import random

import pytest

from amqp_sansio import (
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ChannelClosed,
    ChannelOpened,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionClose,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ConnectionState,
    ConnectionUpdateSecret,
    LocalProtocolError,
    MessageReceived,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
    QueueDeclare,
    RemoteProtocolError,
)
from amqp_sansio.testing import ConnectionPair, feed, method_frame

BYTEWISE = pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])
PROPS = BasicProperties()


def _pair(
    byte_at_a_time: bool = False,
    *,
    nowait: bool = False,
    client_config: ConnectionConfig | None = None,
) -> tuple[ConnectionPair, int]:
    """An open channel in confirm mode."""
    pair = ConnectionPair(client_config, byte_at_a_time=byte_at_a_time)
    pair.handshake()
    ch = pair.client.open_channel()
    pair.client.send_method(ch, ConfirmSelect(nowait=nowait))
    server_events = pair.transfer(pair.client)
    assert server_events[-1] == MethodReceived(
        channel=ch, method=ConfirmSelect(nowait=nowait), request=None
    )
    if not nowait:
        pair.server.send_method(ch, ConfirmSelectOk())
    expected: list[object] = [ChannelOpened(channel=ch)]
    if not nowait:
        expected.append(
            MethodReceived(channel=ch, method=ConfirmSelectOk(), request=ConfirmSelect())
        )
    assert pair.transfer(pair.server) == expected
    return pair, ch


def _publish(
    pair: ConnectionPair,
    ch: int,
    count: int,
    *,
    mandatory: bool = False,
    exchange: str = "x",
    routing_key: str = "k",
) -> list[int | None]:
    numbers = [
        pair.client.publish(
            ch,
            BasicPublish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
            PROPS,
            b"body",
        )
        for _ in range(count)
    ]
    received = pair.transfer(pair.client)
    assert [type(e) for e in received] == [MessageReceived] * count
    return numbers


def _return(exchange: str = "x", routing_key: str = "k") -> BasicReturn:
    return BasicReturn(
        reply_code=312, reply_text="NO_ROUTE", exchange=exchange, routing_key=routing_key
    )


def test_publish_numbers_only_in_confirm_mode() -> None:
    pair = ConnectionPair()
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    assert pair.client.publish(ch, BasicPublish(), PROPS, b"") is None
    pair.client.send_method(ch, ConfirmSelect(nowait=True))
    assert pair.client.publish(ch, BasicPublish(), PROPS, b"") == 1
    pair.client.send_method(ch, ConfirmSelect(nowait=True))  # selecting again restarts nothing
    assert pair.client.publish(ch, BasicPublish(), PROPS, b"") == 2


@pytest.mark.parametrize("nowait", [False, True])
@BYTEWISE
def test_ack_multiple_is_expanded(byte_at_a_time: bool, nowait: bool) -> None:
    pair, ch = _pair(byte_at_a_time, nowait=nowait)
    assert _publish(pair, ch, 5) == [1, 2, 3, 4, 5]
    pair.server.send_method(ch, BasicAck(delivery_tag=3, multiple=True))
    pair.server.send_method(ch, BasicNack(delivery_tag=4, multiple=False, requeue=False))
    pair.server.send_method(ch, BasicAck(delivery_tag=5, multiple=True))
    assert pair.transfer(pair.server) == [
        PublishConfirmed(channel=ch, publish_numbers=(1, 2, 3)),
        PublishNacked(channel=ch, publish_numbers=(4,)),
        PublishConfirmed(channel=ch, publish_numbers=(5,)),
    ]


@BYTEWISE
def test_out_of_order_acks_never_report_a_number_twice(byte_at_a_time: bool) -> None:
    pair, ch = _pair(byte_at_a_time)
    _publish(pair, ch, 8)
    for tag in (3, 5, 2):
        pair.server.send_method(ch, BasicAck(delivery_tag=tag))
    pair.server.send_method(ch, BasicNack(delivery_tag=6, multiple=True, requeue=False))
    pair.server.send_method(ch, BasicAck(delivery_tag=0, multiple=True))  # all outstanding
    assert pair.transfer(pair.server) == [
        PublishConfirmed(channel=ch, publish_numbers=(3,)),
        PublishConfirmed(channel=ch, publish_numbers=(5,)),
        PublishConfirmed(channel=ch, publish_numbers=(2,)),
        PublishNacked(channel=ch, publish_numbers=(1, 4, 6)),
        PublishConfirmed(channel=ch, publish_numbers=(7, 8)),
    ]


def test_a_large_window_settles_every_number_once() -> None:
    pair, ch = _pair()
    count = 20_000
    _publish(pair, ch, count)
    rng = random.Random(7)
    outstanding = list(range(1, count + 1))
    settled: list[int] = []
    while outstanding:
        if rng.random() < 0.3:
            tag = outstanding[rng.randrange(len(outstanding))]
            pair.server.send_method(ch, BasicAck(delivery_tag=tag))
            outstanding.remove(tag)
        else:
            tag = outstanding[min(len(outstanding) - 1, rng.randrange(200))]
            pair.server.send_method(ch, BasicAck(delivery_tag=tag, multiple=True))
            outstanding = [n for n in outstanding if n > tag]
        for event in pair.transfer(pair.server):
            assert isinstance(event, PublishConfirmed)
            assert list(event.publish_numbers) == sorted(event.publish_numbers)
            settled += event.publish_numbers
    assert sorted(settled) == list(range(1, count + 1))
    assert len(settled) == count


def _inject(pair: ConnectionPair, data: bytes, byte_at_a_time: bool) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as info:
        feed(pair.client, data, byte_at_a_time=byte_at_a_time)
    err = info.value
    close = ConnectionClose(
        reply_code=err.reply_code,
        reply_text=err.reply_text[:255],
        class_id=err.class_id,
        method_id=err.method_id,
    )
    assert pair.client.data_to_send() == method_frame(0, close)
    assert pair.client.state is ConnectionState.ERROR
    return err


@pytest.mark.parametrize(
    "acks",
    [
        [BasicAck(delivery_tag=3)],  # never published
        [BasicAck(delivery_tag=3, multiple=True)],
        [BasicAck(delivery_tag=1), BasicAck(delivery_tag=1)],  # already confirmed
        [BasicAck(delivery_tag=2, multiple=True), BasicNack(delivery_tag=1, multiple=True)],
        [BasicAck(delivery_tag=0, multiple=True), BasicAck(delivery_tag=0, multiple=True)],
        [BasicNack(delivery_tag=0)],
    ],
)
@BYTEWISE
def test_a_confirm_of_nothing_unconfirmed_is_406(
    acks: list[BasicAck | BasicNack], byte_at_a_time: bool
) -> None:
    pair, ch = _pair(byte_at_a_time)
    _publish(pair, ch, 2)
    data = b"".join(method_frame(ch, ack) for ack in acks)
    err = _inject(pair, data, byte_at_a_time)
    ack = acks[-1]
    assert (err.reply_code, err.class_id, err.method_id) == (406, 60, ack.METHOD_ID)


@BYTEWISE
def test_an_ack_outside_confirm_mode_is_406(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(byte_at_a_time=byte_at_a_time)
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    pair.client.publish(ch, BasicPublish(), PROPS, b"")
    pair.transfer(pair.client)
    err = _inject(pair, method_frame(ch, BasicAck(delivery_tag=1)), byte_at_a_time)
    assert err.reply_code == 406
    assert "not in confirm mode" in err.reply_text


def test_server_acks_are_checked_before_anything_is_written() -> None:
    pair = ConnectionPair()
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    with pytest.raises(LocalProtocolError) as info:  # the client did not select confirm mode
        pair.server.send_method(ch, BasicAck(delivery_tag=1))
    assert info.value.reply_code == 406
    pair.client.send_method(ch, ConfirmSelect(nowait=True))
    pair.transfer(pair.client)
    _publish(pair, ch, 3)
    refused = [
        BasicAck(delivery_tag=4),
        BasicAck(delivery_tag=4, multiple=True),
        BasicNack(delivery_tag=9),
    ]
    for ack in refused:
        with pytest.raises(LocalProtocolError):
            pair.server.send_method(ch, ack)
    assert pair.server.data_to_send() == b""
    pair.server.send_method(ch, BasicAck(delivery_tag=2))
    for ack in (BasicAck(delivery_tag=2), BasicNack(delivery_tag=2)):
        with pytest.raises(LocalProtocolError):
            pair.server.send_method(ch, ack)
    pair.server.send_method(ch, BasicAck(delivery_tag=3, multiple=True))
    with pytest.raises(LocalProtocolError):
        pair.server.send_method(ch, BasicAck(delivery_tag=0, multiple=True))
    assert pair.transfer(pair.server) == [
        PublishConfirmed(channel=ch, publish_numbers=(2,)),
        PublishConfirmed(channel=ch, publish_numbers=(1, 3)),
    ]


@BYTEWISE
def test_return_outside_confirm_mode_comes_at_once(byte_at_a_time: bool) -> None:
    pair = ConnectionPair(byte_at_a_time=byte_at_a_time)
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    props = BasicProperties(message_id="m1")
    pair.server.send_content(ch, _return(), props, b"returned")
    assert pair.transfer(pair.server) == [
        PublishReturned(
            channel=ch, publish_number=None, method=_return(), properties=props, body=b"returned"
        )
    ]


def _returned(ch: int, number: int | None, method: BasicReturn | None = None) -> PublishReturned:
    return PublishReturned(
        channel=ch,
        publish_number=number,
        method=_return() if method is None else method,
        properties=PROPS,
        body=b"body",
    )


@BYTEWISE
def test_return_is_held_until_the_confirm_that_covers_it(byte_at_a_time: bool) -> None:
    pair, ch = _pair(byte_at_a_time)
    _publish(pair, ch, 1, mandatory=True, routing_key="a")  # 1
    _publish(pair, ch, 1)  # 2: not mandatory
    _publish(pair, ch, 1, mandatory=True, routing_key="b")  # 3
    _publish(pair, ch, 1, mandatory=True, routing_key="a")  # 4
    # RabbitMQ sends the return of 3 before the ack that covers it.
    pair.server.send_content(ch, _return(routing_key="b"), PROPS, b"body")
    assert pair.transfer(pair.server) == []
    pair.server.send_method(ch, BasicAck(delivery_tag=1))
    assert pair.transfer(pair.server) == [PublishConfirmed(channel=ch, publish_numbers=(1,))]
    pair.server.send_method(ch, BasicAck(delivery_tag=3, multiple=True))
    assert pair.transfer(pair.server) == [
        _returned(ch, 3, _return(routing_key="b")),
        PublishConfirmed(channel=ch, publish_numbers=(2, 3)),
    ]
    pair.server.send_content(ch, _return(routing_key="a"), PROPS, b"body")
    pair.server.send_method(ch, BasicNack(delivery_tag=4))
    assert pair.transfer(pair.server) == [
        _returned(ch, 4, _return(routing_key="a")),
        PublishNacked(channel=ch, publish_numbers=(4,)),
    ]


@BYTEWISE
def test_returns_tie_to_the_lowest_matching_numbers(byte_at_a_time: bool) -> None:
    pair, ch = _pair(byte_at_a_time)
    _publish(pair, ch, 3, mandatory=True)  # 1, 2, 3 to the same exchange and routing key
    _publish(pair, ch, 1, mandatory=True, exchange="other")  # 4
    for method in (_return(), _return(exchange="other"), _return()):
        pair.server.send_content(ch, method, PROPS, b"body")
    pair.server.send_method(ch, BasicAck(delivery_tag=4, multiple=True))
    assert pair.transfer(pair.server) == [
        _returned(ch, 1),
        _returned(ch, 4, _return(exchange="other")),
        _returned(ch, 2),
        PublishConfirmed(channel=ch, publish_numbers=(1, 2, 3, 4)),
    ]


@BYTEWISE
def test_a_return_no_publish_can_explain_comes_untied(byte_at_a_time: bool) -> None:
    pair, ch = _pair(byte_at_a_time)
    _publish(pair, ch, 1, mandatory=True)
    _publish(pair, ch, 1, mandatory=False, routing_key="plain")
    pair.server.send_content(ch, _return(routing_key="plain"), PROPS, b"body")
    assert pair.transfer(pair.server) == [_returned(ch, None, _return(routing_key="plain"))]
    pair.server.send_content(ch, _return(), PROPS, b"body")  # held for publish 1
    pair.server.send_content(ch, _return(), PROPS, b"body")  # nothing left: waits behind it
    assert pair.transfer(pair.server) == []
    pair.server.send_method(ch, BasicAck(delivery_tag=2, multiple=True))
    assert pair.transfer(pair.server) == [
        _returned(ch, 1),
        _returned(ch, None),
        PublishConfirmed(channel=ch, publish_numbers=(1, 2)),
    ]


@BYTEWISE
def test_returns_keep_their_wire_order(byte_at_a_time: bool) -> None:
    pair, ch = _pair(byte_at_a_time)
    _publish(pair, ch, 1, mandatory=True, routing_key="a")  # 1
    _publish(pair, ch, 1, mandatory=True, routing_key="b")  # 2
    pair.server.send_content(ch, _return(routing_key="a"), PROPS, b"body")
    pair.server.send_content(ch, _return(routing_key="b"), PROPS, b"body")
    assert pair.transfer(pair.server) == []
    # A broker that confirms 2 before 1 would make the second return overtake the first: the
    # first is handed out untied instead, and publish 1's confirm comes alone.
    pair.server.send_method(ch, BasicAck(delivery_tag=2))
    pair.server.send_method(ch, BasicAck(delivery_tag=1))
    assert pair.transfer(pair.server) == [
        _returned(ch, None, _return(routing_key="a")),
        _returned(ch, 2, _return(routing_key="b")),
        PublishConfirmed(channel=ch, publish_numbers=(2,)),
        PublishConfirmed(channel=ch, publish_numbers=(1,)),
    ]
    # The reservation given back lets a later return for publish-key "a" be tied again.
    _publish(pair, ch, 1, mandatory=True, routing_key="a")  # 3
    pair.server.send_content(ch, _return(routing_key="a"), PROPS, b"body")
    pair.server.send_method(ch, BasicAck(delivery_tag=3))
    assert pair.transfer(pair.server) == [
        _returned(ch, 3, _return(routing_key="a")),
        PublishConfirmed(channel=ch, publish_numbers=(3,)),
    ]


def test_returns_arrive_whole_in_chunk_mode() -> None:
    pair, ch = _pair(client_config=ConnectionConfig(chunk_threshold=10))
    _publish(pair, ch, 1, mandatory=True)
    body = b"r" * 10_000
    pair.server.send_content(ch, _return(), PROPS, body)
    pair.server.send_method(ch, BasicAck(delivery_tag=1))
    [returned, confirmed] = pair.transfer(pair.server)
    assert isinstance(returned, PublishReturned)
    assert (returned.publish_number, returned.body) == (1, body)
    assert confirmed == PublishConfirmed(channel=ch, publish_numbers=(1,))


@pytest.mark.parametrize("closer", ["client", "server"])
@BYTEWISE
def test_channel_close_reports_unconfirmed_and_held_returns(
    closer: str, byte_at_a_time: bool
) -> None:
    pair, ch = _pair(byte_at_a_time)
    _publish(pair, ch, 4, mandatory=True)
    pair.server.send_method(ch, BasicAck(delivery_tag=2))
    pair.server.send_content(ch, _return(), PROPS, b"body")
    assert pair.transfer(pair.server) == [PublishConfirmed(channel=ch, publish_numbers=(2,))]
    if closer == "client":
        pair.client.close_channel(ch)
        [server_closed] = pair.transfer(pair.client)
        client_events = pair.transfer(pair.server)
    else:
        pair.server.close_channel(ch, 406, "PRECONDITION_FAILED - test")
        client_events = pair.transfer(pair.server)
        [server_closed] = pair.transfer(pair.client)
    [held, closed] = client_events
    assert held == _returned(ch, None)
    assert isinstance(closed, ChannelClosed)
    assert closed.unconfirmed_publishes == (1, 3, 4)
    assert closed.by_peer is (closer == "server")
    # The server saw the same publishes, of which it acked one.
    assert isinstance(server_closed, ChannelClosed)
    assert server_closed.unconfirmed_publishes == (1, 3, 4)


@BYTEWISE
def test_connection_lost_reports_everything_pending(byte_at_a_time: bool) -> None:
    pair, ch = _pair(byte_at_a_time)
    second = pair.client.open_channel()
    pair.client.send_method(second, ConfirmSelect(nowait=True))
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    _publish(pair, ch, 3, mandatory=True)
    assert pair.client.publish(second, BasicPublish(), PROPS, b"") == 1
    declare = QueueDeclare(queue="q")
    pair.client.send_method(second, declare)
    pair.client.update_secret(b"token", "refresh")
    pair.transfer(pair.client)
    pair.server.send_method(ch, BasicAck(delivery_tag=1))
    pair.server.send_content(ch, _return(), PROPS, b"body")
    events = pair.transfer(pair.server)
    events += feed(pair.client, b"")
    assert events == [
        PublishConfirmed(channel=ch, publish_numbers=(1,)),
        _returned(ch, None),
        ConnectionLost(
            pending_requests=(
                (0, ConnectionUpdateSecret(new_secret=b"token", reason="refresh")),
                (second, declare),
            ),
            unconfirmed_publishes=((ch, 2), (ch, 3), (second, 1)),
        ),
    ]
    assert "token" not in repr(events[-1])


def test_connection_close_reports_unconfirmed_publishes() -> None:
    pair, ch = _pair()
    _publish(pair, ch, 2)
    pair.client.close()
    pair.transfer(pair.client)
    [closed] = pair.transfer(pair.server)
    assert closed == ConnectionClosed(
        reply_code=200,
        reply_text="",
        class_id=0,
        method_id=0,
        by_peer=False,
        unconfirmed_publishes=((ch, 1), (ch, 2)),
    )
