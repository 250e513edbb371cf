"""Routing, expiry, length limits and dead-lettering in the broker, without sockets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from amqp_broker import topic_matches
from amqp_sansio import (
    BasicCancel,
    BasicConsume,
    BasicNack,
    BasicProperties,
    BasicReject,
    ChannelClosed,
    ExchangeBind,
    ExchangeDeclare,
    QueueBind,
    QueueDeclare,
)

from .test_session import WALL_CLOCK, Net, bodies, deliveries, open_client, tags

if TYPE_CHECKING:
    from amqp_sansio import FieldTable


@pytest.fixture
def net() -> Net:
    return Net()


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("a.b.c", "a.b.c", True),
        ("a.b.c", "a.b", False),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.c", False),
        ("a.*", "a.b.c", False),
        ("*", "a", True),
        ("*", "", False),  # the empty key has no words (checked against RabbitMQ 3.10)
        ("*", "a.b", False),
        ("#", "", True),
        ("#", "a.b.c", True),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("a.#", "b.a", False),
        ("#.c", "a.b.c", True),
        ("#.c", "c", True),
        ("#.c", "a.b.c.d", False),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.x.y.c", True),
        ("a.#.c", "a.x.y.d", False),
        ("#.#", "a.b", True),
        ("*.#", "", False),
        ("*.#", "a", True),
        ("#.*", "a.b.c", True),
        ("a.*.#", "a", False),
        ("a.*.#", "a.b", True),
        ("#.b.#", "a.b.c", True),
        ("#.b.#", "b", True),
        ("#.b.#", "a.c", False),
        ("", "", True),
        ("", "a", False),
        ("a..b", "a..b", True),
        ("a.*", "a.", True),  # "a." has an empty second word
    ],
)
def test_topic_wildcards(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def route(
    net: Net,
    exchange: str,
    kind: str,
    bindings: dict[str, tuple[str, FieldTable]],
    routing_key: str,
    headers: FieldTable | None = None,
) -> set[str]:
    """Declare *exchange*, bind one queue per entry, publish once; the queues that got it."""
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ExchangeDeclare(exchange=exchange, type=kind))
    for queue, (key, arguments) in bindings.items():
        client.declare(ch, queue)
        client.reply(
            ch, QueueBind(queue=queue, exchange=exchange, routing_key=key, arguments=arguments)
        )
    client.publish(
        ch,
        b"m",
        exchange=exchange,
        routing_key=routing_key,
        properties=BasicProperties(headers=headers),
    )
    return {queue for queue in bindings if client.drain(ch, queue)}


def test_direct_exchange_routes_by_exact_key(net: Net) -> None:
    got = route(net, "d", "direct", {"q1": ("k", {}), "q2": ("k", {}), "q3": ("other", {})}, "k")
    assert got == {"q1", "q2"}


def test_fanout_exchange_ignores_the_key(net: Net) -> None:
    got = route(net, "f", "fanout", {"q1": ("a", {}), "q2": ("b", {})}, "zzz")
    assert got == {"q1", "q2"}


def test_topic_exchange(net: Net) -> None:
    bindings: dict[str, tuple[str, FieldTable]] = {
        "all": ("#", {}),
        "eu": ("*.eu.*", {}),
        "orders": ("orders.#", {}),
        "none": ("shipping.*", {}),
    }
    assert route(net, "t", "topic", bindings, "orders.eu.created") == {"all", "eu", "orders"}


@pytest.mark.parametrize(
    ("arguments", "headers", "matches"),
    [
        ({"x-match": "all", "a": 1, "b": "two"}, {"a": 1, "b": "two", "c": 3}, True),
        ({"x-match": "all", "a": 1, "b": "two"}, {"a": 1}, False),
        ({"a": 1, "b": "two"}, {"a": 1, "b": "three"}, False),  # all is the default
        ({"x-match": "any", "a": 1, "b": "two"}, {"b": "two"}, True),
        ({"x-match": "any", "a": 1, "b": "two"}, {"c": 1}, False),
        ({"x-match": "any", "a": 1}, None, False),
        ({"x-match": "all", "a": None}, {"a": "anything"}, True),  # void: present is enough
        ({"x-match": "all", "a": True}, {"a": 1}, False),  # bool is not an int
        ({"x-match": "all", "x-tag": "v", "a": 1}, {"a": 1}, True),  # x- args ignored
        ({"x-match": "all-with-x", "x-tag": "v"}, {"a": 1}, False),
        ({"x-match": "all-with-x", "x-tag": "v"}, {"x-tag": "v"}, True),
        ({"x-match": "any-with-x", "x-tag": "v", "a": 2}, {"x-tag": "v"}, True),
    ],
)
def test_headers_exchange(
    net: Net, arguments: FieldTable, headers: FieldTable | None, matches: bool
) -> None:
    got = route(net, "h", "headers", {"q": ("", arguments)}, "ignored", headers)
    assert got == ({"q"} if matches else set())


def test_predeclared_exchanges(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    for name, kind in (
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ):
        client.reply(ch, ExchangeDeclare(exchange=name, type=kind, durable=True))
        client.reply(ch, ExchangeDeclare(exchange=name, passive=True))


def test_exchange_to_exchange_bindings_are_loop_safe(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ExchangeDeclare(exchange="x1", type="fanout"))
    client.reply(ch, ExchangeDeclare(exchange="x2", type="topic"))
    client.reply(ch, ExchangeBind(destination="x2", source="x1"))
    client.reply(ch, ExchangeBind(destination="x1", source="x2", routing_key="#"))  # a cycle
    client.declare(ch, "q")
    client.reply(ch, QueueBind(queue="q", exchange="x2", routing_key="a.*"))
    client.reply(ch, QueueBind(queue="q", exchange="x1"))  # two paths to the same queue
    client.publish(ch, b"once", exchange="x1", routing_key="a.b")
    client.publish(ch, b"via-x2", exchange="x2", routing_key="a.c")
    assert client.drain(ch, "q") == [b"once", b"via-x2"]
    client.call(ch, ExchangeBind(destination="x1", source="missing"))
    assert client.closed().reply_text == "NOT_FOUND - no exchange 'missing' in vhost '/'"


def test_alternate_exchange_takes_unroutable_messages(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ExchangeDeclare(exchange="ae", type="fanout"))
    client.reply(
        ch,
        ExchangeDeclare(exchange="main", type="direct", arguments={"alternate-exchange": "ae"}),
    )
    client.declare(ch, "routed")
    client.declare(ch, "unrouted")
    client.reply(ch, QueueBind(queue="routed", exchange="main", routing_key="k"))
    client.reply(ch, QueueBind(queue="unrouted", exchange="ae"))
    client.publish(ch, b"1", exchange="main", routing_key="k")
    client.publish(ch, b"2", exchange="main", routing_key="other")
    assert (client.drain(ch, "routed"), client.drain(ch, "unrouted")) == ([b"1"], [b"2"])


# --- TTL ------------------------------------------------------------------------------------


def test_queue_ttl_expires_on_read(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "ttl", arguments={"x-message-ttl": 1000})
    client.publish(ch, b"old", routing_key="ttl")
    net.clock.now += 0.5
    client.publish(ch, b"young", routing_key="ttl")
    net.clock.now += 0.6  # "old" is 1.1 s old, "young" 0.6 s
    assert client.drain(ch, "ttl") == [b"young"]


def test_per_message_expiration_and_the_lower_ttl_wins(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "ttl", arguments={"x-message-ttl": 10_000})
    client.publish(ch, b"short", routing_key="ttl", properties=BasicProperties(expiration="100"))
    client.publish(ch, b"long", routing_key="ttl")
    net.clock.now += 0.2
    assert client.drain(ch, "ttl") == [b"long"]
    client.publish(ch, b"x", routing_key="ttl", properties=BasicProperties(expiration="soon"))
    assert (
        client.closed().reply_text == "PRECONDITION_FAILED - invalid expiration 'soon': no_integer"
    )


def test_ttl_zero_is_delivered_only_to_a_waiting_consumer(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "now", arguments={"x-message-ttl": 0})
    client.publish(ch, b"lost", routing_key="now")
    client.consume(ch, "now", no_ack=True)
    client.publish(ch, b"taken", routing_key="now")
    assert bodies(client.take()) == [b"taken"]


def test_expired_messages_are_dead_lettered_by_the_timer(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "dead")
    client.declare(
        ch,
        "delay",
        arguments={
            "x-message-ttl": 5000,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "dead",
        },
    )
    client.consume(ch, "dead", no_ack=True)
    client.publish(ch, b"later", routing_key="delay", properties=BasicProperties(expiration="9000"))
    assert net.broker.next_deadline() == pytest.approx(net.clock.now + 5)
    net.advance(4.9)
    assert bodies(client.take()) == []
    net.advance(0.2)  # nobody read the queue: the timer expired it
    (message,) = deliveries(client.take())
    assert message.body == b"later"
    assert isinstance(message.properties, BasicProperties)
    assert message.properties.expiration is None  # removed, like RabbitMQ
    headers = message.properties.headers
    assert headers is not None
    deaths = headers["x-death"]
    assert isinstance(deaths, list)
    (death,) = deaths
    assert death == {
        "count": 1,
        "reason": "expired",
        "queue": "delay",
        "time": datetime.fromtimestamp(WALL_CLOCK, tz=UTC),
        "exchange": "",
        "routing-keys": ["delay"],
        "original-expiration": "9000",
    }
    assert headers["x-first-death-reason"] == "expired"
    assert net.broker.next_deadline() is None


# --- length limits --------------------------------------------------------------------------


def test_max_length_drop_head_dead_letters_the_oldest(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "overflow")
    client.declare(
        ch,
        "bounded",
        arguments={
            "x-max-length": 2,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "overflow",
        },
    )
    for index in range(5):
        client.publish(ch, b"%d" % index, routing_key="bounded")
    assert client.drain(ch, "bounded") == [b"3", b"4"]
    assert client.drain(ch, "overflow") == [b"0", b"1", b"2"]


def test_max_length_bytes(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "bytes", arguments={"x-max-length-bytes": 10})
    for body in (b"12345", b"67890", b"abc"):
        client.publish(ch, body, routing_key="bytes")
    assert client.drain(ch, "bytes") == [b"67890", b"abc"]


def test_reject_publish_dlx_dead_letters_the_refused_message(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "refused")
    client.declare(
        ch,
        "full",
        arguments={
            "x-max-length": 1,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "refused",
        },
    )
    client.publish(ch, b"kept", routing_key="full")
    client.publish(ch, b"refused", routing_key="full")
    assert client.drain(ch, "full") == [b"kept"]
    assert client.drain(ch, "refused") == [b"refused"]


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({"x-message-ttl": -1}, "{value_negative,-1}"),
        ({"x-message-ttl": "abc"}, '"expected integer, got longstr"'),
        ({"x-max-length": 1.5}, '"expected integer, got double"'),
        ({"x-overflow": "explode"}, "invalid_overflow"),
    ],
)
def test_invalid_queue_arguments_are_406(net: Net, arguments: FieldTable, text: str) -> None:
    client = open_client(net)
    client.call(client.channel(), QueueDeclare(queue="bad", arguments=arguments))
    closed = client.closed()
    assert isinstance(closed, ChannelClosed)
    (name,) = arguments
    assert closed.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{name}' for queue 'bad' in vhost '/': {text}"
    )


# --- dead-lettering -------------------------------------------------------------------------


def test_rejected_messages_carry_x_death_and_count_up(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ExchangeDeclare(exchange="dlx", type="fanout"))
    client.declare(ch, "work", arguments={"x-dead-letter-exchange": "dlx"})
    client.declare(ch, "graveyard")
    client.reply(ch, QueueBind(queue="graveyard", exchange="dlx"))
    client.publish(ch, b"bad", routing_key="work")
    client.consume(ch, "work")
    client.call(ch, BasicReject(delivery_tag=tags(client.take())[0], requeue=False))
    first = client.get(ch, "graveyard")
    assert first is not None
    assert isinstance(first.properties, BasicProperties)
    assert first.method.routing_key == "work"  # type: ignore[attr-defined]
    headers = first.properties.headers
    assert headers is not None
    deaths = headers["x-death"]
    assert isinstance(deaths, list)
    (death,) = deaths
    assert isinstance(death, dict)
    assert (death["reason"], death["queue"], death["count"], death["exchange"]) == (
        "rejected",
        "work",
        1,
        "",
    )
    # back into "work" with its x-death, rejected again: the same record counts 2
    client.publish(ch, b"bad", routing_key="work", properties=first.properties)
    events = client.take()
    client.call(ch, BasicNack(delivery_tag=tags(events)[0], requeue=False))
    second = client.get(ch, "graveyard")
    assert second is not None
    assert isinstance(second.properties, BasicProperties)
    assert second.properties.headers is not None
    deaths = second.properties.headers["x-death"]
    assert isinstance(deaths, list)
    assert len(deaths) == 1
    assert isinstance(deaths[0], dict)
    assert deaths[0]["count"] == 2


def test_automatic_dead_letter_cycles_are_dropped(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    # a expires into b, b expires into a: without a rejection the message dies after one lap
    client.declare(
        ch,
        "a",
        arguments={
            "x-message-ttl": 10,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "b",
        },
    )
    client.declare(
        ch,
        "b",
        arguments={
            "x-message-ttl": 10,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "a",
        },
    )
    client.publish(ch, b"loop", routing_key="a")
    for _ in range(4):
        net.advance(0.02)
    assert client.drain(ch, "a") == []
    assert client.drain(ch, "b") == []


def test_consumer_on_missing_queue_is_404(net: Net) -> None:
    client = open_client(net)
    client.call(client.channel(), BasicConsume(queue="ghost"))
    assert client.closed().reply_text == "NOT_FOUND - no queue 'ghost' in vhost '/'"


def test_unused_queue_expires(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    queues = net.broker.vhosts["/"].queues
    client.declare(ch, "short-lived", arguments={"x-expires": 1000})
    net.advance(0.6)
    client.declare(ch, "short-lived", arguments={"x-expires": 1000})  # a use: starts again
    net.advance(0.6)
    assert "short-lived" in queues
    tag = client.consume(ch, "short-lived")
    net.advance(5)  # a consumer keeps it
    assert "short-lived" in queues
    client.call(ch, BasicCancel(consumer_tag=tag))
    net.advance(0.9)
    assert "short-lived" in queues
    net.advance(0.2)
    assert "short-lived" not in queues
    assert net.broker.next_deadline() is None
