"""The broker without sockets, for issue 15's behaviours: priorities and requeue positions, the
memory accounting and flow control, the output bound, coalesced confirms, the consumer timeout,
users and permissions, vhost connection limits, streams and shutdown. Every assertion is on
what a client core received (and, for memory, on the broker's own count)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from amqp_broker import BrokerOptions, User
from amqp_broker._permissions import Permission
from amqp_broker._queues import FifoMessages, PriorityMessages
from amqp_sansio import (
    BasicAck,
    BasicConsume,
    BasicDeliver,
    BasicGet,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicRecover,
    BlockedByPeer,
    ChannelClosed,
    ConfirmSelect,
    ConnectionClosed,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    Int64,
    MessageReceived,
    PublishConfirmed,
    PublishNacked,
    QueueBind,
    QueueDeclare,
    QueueDelete,
    QueuePurge,
    QueuePurgeOk,
    TxCommit,
    TxRollback,
    TxSelect,
    UnblockedByPeer,
)

from .test_session import Client, Net, bodies, deliveries, open_client

if TYPE_CHECKING:
    from amqp_sansio import FieldTable


def consume_from(client: Client, channel: int, queue: str, arguments: FieldTable) -> None:
    """basic.consume with arguments (the harness's consume takes none)."""
    client.core.send_method(channel, BasicConsume(queue=queue, arguments=arguments))
    client.net.pump()


def offsets_of(events: list[MessageReceived]) -> list[object]:
    found: list[object] = []
    for event in events:
        assert isinstance(event.properties, BasicProperties)
        found.append((event.properties.headers or {}).get("x-stream-offset"))
    return found


def publish_many(client: Client, channel: int, queue: str, count: int, body: bytes) -> None:
    for n in range(count):
        client.core.publish(
            channel, BasicPublish(routing_key=queue), BasicProperties(), body + b"%d" % n
        )
    client.net.pump()


# --- priorities and requeue positions -------------------------------------------------------


def test_priority_store_orders_by_priority_then_arrival() -> None:
    from amqp_broker._message import Message
    from amqp_broker._queues import Entry

    def entry(seq: int, priority: int | None) -> Entry:
        props = BasicProperties(priority=priority)
        return Entry(Message("", "q", props, b"%d" % seq), seq, None)

    store = PriorityMessages(5)
    entries = [entry(1, 1), entry(2, 9), entry(3, None), entry(4, 5), entry(5, 1)]
    for e in entries:
        store.append(e)
    assert [e.seq for e in store] == [2, 4, 1, 5, 3]
    assert store.head().seq == 2
    taken = [store.popleft(), store.popleft(), store.popleft()]
    assert [e.seq for e in taken] == [2, 4, 1]
    store.put_back([taken[2], taken[0]])  # back where they were
    assert [e.seq for e in store] == [2, 1, 5, 3]
    assert len(store) == 4
    store.clear()
    assert not store


def test_fifo_store_puts_back_in_place() -> None:
    from amqp_broker._message import Message
    from amqp_broker._queues import Entry

    store = FifoMessages()
    entries = [Entry(Message("", "q", BasicProperties(), b"x"), seq, None) for seq in range(6)]
    for e in entries:
        store.append(e)
    taken = [store.popleft() for _ in range(4)]
    for e in taken:  # one at a time, in turn: each goes back to its own place
        store.put_back([e])
    assert [e.seq for e in store] == [0, 1, 2, 3, 4, 5]
    taken = [store.popleft() for _ in range(4)]
    store.put_back([taken[2]])
    store.put_back([taken[0], taken[3]])
    store.put_back([taken[1]])
    assert [e.seq for e in store] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (256, "{max_value_exceeded,256}"),
        (-1, "{value_negative,-1}"),
        ("x", '"expected integer, got longstr"'),
        (1.5, '"expected integer, got double"'),
        (True, '"expected integer, got bool"'),
    ],
)
def test_bad_max_priority_is_406(value: object, reason: str) -> None:
    net = Net()
    client = open_client(net)
    arguments: FieldTable = {"x-max-priority": value}  # type: ignore[dict-item]
    client.call(client.channel(), QueueDeclare(queue="pq", arguments=arguments))
    assert client.closed().reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'pq' in vhost '/': {reason}"
    )


def test_inequivalent_priority_texts_as_rabbitmq() -> None:
    net = Net()
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "pq", arguments={"x-max-priority": 5})
    client.call(ch, QueueDeclare(queue="pq", arguments={"x-max-priority": 6}))
    assert client.closed().reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue 'pq' in vhost '/': "
        "received '6' but current is '5'"
    )
    ch = client.channel()
    client.call(ch, QueueDeclare(queue="pq"))
    assert client.closed().reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-priority' for queue 'pq' in vhost '/': "
        "received none but current is the value '5' of type 'byte'"
    )
    ch = client.channel()
    assert client.declare(ch, "pq", arguments={"x-max-priority": Int64(5)}) == "pq"


def test_priority_queue_with_ttl_expires_every_priority_head() -> None:
    net = Net()
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "pq", arguments={"x-max-priority": 3, "x-message-ttl": 1000})
    for priority in (0, 3):
        props = BasicProperties(priority=priority)
        client.publish(ch, b"p%d" % priority, routing_key="pq", properties=props)
    net.advance(2)
    assert client.drain(ch, "pq") == []
    assert net.broker.memory.held == 0


def test_channel_close_requeues_in_place_among_later_messages() -> None:
    net = Net()
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    publish_many(client, ch, "q", 3, b"m")
    other = client.channel()
    client.reply(other, BasicQos(prefetch_count=2))
    client.consume(other, "q")
    assert bodies(client.take()) == [b"m0", b"m1"]
    client.publish(ch, b"late", routing_key="q")
    client.core.close_channel(other)
    net.pump()
    got = [client.get(ch, "q") for _ in range(4)]
    assert [(m.body, m.method.redelivered) for m in got if m is not None] == [  # type: ignore[attr-defined]
        (b"m0", True),
        (b"m1", True),
        (b"m2", False),
        (b"late", False),
    ]


# --- memory accounting and flow control -----------------------------------------------------


def test_held_octets_return_to_zero_whatever_happens_to_the_messages() -> None:
    net = Net()
    client = open_client(net)
    memory = net.broker.memory
    ch = client.channel()
    client.declare(ch, "dlx-target")
    client.reply(ch, ExchangeDeclare(exchange="dlx", type="fanout"))
    client.reply(ch, QueueBind(queue="dlx-target", exchange="dlx"))
    client.declare(ch, "q", arguments={"x-dead-letter-exchange": "dlx", "x-max-length": 5})
    props = BasicProperties(headers={"k": "v"})
    client.publish(ch, b"x" * 100, routing_key="q", properties=props)
    assert memory.held > 100
    for _ in range(7):  # two over the limit: dead-lettered
        client.publish(ch, b"y" * 10, routing_key="q")
    assert client.get(ch, "q", no_ack=False) is not None  # unacked: still held
    client.call(ch, BasicNack(delivery_tag=1, requeue=False))  # dead-lettered
    consumer = client.channel()
    client.consume(consumer, "q", no_ack=True)
    client.take()
    client.reply(ch, QueuePurge(queue="dlx-target"))
    assert memory.held == 0
    tx = client.channel()
    client.reply(tx, TxSelect())
    client.publish(tx, b"t", routing_key="dlx-target")
    client.reply(tx, TxCommit())
    got = client.get(tx, "dlx-target", no_ack=False)
    assert got is not None
    client.call(tx, BasicAck(delivery_tag=1))
    client.reply(tx, TxRollback())  # the ack is undone: held again
    assert memory.held > 0
    client.call(tx, BasicRecover(requeue=True))
    client.reply(ch, QueueDelete(queue="dlx-target"))
    assert memory.held == 0


def test_publishers_are_blocked_above_the_watermark_and_unblocked_below() -> None:
    net = Net(options=BrokerOptions(memory_high_watermark_bytes=20_000), transport=True)
    publisher = open_client(net)
    bystander = open_client(net)
    ch = publisher.channel()
    publisher.declare(ch, "q")
    bch = bystander.channel()
    bystander.declare(bch, "own")
    bystander.publish(bch, b"mine", routing_key="own")
    for n in range(40):  # 40 x 1 KiB: over the watermark about half way
        publisher.core.publish(
            ch, BasicPublish(routing_key="q"), BasicProperties(), b"%04d" % n + b"x" * 1020
        )
    net.pump()
    blocked = [e for e in publisher.take() if isinstance(e, BlockedByPeer)]
    assert blocked == [BlockedByPeer(reason="low on memory")]
    assert publisher.transport.paused
    assert net.broker.memory.alarmed
    queued = net.broker.vhosts["/"].queues["q"].message_count
    assert 10 < queued < 40  # the rest waits unread
    # A connection that does not publish keeps working.
    assert bystander.drain(bch, "own") == [b"mine"]
    assert not bystander.transport.paused
    purged = bystander.reply(bch, QueuePurge(queue="q"))
    assert purged == QueuePurgeOk(message_count=queued)
    assert [e for e in publisher.take() if isinstance(e, UnblockedByPeer)] == [UnblockedByPeer()]
    # Unblocked, the publisher is read again: the rest comes in (and blocks it again). Nothing
    # is lost.
    total = queued
    while publisher.transport.paused or net.broker.vhosts["/"].queues["q"].message_count:
        reply = bystander.reply(bch, QueuePurge(queue="q"))
        assert isinstance(reply, QueuePurgeOk)
        total += reply.message_count
        net.pump()
    assert total == 40


def test_a_client_without_the_capability_is_blocked_silently() -> None:
    net = Net(options=BrokerOptions(memory_high_watermark_bytes=1000), transport=True)
    client = net.connect(cancel_notify=False)  # capabilities without connection.blocked
    net.pump()
    client.take()
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"x" * 2000, routing_key="q")
    assert client.transport.paused
    assert not [e for e in client.history if isinstance(e, BlockedByPeer)]


def test_a_consumer_that_does_not_read_is_sent_no_more_than_the_outbound_limit() -> None:
    net = Net(options=BrokerOptions(outbound_limit=10_000), transport=True)
    producer = open_client(net)
    slow = open_client(net)
    fast = open_client(net)
    ch = producer.channel()
    producer.declare(ch, "q")
    sch, fch = slow.channel(), fast.channel()
    slow.consume(sch, "q", no_ack=True)
    slow.reading = False
    publish_many(producer, ch, "q", 10, b"s" * 3000)  # only the slow consumer so far
    assert 10_000 <= slow.server.outbound_size < 13_100  # stopped at the limit
    waiting = net.broker.vhosts["/"].queues["q"].message_count
    assert waiting == 6
    fast.consume(fch, "q", no_ack=True)
    assert len(deliveries(fast.take())) == waiting  # the rest went to the other consumer
    slow.reading = True
    net.pump()
    assert len(deliveries(slow.take())) == 4


# --- publisher confirms ---------------------------------------------------------------------


def test_confirms_are_coalesced_into_one_multiple_ack() -> None:
    net = Net(coalesce=True)
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.reply(ch, ConfirmSelect())
    publish_many(client, ch, "q", 50, b"m")
    confirms = [e for e in client.take() if isinstance(e, PublishConfirmed)]
    assert confirms == [PublishConfirmed(channel=ch, publish_numbers=tuple(range(1, 51)))]
    client.publish(ch, b"one", routing_key="q")
    assert [e for e in client.take() if isinstance(e, PublishConfirmed)] == [
        PublishConfirmed(channel=ch, publish_numbers=(51,))
    ]


def test_coalesced_acks_stop_below_the_first_nack() -> None:
    net = Net(coalesce=True)
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    client.reply(ch, ConfirmSelect())
    publish_many(client, ch, "q", 5, b"m")
    outcomes = [
        (type(e).__name__, e.publish_numbers)
        for e in client.take()
        if isinstance(e, PublishConfirmed | PublishNacked)
    ]
    assert outcomes == [
        ("PublishConfirmed", (1, 2)),
        ("PublishNacked", (3,)),
        ("PublishNacked", (4,)),
        ("PublishNacked", (5,)),
    ]


def test_coalescing_as_rabbitmq_coalesce_and_send() -> None:
    from amqp_broker._session import _coalesced

    assert _coalesced([1, 2, 3], []) == [(3, True)]
    assert _coalesced([1, 3, 5], [2]) == [(1, True), (3, False), (5, False)]
    assert _coalesced([2, 4], [1, 3]) == [(2, False), (4, False)]
    assert _coalesced([4, 5], [1, 2]) == [(4, False), (5, False)]


# --- consumer timeout -----------------------------------------------------------------------


def test_a_delivery_left_unacked_too_long_closes_its_channel() -> None:
    net = Net(options=BrokerOptions(consumer_timeout=3.0))
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"m", routing_key="q")
    consumer = client.channel()
    client.consume(consumer, "q")
    assert bodies(client.take()) == [b"m"]
    net.advance(2.0)
    assert not [e for e in client.take() if isinstance(e, ChannelClosed)]
    net.advance(1.5)
    closed = client.closed()
    assert isinstance(closed, ChannelClosed)
    assert (closed.channel, closed.reply_code, closed.class_id, closed.method_id) == (
        consumer,
        406,
        0,
        0,
    )
    assert closed.reply_text == (
        f"PRECONDITION_FAILED - delivery acknowledgement on channel {consumer} timed out. "
        "Timeout value used: 3000 ms. This timeout value can be configured, see consumers "
        "doc guide to learn more"
    )
    got = client.get(ch, "q")  # requeued
    assert got is not None
    assert got.method.redelivered  # type: ignore[attr-defined]


def test_consumer_timeout_applies_to_basic_get_and_spares_acked_channels() -> None:
    net = Net(options=BrokerOptions(consumer_timeout=3.0))
    client = open_client(net)
    ch, acking = client.channel(), client.channel()
    client.declare(ch, "q")
    publish_many(client, ch, "q", 2, b"m")
    assert client.get(ch, "q", no_ack=False) is not None
    assert client.get(acking, "q", no_ack=False) is not None
    net.advance(2.0)
    client.call(acking, BasicAck(delivery_tag=1))
    net.advance(2.0)
    closed = [e for e in client.history if isinstance(e, ChannelClosed)]
    assert [e.channel for e in closed] == [ch]
    assert net.broker.next_deadline() is None


# --- users, permissions, vhost limits -------------------------------------------------------


RESTRICTED: dict[str, str | User] = {
    "guest": "guest",
    "limited": User("pw", {"/": Permission("^cfg-", "^w-|^cfg-", "^r-|^cfg-")}),
}


def refused(client: Client, kind: str, name: str) -> str:
    closed = client.closed()
    assert isinstance(closed, ChannelClosed)
    assert closed.reply_code == 403
    return closed.reply_text


def test_permissions_refuse_with_rabbitmqs_texts() -> None:
    net = Net(vhosts=("/", "other"), users=RESTRICTED)
    client = open_client(net, username="limited", password="pw")

    def check(method: object, kind: str, name: str) -> None:
        client.call(client.channel(), method)  # type: ignore[arg-type]
        closed = client.closed()
        assert isinstance(closed, ChannelClosed), closed
        assert (closed.reply_code, closed.reply_text) == (
            403,
            f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user 'limited'",
        )

    check(QueueDeclare(queue="x-q"), "queue", "x-q")
    check(ExchangeDeclare(exchange="x-x", type="direct"), "exchange", "x-x")
    check(QueueDelete(queue="r-q"), "queue", "r-q")
    check(ExchangeDelete(exchange="x-x"), "exchange", "x-x")
    ch = client.channel()
    client.declare(ch, "cfg-q")
    client.reply(ch, ExchangeDeclare(exchange="cfg-x", type="direct"))
    client.reply(ch, QueueBind(queue="cfg-q", exchange="cfg-x"))  # write on q, read on x
    check(QueueBind(queue="cfg-q", exchange="amq.direct"), "exchange", "amq.direct")
    check(ExchangeBind(destination="amq.fanout", source="cfg-x"), "exchange", "amq.fanout")
    check(BasicGet(queue="x-q2"), "queue", "x-q2")
    check(BasicConsume(queue="x-q2"), "queue", "x-q2")
    check(QueuePurge(queue="x-q2"), "queue", "x-q2")
    client.call(client.channel(), QueueDeclare(queue="x-q2", passive=True))  # no check: 404
    assert client.closed().reply_code == 404
    client.publish(ch, b"m", routing_key="cfg-q")  # to the default exchange
    assert refused(client, "exchange", "amq.default") == (
        "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'limited'"
    )
    ch = client.channel()
    client.publish(ch, b"m", exchange="cfg-x")  # write on cfg-x is allowed
    assert client.get(ch, "cfg-q") is not None
    client.reply(ch, QueueDelete(queue="cfg-q"))


def test_a_user_without_permissions_on_a_vhost_is_refused_at_open() -> None:
    net = Net(vhosts=("/", "other"), users=RESTRICTED)
    client = net.connect(username="limited", password="pw", vhost="other")
    net.pump()
    closed = client.closed()
    assert (closed.reply_code, closed.reply_text) == (
        530,
        "NOT_ALLOWED - access to vhost 'other' refused for user 'limited'",
    )
    assert open_client(net, vhost="other").session.username == "guest"  # everything everywhere


def test_permissions_set_and_cleared_at_run_time() -> None:
    net = Net(vhosts=("/", "other"), users={"guest": "guest"})
    net.broker.add_user("bob", "pw")
    assert open_client(net, username="bob", password="pw", vhost="other").session.username
    net.broker.set_permissions("bob", "/", configure="", write=".*", read=".*")
    client = net.connect(username="bob", password="pw", vhost="other")
    net.pump()
    assert client.closed().reply_code == 530
    client = open_client(net, username="bob", password="pw")
    client.call(client.channel(), QueueDeclare(queue="anything"))
    assert client.closed().reply_code == 403  # the empty pattern allows nothing
    net.broker.clear_permissions("bob", "/")
    client = net.connect(username="bob", password="pw")
    net.pump()
    assert client.closed().reply_code == 530
    net.broker.delete_user("bob")
    client = net.connect(username="bob", password="pw")
    net.pump()
    assert client.closed().reply_code == 403


def test_vhost_connection_limit_is_530_at_open() -> None:
    net = Net(vhosts=("/", "lim"), options=BrokerOptions(vhost_max_connections={"lim": 2}))
    first, _second = open_client(net, vhost="lim"), open_client(net, vhost="lim")
    third = net.connect(vhost="lim")
    net.pump()
    closed = third.closed()
    assert (closed.reply_code, closed.reply_text, closed.class_id, closed.method_id) == (
        530,
        (
            "NOT_ALLOWED - access to vhost 'lim' refused for user 'guest': connection limit "
            "(2) is reached"
        ),
        10,
        40,
    )
    assert open_client(net).session.username == "guest"  # other vhosts are not limited
    first.core.close()
    net.pump()
    assert open_client(net, vhost="lim").core.state.value == "OPEN"
    net.broker.set_vhost_limits("lim", max_connections=None)
    assert open_client(net, vhost="lim").core.state.value == "OPEN"


# --- streams --------------------------------------------------------------------------------


def test_stream_retention_drops_whole_old_segments() -> None:
    net = Net()
    client = open_client(net)
    ch = client.channel()
    arguments: FieldTable = {
        "x-queue-type": "stream",
        "x-max-length-bytes": 3000,
        "x-stream-max-segment-size-bytes": 1000,
    }
    client.declare(ch, "s", durable=True, arguments=arguments)
    for n in range(40):
        client.publish(ch, b"%02d" % n + b"x" * 98, routing_key="s")
    log = net.broker.vhosts["/"].queues["s"].log
    assert log is not None
    assert log.first_offset > 0
    assert log.held <= 3000 + 1000  # within the limit, plus the segment being written
    assert net.broker.memory.held == log.held
    client.reply(ch, BasicQos(prefetch_count=100))
    consume_from(client, ch, "s", {"x-stream-offset": "first"})
    got = deliveries(client.take())
    offsets = offsets_of(got)
    assert offsets[0] == log.first_offset + 1  # a segment starts with a record of its own
    gaps = sorted(set(range(log.first_offset, log.next_offset)) - set(offsets))
    assert gaps  # one at the start of every segment, as in RabbitMQ
    assert len(gaps) == len(log.segments)
    assert [bytes(e.body)[:2] for e in got] == [b"%02d" % n for n in range(40 - len(got), 40)]
    client.reply(ch, QueueDelete(queue="s"))
    assert net.broker.memory.held == 0


def test_stream_offsets_first_last_next_and_numbers() -> None:
    net = Net()
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "s", durable=True, arguments={"x-queue-type": "stream"})
    publish_many(client, ch, "s", 5, b"m")

    def read(spec: object) -> list[bytes]:
        consumer = client.channel()
        client.reply(consumer, BasicQos(prefetch_count=10))
        arguments: FieldTable = {} if spec is None else {"x-stream-offset": spec}  # type: ignore[dict-item]
        consume_from(client, consumer, "s", arguments)
        return bodies(client.take())

    assert read("first") == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert read("last") == [b"m4"]
    assert read("next") == []
    assert read(None) == []
    assert read(3) == [b"m3", b"m4"]
    assert read(Int64(-1)) == read("first")
    assert read(99) == []


def test_stream_credit_is_the_prefetch_and_acks_give_it_back() -> None:
    net = Net()
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "s", durable=True, arguments={"x-queue-type": "stream"})
    publish_many(client, ch, "s", 5, b"m")
    client.reply(ch, BasicQos(prefetch_count=2))
    consume_from(client, ch, "s", {"x-stream-offset": "first"})
    got = deliveries(client.take())
    assert [bytes(e.body) for e in got] == [b"m0", b"m1"]
    assert not any(e.method.redelivered for e in got)  # type: ignore[attr-defined]
    assert bodies(client.call(ch, BasicAck(delivery_tag=2, multiple=True))) == [b"m2", b"m3"]
    client.core.close_channel(ch)  # nothing is requeued: the stream keeps its messages
    net.pump()
    assert net.broker.vhosts["/"].queues["s"].message_count == 5


def test_stream_delivery_to_an_other_connection_carries_its_offset() -> None:
    net = Net()
    producer, consumer = open_client(net), open_client(net)
    pch, cch = producer.channel(), consumer.channel()
    producer.declare(pch, "s", durable=True, arguments={"x-queue-type": "stream"})
    consumer.reply(cch, BasicQos(prefetch_count=5))
    consumer.consume(cch, "s")
    consumer.take()
    producer.publish(pch, b"live", routing_key="s", properties=BasicProperties(headers={"a": 1}))
    [delivery] = deliveries(consumer.take())
    assert isinstance(delivery, MessageReceived)
    assert isinstance(delivery.method, BasicDeliver)
    assert isinstance(delivery.properties, BasicProperties)
    assert delivery.properties.headers == {"a": 1, "x-stream-offset": 0}


# --- shutdown -------------------------------------------------------------------------------


def test_shutdown_sends_320_connection_forced_and_releases_everything() -> None:
    net = Net()
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"m", routing_key="q")
    assert client.get(ch, "q", no_ack=False) is not None
    client.session.shutdown()
    net.pump()
    closed = client.closed()
    assert isinstance(closed, ConnectionClosed)
    assert (closed.reply_code, closed.reply_text, closed.class_id, closed.method_id) == (
        320,
        "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
        0,
        0,
    )
    assert net.broker.vhosts["/"].queues["q"].message_count == 1  # requeued at once


# --- options ----------------------------------------------------------------------------------


def test_options_from_the_command_line() -> None:
    from amqp_broker._cli import _options, parse_args

    args = parse_args(
        [
            *("--user", "app:pw", "--permissions", "app", "/", "^a", "^b", "^c"),
            *("--handshake-timeout", "2", "--max-connections", "7"),
            *("--vhost-max-connections", "/:3", "--channel-max", "9"),
            *("--memory-high-watermark-bytes", "1000", "--outbound-limit", "500"),
            *("--consumer-timeout", "60", "--close-timeout", "1"),
        ]
    )
    assert _options(args) == BrokerOptions(
        handshake_timeout=2.0,
        max_connections=7,
        vhost_max_connections={"/": 3},
        channel_max=9,
        memory_high_watermark_bytes=1000,
        outbound_limit=500,
        consumer_timeout=60.0,
        close_timeout=1.0,
    )
    assert args.permissions == [["app", "/", "^a", "^b", "^c"]]
    with pytest.raises(SystemExit):
        parse_args(["--permissions", "nobody", "/", ".*", ".*", ".*"])
    with pytest.raises(SystemExit):
        parse_args(["--tls-port", "5671"])


@pytest.mark.parametrize(
    "bad", [{"handshake_timeout": 0}, {"channel_max": 70000}, {"outbound_limit": -1}]
)
def test_options_are_checked(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        BrokerOptions(**bad)  # type: ignore[arg-type]
    assert BrokerOptions().watermark > 0  # a fraction of this machine's memory


def test_the_watermark_can_change_at_run_time() -> None:
    net = Net(transport=True)
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"x" * 1000, routing_key="q")
    memory = net.broker.memory
    memory.set_watermark(500)
    assert memory.alarmed
    client.publish(ch, b"y", routing_key="q")
    assert client.transport.paused
    memory.set_watermark(None)
    net.pump()
    assert not memory.alarmed
    assert not client.transport.paused
    assert [type(e) for e in client.history if isinstance(e, BlockedByPeer | UnblockedByPeer)] == [
        BlockedByPeer,
        UnblockedByPeer,
    ]
