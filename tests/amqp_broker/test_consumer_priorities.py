"""Consumer priorities (``x-priority`` on ``basic.consume``) side by side with RabbitMQ 3.10
(issue 29): the highest-priority consumer with room gets every message; lower ones get
messages only while the higher ones are at their prefetch; acks give the room back to the
higher one; a value that is not an integer is 406. One scenario runs against both brokers
(classic and quorum queues), and the embedded broker's answers are also pinned on their own.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final

import amqp_blocking
from amqp_sansio.client import ChannelClosedError

if TYPE_CHECKING:
    from amqp_sansio import FieldTable, FieldValue

#: Consumers of the prefetch scenario: name -> (x-priority or None, prefetch).
CONSUMERS: Final = {"high": (10, 2), "mid": (5, 2), "none": (None, 10)}


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _take(inbox: amqp_blocking.Inbox, count: int, names: dict[str, str]) -> list[tuple[str, bytes]]:
    """The next *count* deliveries as (consumer name, body), unacknowledged."""
    taken = []
    for _ in range(count):
        message = inbox.get(timeout=10)
        assert message is not None
        assert message.consumer_tag is not None
        taken.append((names[message.consumer_tag], message.body))
    return taken


def priorities(url: str, kind: str) -> dict[str, object]:
    """Where messages go among consumers of several priorities on a *kind* queue."""
    seen: dict[str, object] = {}
    with amqp_blocking.connect(url) as conn:
        admin = conn.channel()
        admin.confirm_select()

        # no prefetch: the higher consumer never runs out of room and gets all 6
        queue = _unique("prio")
        admin.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
        inbox = amqp_blocking.Inbox()
        names: dict[str, str] = {}
        channels = []
        for name, priority in (("low", 0), ("high", 10), ("none", None)):
            channel = conn.channel()
            channels.append(channel)
            arguments: FieldTable | None = None if priority is None else {"x-priority": priority}
            consumer = channel.basic_consume(queue, arguments=arguments, inbox=inbox)
            names[consumer.consumer_tag] = name
        for n in range(6):
            admin.basic_publish(b"%d" % n, routing_key=queue)
        seen["no prefetch"] = _take(inbox, 6, names)
        for channel in channels:
            channel.close()
        admin.queue_delete(queue)

        # prefetch: 2 to high, 2 to mid, the rest to the consumer without a priority; acks
        # give high its room back, and the next two go there
        queue = _unique("prio")
        admin.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
        inbox = amqp_blocking.Inbox()
        names = {}
        channels = []
        for name, (priority, prefetch) in CONSUMERS.items():
            channel = conn.channel()
            channels.append(channel)
            channel.basic_qos(prefetch_count=prefetch)
            arguments = None if priority is None else {"x-priority": priority}
            consumer = channel.basic_consume(queue, arguments=arguments, inbox=inbox)
            names[consumer.consumer_tag] = name
        for n in range(6):
            admin.basic_publish(b"%d" % n, routing_key=queue)
        first = sorted(_take(inbox, 6, names))
        # high acks its two and publishes the next two on the same channel: RabbitMQ's queue
        # then sees the acks first (from another channel the publishes may overtake them)
        high = channels[0]
        high.basic_ack(0, multiple=True)
        high.confirm_select()
        for n in range(6, 8):
            high.basic_publish(b"%d" % n, routing_key=queue)
        seen["prefetch"] = (first, _take(inbox, 2, names))
        for channel in channels:
            channel.close()
        admin.queue_delete(queue)
    return seen


def bad_priorities(url: str) -> dict[str, str]:
    """The answers to ``x-priority`` values of every kind."""
    answers: dict[str, str] = {}
    values: dict[str, FieldValue] = {
        "str": "abc",
        "float": 1.5,
        "bool": True,
        "negative": -5,
        "long": 2**40,
    }
    with amqp_blocking.connect(url) as conn:
        admin = conn.channel()
        for label, value in values.items():
            queue = _unique("prio")
            admin.queue_declare(queue)
            channel = conn.channel()
            try:
                channel.basic_consume(queue, arguments={"x-priority": value})
            except ChannelClosedError as exc:
                answers[label] = f"{exc.reply_code} {exc.reply_text}".replace(queue, "Q")
            else:
                answers[label] = "ok"
                channel.close()
            admin.queue_delete(queue)
    return answers


EXPECTED: Final = {
    "no prefetch": [("high", b"%d" % n) for n in range(6)],
    "prefetch": (
        [
            ("high", b"0"),
            ("high", b"1"),
            ("mid", b"2"),
            ("mid", b"3"),
            ("none", b"4"),
            ("none", b"5"),
        ],
        [("high", b"6"), ("high", b"7")],
    ),
}

EXPECTED_BAD: Final = {
    "str": "406 PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'Q' in vhost '/': "
    '"expected integer, got longstr"',
    "float": "406 PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'Q' in vhost '/': "
    '"expected integer, got double"',
    "bool": "406 PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'Q' in vhost '/': "
    '"expected integer, got bool"',
    "negative": "ok",
    "long": "ok",
}


def test_consumer_priorities_as_rabbitmq(rabbitmq_url: str, embedded_url: str) -> None:
    for kind in ("classic", "quorum"):
        assert priorities(rabbitmq_url, kind) == EXPECTED, kind
        assert priorities(embedded_url, kind) == EXPECTED, kind
    assert bad_priorities(rabbitmq_url) == EXPECTED_BAD


def test_consumer_priorities_on_the_embedded_broker(embedded_url: str) -> None:
    for kind in ("classic", "quorum"):
        assert priorities(embedded_url, kind) == EXPECTED, kind
    assert bad_priorities(embedded_url) == EXPECTED_BAD
