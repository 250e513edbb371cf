"""The client layer's requests table and the helpers the adapters share: each request as the
broker receives it, the argument checks, and what each reply turns into."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest

from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_9,
    AMQP_0_9_1,
    BasicCancel,
    BasicConsume,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicQos,
    BasicRecover,
    BasicReject,
    ChannelFlow,
    ChannelFlowChanged,
    ChannelFlowOk,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    LocalProtocolError,
    MessageReceived,
    MethodReceived,
    ProtocolVersion,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
)
from amqp_sansio.client import (
    ConnectionLostError,
    ConnectionParameters,
    Message,
    MessageReturnedError,
    PublisherCounts,
    PublishNackedError,
    PublishOutcomeUnknownError,
)
from amqp_sansio.client import _requests as request
from amqp_sansio.testing import ConnectionPair

if TYPE_CHECKING:
    from amqp_sansio import FieldTable, Method

_ARGS: FieldTable = {"x-max-length": 10}

#: (built, expected): every builder, with non-default values where it has any.
BUILT: list[tuple[Method, Method]] = [
    (
        request.exchange_declare(
            "ex",
            "topic",
            passive=True,
            durable=True,
            auto_delete=True,
            internal=True,
            arguments=_ARGS,
        ),
        ExchangeDeclare(
            exchange="ex",
            type="topic",
            passive=True,
            durable=True,
            auto_delete=True,
            internal=True,
            arguments=_ARGS,
        ),
    ),
    (
        request.exchange_declare(
            "ex",
            "direct",
            passive=False,
            durable=False,
            auto_delete=False,
            internal=False,
            arguments=None,
        ),
        ExchangeDeclare(exchange="ex", type="direct"),
    ),
    (
        request.exchange_delete("ex", if_unused=True),
        ExchangeDelete(exchange="ex", if_unused=True),
    ),
    (
        request.exchange_bind("dst", "src", "rk", arguments=_ARGS),
        ExchangeBind(destination="dst", source="src", routing_key="rk", arguments=_ARGS),
    ),
    (
        request.exchange_unbind("dst", "src", "rk", arguments=None),
        ExchangeUnbind(destination="dst", source="src", routing_key="rk"),
    ),
    (
        request.queue_declare(
            "q", passive=True, durable=True, exclusive=True, auto_delete=True, arguments=_ARGS
        ),
        QueueDeclare(
            queue="q", passive=True, durable=True, exclusive=True, auto_delete=True, arguments=_ARGS
        ),
    ),
    (
        request.queue_bind("q", "ex", "rk", arguments=_ARGS),
        QueueBind(queue="q", exchange="ex", routing_key="rk", arguments=_ARGS),
    ),
    (
        request.queue_unbind("q", "ex", "rk", arguments=None),
        QueueUnbind(queue="q", exchange="ex", routing_key="rk"),
    ),
    (request.queue_purge("q"), QueuePurge(queue="q")),
    (
        request.queue_delete("q", if_unused=True, if_empty=True),
        QueueDelete(queue="q", if_unused=True, if_empty=True),
    ),
    (
        request.basic_qos(7, prefetch_size=0, global_=True),
        BasicQos(prefetch_count=7, prefetch_size=0, global_=True),
    ),
    (
        BasicConsume(queue="q", consumer_tag="tag", no_ack=True, exclusive=True, arguments=_ARGS),
        BasicConsume(queue="q", consumer_tag="tag", no_ack=True, exclusive=True, arguments=_ARGS),
    ),
    (request.basic_get("q", no_ack=True), BasicGet(queue="q", no_ack=True)),
    (request.basic_recover(True), BasicRecover(requeue=True)),
    (request.flow(True), ChannelFlow(active=True)),
    (request.basic_cancel("tag"), BasicCancel(consumer_tag="tag")),
    (
        request.basic_nack(5, multiple=True, requeue=False),
        BasicNack(delivery_tag=5, multiple=True, requeue=False),
    ),
    (request.basic_reject(6, requeue=False), BasicReject(delivery_tag=6, requeue=False)),
]


@pytest.fixture
def pair() -> ConnectionPair:
    pair = ConnectionPair()
    pair.handshake()
    return pair


@pytest.mark.parametrize(("built", "expected"), BUILT, ids=lambda m: m.NAME)
def test_builder_sends_the_method_on_the_wire(
    pair: ConnectionPair, built: Method, expected: Method
) -> None:
    channel = pair.open_channel()
    if isinstance(built, BasicCancel):  # the broker only knows a consumer it was told of
        pair.client.send_method(
            channel,
            BasicConsume(queue="q", consumer_tag="tag"),
        )
        pair.transfer(pair.client)
    if isinstance(built, (BasicNack, BasicReject)):
        _deliver_two(pair, channel)
    pair.client.send_method(channel, built)
    events = pair.transfer(pair.client)
    if isinstance(expected, ChannelFlow):  # the server core reports it as a state change
        assert events == [ChannelFlowChanged(channel=channel, active=expected.active)]
    else:
        assert [e.method for e in events if isinstance(e, MethodReceived)] == [expected]
    assert built.expects_reply() is bool(type(expected).RESPONSES)


def _deliver_two(pair: ConnectionPair, channel: int) -> None:
    # basic.nack/reject name a delivery tag the client received.
    pair.client.send_method(channel, request.basic_get("q", no_ack=False))
    pair.transfer(pair.client)
    for tag in (5, 6):
        pair.server.send_content(
            channel,
            BasicGetOk(delivery_tag=tag, exchange="", routing_key="q", message_count=0),
            BasicProperties(),
            b"x",
        )
        if tag == 5:
            pair.client.send_method(channel, request.basic_get("q", no_ack=False))
            pair.transfer(pair.client)
    pair.transfer(pair.server)


def test_field_values_are_checked_where_they_are_encoded(pair: ConnectionPair) -> None:
    channel = pair.open_channel()
    too_long = request.queue_declare(
        "q" * 256, passive=False, durable=False, exclusive=False, auto_delete=False, arguments=None
    )
    with pytest.raises(LocalProtocolError, match=r"'queue'.*more than 255"):
        pair.client.send_method(channel, too_long)
    with pytest.raises(LocalProtocolError, match=r"'prefetch_count'.*out of range"):
        pair.client.send_method(channel, request.basic_qos(70000, prefetch_size=0, global_=False))
    assert pair.client.data_to_send() == b""  # nothing written


def test_consumer_tag_is_generated_or_checked() -> None:
    generated = request.consumer_tag("", "amqp-test", ())
    assert generated.startswith("amqp-test.")
    assert len(generated) == len("amqp-test.") + 32
    assert request.consumer_tag("", "amqp-test", ()) != generated
    assert request.consumer_tag("mine", "amqp-test", {"other"}) == "mine"
    with pytest.raises(ValueError, match="'mine' is already in use"):
        request.consumer_tag("mine", "amqp-test", {"mine"})


def test_consumer_buffer_size() -> None:
    assert request.consumer_buffer_size(5, 100) == 5
    assert request.consumer_buffer_size(None, 100) == 100
    assert request.consumer_buffer_size(None, 0) == request.DEFAULT_CONSUMER_BUFFER
    assert request.consumer_buffer_size(0, 100) == request.DEFAULT_CONSUMER_BUFFER


@pytest.mark.parametrize("window", [0, -1, 1.5, True, "10"])
def test_publisher_window_must_be_a_positive_int(window: int) -> None:
    with pytest.raises(ValueError, match="window must be a positive int"):
        request.check_window(window)


def test_publisher_window_accepted() -> None:
    assert request.check_window(1) == 1
    assert request.check_window(1000) == 1000


def test_connection_parameters() -> None:
    params = request.connection_parameters("amqp://u:p@h:1234/v", None)
    assert (params.host, params.port, params.virtual_host) == ("h", 1234, "v")
    named = request.connection_parameters(params, "worker")
    assert named.connection_name == "worker"
    assert params.connection_name is None
    assert request.connection_parameters(params, None) is params
    with pytest.raises(TypeError, match="url_or_params must be an AMQP URL"):
        request.connection_parameters(b"amqp://h/", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="port"):
        request.connection_parameters("amqp://h:notaport/", None)
    assert isinstance(params, ConnectionParameters)


def test_reply_interpreters() -> None:
    ok = QueueDeclareOk(queue="amq.gen-1", message_count=3, consumer_count=1)
    assert request.declared_queue(ok) is ok
    assert request.message_count(QueuePurgeOk(message_count=4)) == 4
    assert request.message_count(QueueDeleteOk(message_count=9)) == 9
    assert request.flow_state(ChannelFlowOk(active=False)) is False
    assert request.flow_state(ChannelFlowOk(active=True)) is True
    with pytest.raises(AssertionError, match=r"expected queue.declare-ok"):
        request.declared_queue(QueuePurgeOk(message_count=4))
    with pytest.raises(AssertionError, match=r"expected queue.purge-ok or queue.delete-ok"):
        request.message_count(ok)
    with pytest.raises(AssertionError, match=r"expected channel.flow-ok"):
        request.flow_state(None)


def test_basic_get_reply() -> None:
    event = MessageReceived(
        channel=1,
        method=BasicGetOk(delivery_tag=1, exchange="", routing_key="q", message_count=0),
        properties=BasicProperties(),
        body=b"x",
    )
    assert request.got_message(event, MessageReceived) is event
    assert request.got_message(BasicGetEmpty(), MessageReceived) is None
    with pytest.raises(AssertionError, match=r"basic.get-empty or a MessageReceived"):
        request.got_message(QueuePurgeOk(message_count=1), MessageReceived)


def test_report_dropped(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("amqp_test_requests")
    with caplog.at_level(logging.INFO, logger="amqp_test_requests"):
        request.report_dropped(logger, "t0", 0, no_ack=True, channel=1)
        request.report_dropped(logger, "t1", 2, no_ack=True, channel=1)
        request.report_dropped(logger, "t2", 3, no_ack=False, channel=4)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "consumer t1 stopped with 2 no-ack deliveries not handed out; they are lost",
        ),
        (
            logging.INFO,
            (
                "consumer t2 stopped with 3 deliveries not handed out; they stay unacknowledged "
                "and are redelivered when channel 4 closes"
            ),
        ),
    ]


def test_publisher_failures_are_counted_by_kind() -> None:
    counts = PublisherCounts(10)
    message = Message(body=b"x", properties=BasicProperties(), exchange="", routing_key="q")
    nacked = PublishNackedError(1)
    returned = MessageReturnedError(2, 312, "NO_ROUTE", message)
    lost = PublishOutcomeUnknownError(3, ConnectionLostError("gone"))
    for _ in range(4):
        counts._count_published()
    for outcome in (nacked, returned, lost, None):
        counts._count_settled(outcome)
    assert (counts.failed, counts.nacked, counts.returned, counts.unknown) == (3, 1, 1, 1)
    assert counts._failures == [nacked, returned, lost]
    assert (counts.published, counts.confirmed, counts.in_flight) == (4, 1, 0)
    assert counts.take_failures() == [nacked, returned, lost]
    assert counts.take_failures() == []
    with pytest.raises(ValueError, match="window"):
        PublisherCounts(0)


def test_request_called_like_its_channel_method() -> None:
    assert request.queue_declare() == QueueDeclare()
    assert request.queue_delete("q", if_empty=True) == QueueDelete(queue="q", if_empty=True)
    with pytest.raises(TypeError, match=r"takes 1 positional arguments, 2 given"):
        request.queue_purge("q", "r")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'durable'"):
        request.queue_purge("q", durable=True)
    with pytest.raises(TypeError, match=r"multiple values for argument 'queue'"):
        request.queue_purge("q", queue="r")
    with pytest.raises(TypeError, match=r"missing required argument 'queue'"):
        request.queue_purge()


def test_requests_table() -> None:
    assert len(request.REQUESTS) == len({r.name for r in request.REQUESTS}) == 21
    for entry in request.REQUESTS:
        assert getattr(request, entry.name) is entry
        fields = {name for name, _ in entry.method.FIELDS}
        assert {param.target for param in entry.params} <= fields
    assert request.exchange_declare.params[1].target == "type"
    assert request.queue_declare.params[0].required is False
    assert request.queue_purge.params[0].required is True
    assert request.basic_ack.expects_reply is False
    assert request.confirm_select.expects_reply is True
    # 0-9's basic.recover (60, 100) has no recover-ok; 0-9-1's and RabbitMQ's 0-8 (110) have
    assert request.basic_recover.no_reply_in == (ProtocolVersion.AMQP_0_9,)
    assert [r.name for r in request.REQUESTS if r.no_reply_in] == ["basic_recover"]
    assert request.basic_ack.no_reply_in == ()
    assert (AMQP_0_9_1.has_reply("basic.recover"), AMQP_0_9.has_reply("basic.recover")) == (
        True,
        False,
    )
    assert AMQP_0_8.has_reply("basic.recover") is True
    assert AMQP_0_9.has_reply("confirm.select") is False  # no such method in 0-9
    assert request.tx_commit.doc_for("amqp_blocking") == "Commit the current transaction."
    assert request.tx_rollback.doc_for("amqp_blocking") == "Roll the current transaction back."
