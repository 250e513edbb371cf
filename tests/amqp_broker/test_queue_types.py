"""Queue types side by side with RabbitMQ 3.10 (issue 29): every queue argument RabbitMQ
knows, declared for each type, gets the same answer from both brokers; quorum queues count
deliveries (``x-delivery-count`` 1, 2 ... on redeliveries, 0 on a first ``basic.get``) and
drop or dead-letter a message at ``x-delivery-limit``; a consumer on a quorum queue from a
channel with a global prefetch is 540. The same scenario functions run against the shared
RabbitMQ node and the embedded broker, and their observations are compared; the embedded
broker's are also checked on their own, so the behaviour is pinned where no RabbitMQ runs."""

from __future__ import annotations

import uuid
from typing import Final

import pytest

import amqp_blocking
import amqp_broker
from amqp_broker import BrokerOptions
from amqp_sansio import BasicProperties, FieldTable, FieldValue
from amqp_sansio.client import AMQPNotImplemented, ChannelClosedError, PublishNackedError

#: One value of every queue argument RabbitMQ 3.10 knows (and one it does not), plus bad
#: values of the two quorum arguments: label -> (argument, value).
ARGUMENTS: Final[dict[str, tuple[str, FieldValue]]] = {
    **{
        key: (key, value)
        for key, value in (
            ("x-expires", 60000),
            ("x-message-ttl", 1000),
            ("x-dead-letter-exchange", "dlx"),
            ("x-dead-letter-routing-key", "k"),
            ("x-max-length", 10),
            ("x-max-length-bytes", 1000),
            ("x-max-in-memory-length", 10),
            ("x-max-in-memory-bytes", 1000),
            ("x-max-priority", 5),
            ("x-overflow", "reject-publish"),
            ("x-queue-mode", "lazy"),
            ("x-queue-version", 2),
            ("x-single-active-consumer", True),
            ("x-quorum-initial-group-size", 1),
            ("x-max-age", "1D"),
            ("x-stream-max-segment-size-bytes", 1000000),
            ("x-initial-cluster-size", 1),
            ("x-queue-leader-locator", "client-local"),
            ("x-queue-master-locator", "client-local"),
            ("x-delivery-limit", 3),
            ("x-dead-letter-strategy", "at-least-once"),
            ("x-foo", 1),
        )
    },
    "x-overflow=drop-head": ("x-overflow", "drop-head"),
    "x-overflow=reject-publish-dlx": ("x-overflow", "reject-publish-dlx"),
    "x-delivery-limit=abc": ("x-delivery-limit", "abc"),
    "x-dead-letter-strategy=bad": ("x-dead-letter-strategy", "bad"),
}
TYPES: Final = ("classic", "quorum", "stream")


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def probe_arguments(url: str) -> dict[str, str]:
    """``"type label"`` -> ``ok`` or the refusal's code and text (the queue name as Q)."""
    answers: dict[str, str] = {}
    with amqp_blocking.connect(url) as conn:
        for kind in TYPES:
            for label, (key, value) in ARGUMENTS.items():
                queue = _unique("args")
                arguments: FieldTable = {"x-queue-type": kind, key: value}
                if key == "x-dead-letter-routing-key":
                    arguments["x-dead-letter-exchange"] = "dlx"
                channel = conn.channel()
                try:
                    channel.queue_declare(queue, durable=True, arguments=arguments)
                except ChannelClosedError as exc:
                    answers[f"{kind} {label}"] = f"{exc.reply_code} {exc.reply_text}".replace(
                        queue, "Q"
                    )
                    continue
                answers[f"{kind} {label}"] = "ok"
                channel.queue_delete(queue)
                channel.close()
    return answers


def _count(message: amqp_blocking.Message) -> FieldValue:
    return (message.properties.headers or {}).get("x-delivery-count")


def _next(consumer: amqp_blocking.Consumer) -> amqp_blocking.Message:
    message = consumer.get(timeout=10)
    assert message is not None
    return message


def quorum_deliveries(url: str) -> dict[str, object]:
    """What a client sees of a quorum queue's delivery counting and limits."""
    seen: dict[str, object] = {}
    with amqp_blocking.connect(url) as conn:
        admin = conn.channel()
        admin.confirm_select()
        # no limit: counts go up with every return (nack, reject, a closed channel)
        queue = _unique("quorum")
        admin.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        admin.basic_publish(b"m", routing_key=queue, properties=BasicProperties(headers={"a": 1}))
        first = conn.channel()
        first.basic_qos(prefetch_count=1)
        consumer = first.basic_consume(queue)
        trace: list[object] = []
        for settle in ("nack", "reject", "nack"):
            message = _next(consumer)
            trace.append((message.redelivered, message.properties.headers))
            if settle == "nack":
                message.nack(requeue=True)
            else:
                first.basic_reject(message.delivery_tag, requeue=True)
        message = _next(consumer)
        trace.append(_count(message))
        first.close()  # unacknowledged: returned by the channel's end
        second = conn.channel()
        second.basic_qos(prefetch_count=1)
        message = _next(second.basic_consume(queue))
        trace.append((_count(message), message.redelivered))
        message.ack()
        seen["no limit"] = trace
        admin.queue_delete(queue)

        # x-delivery-limit 2 without a dead-letter exchange: 3 deliveries, then dropped (the
        # next message is the one published after it)
        queue = _unique("limited")
        admin.queue_declare(
            queue, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 2}
        )
        admin.basic_publish(b"m1", routing_key=queue)
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1)
        consumer = channel.basic_consume(queue)
        trace = []
        for _ in range(3):
            message = _next(consumer)
            trace.append((message.body, _count(message)))
            message.nack(requeue=True)
        admin.basic_publish(b"m2", routing_key=queue)
        message = _next(consumer)
        trace.append((message.body, _count(message)))
        message.ack()
        seen["limit 2, dropped"] = trace
        channel.close()
        admin.queue_delete(queue)

        # x-delivery-limit 1 with a dead-letter exchange (and at-least-once): dead-lettered
        # with reason delivery_limit
        queue, dead = _unique("limited"), _unique("dead")
        admin.queue_declare(dead)
        admin.queue_declare(
            queue,
            durable=True,
            arguments={
                "x-queue-type": "quorum",
                "x-delivery-limit": 1,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": dead,
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
            },
        )
        admin.basic_publish(b"m", routing_key=queue)
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1)
        consumer = channel.basic_consume(queue)
        trace = []
        for _ in range(2):
            message = _next(consumer)
            trace.append(_count(message))
            message.nack(requeue=True)
        message = _next(channel.basic_consume(dead))
        headers = dict(message.properties.headers or {})
        deaths = headers.pop("x-death")
        assert isinstance(deaths, list)
        death = deaths[0]
        assert isinstance(death, dict)
        death.pop("time")
        trace.append((message.body, headers, deaths))
        message.ack()
        seen["limit 1, dead-lettered"] = trace
        channel.close()
        for name in (queue, dead):
            admin.queue_delete(name)
    return seen


def global_qos_consume(url: str) -> str:
    """The answer to a consumer on a quorum queue from a channel with a global prefetch."""
    queue = _unique("quorum")
    with amqp_blocking.connect(url) as conn:
        conn.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        channel = conn.channel()
        channel.basic_qos(prefetch_count=10, global_=True)
        try:
            channel.basic_consume(queue)
        except AMQPNotImplemented as exc:
            answer = f"{exc.reply_code} {exc.reply_text}".replace(queue, "Q")
        else:
            answer = "accepted"
    with amqp_blocking.connect(url) as conn:
        conn.channel().queue_delete(queue)
    return answer


def reject_publish(url: str) -> dict[str, list[str]]:
    """Confirms of four publishes to ``reject-publish`` queues of each type and limit."""
    answers: dict[str, list[str]] = {}
    with amqp_blocking.connect(url) as conn:
        channel = conn.channel()
        channel.confirm_select()
        for kind in ("classic", "quorum"):
            for limit in ({"x-max-length": 1}, {"x-max-length": 0}, {"x-max-length-bytes": 2}):
                queue = _unique("reject")
                channel.queue_declare(
                    queue,
                    durable=True,
                    arguments={"x-queue-type": kind, "x-overflow": "reject-publish", **limit},
                )
                confirms = []
                for n in range(4):
                    try:
                        channel.basic_publish(b"%d" % n, routing_key=queue)
                        confirms.append("ack")
                    except PublishNackedError:
                        confirms.append("nack")
                answers[f"{kind} {limit}"] = confirms
                channel.queue_delete(queue)
    return answers


def test_reject_publish_by_queue_type_as_rabbitmq(rabbitmq_url: str, embedded_url: str) -> None:
    # a quorum queue refuses only once it is over its limit: it takes one message more
    expected = {
        "classic {'x-max-length': 1}": ["ack", "nack", "nack", "nack"],
        "classic {'x-max-length': 0}": ["nack", "nack", "nack", "nack"],
        "classic {'x-max-length-bytes': 2}": ["ack", "ack", "nack", "nack"],
        "quorum {'x-max-length': 1}": ["ack", "ack", "nack", "nack"],
        "quorum {'x-max-length': 0}": ["ack", "nack", "nack", "nack"],
        "quorum {'x-max-length-bytes': 2}": ["ack", "ack", "ack", "nack"],
    }
    assert reject_publish(rabbitmq_url) == expected
    assert reject_publish(embedded_url) == expected


def redeclares(url: str) -> list[str]:
    """The answers to redeclaring a quorum queue with other quorum arguments."""
    answers = []
    cases: list[tuple[FieldTable, FieldTable]] = [
        ({"x-delivery-limit": 3}, {"x-delivery-limit": 4}),
        ({"x-dead-letter-strategy": "at-most-once"}, {"x-dead-letter-strategy": "at-least-once"}),
        ({"x-delivery-limit": 3}, {}),
    ]
    with amqp_blocking.connect(url) as conn:
        for first, second in cases:
            queue = _unique("redeclared")
            channel = conn.channel()
            channel.queue_declare(
                queue, durable=True, arguments={"x-queue-type": "quorum", **first}
            )
            try:
                channel.queue_declare(
                    queue, durable=True, arguments={"x-queue-type": "quorum", **second}
                )
                answers.append("ok")
            except ChannelClosedError as exc:
                answers.append(f"{exc.reply_code} {exc.reply_text}".replace(queue, "Q"))
                channel = conn.channel()
            channel.queue_delete(queue)
    return answers


def test_quorum_arguments_are_compared_on_redeclare_as_rabbitmq(
    rabbitmq_url: str, embedded_url: str
) -> None:
    where = "for queue 'Q' in vhost '/'"
    expected = [
        (
            f"406 PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' {where}: received '4' "
            "but current is '3'"
        ),
        (
            f"406 PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-strategy' {where}: "
            "received 'at-least-once' but current is 'at-most-once'"
        ),
        (
            f"406 PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' {where}: received none "
            "but current is the value '3' of type 'byte'"
        ),
    ]
    assert redeclares(rabbitmq_url) == expected
    assert redeclares(embedded_url) == expected


EMBEDDED_ARGUMENTS: Final = {
    "classic x-foo": "ok",
    "classic x-delivery-limit": "406 PRECONDITION_FAILED - invalid arg 'x-delivery-limit' for "
    "queue 'Q' in vhost '/' of queue type rabbit_classic_queue",
    "quorum x-max-priority": "406 PRECONDITION_FAILED - invalid arg 'x-max-priority' for "
    "queue 'Q' in vhost '/' of queue type rabbit_quorum_queue",
    "quorum x-stream-max-segment-size-bytes": "406 PRECONDITION_FAILED - invalid arg "
    "'x-stream-max-segment-size-bytes' for queue 'Q' in vhost '/' of queue type "
    "rabbit_quorum_queue",
    "quorum x-delivery-limit=abc": "ok",
    "quorum x-dead-letter-strategy=bad": "406 PRECONDITION_FAILED - invalid arg "
    "'x-dead-letter-strategy' for queue 'Q' in vhost '/': invalid_dlx_strategy",
    "stream x-foo": "ok",
    "stream x-overflow": "406 PRECONDITION_FAILED - invalid arg 'x-overflow' for queue 'Q' in "
    "vhost '/' of queue type rabbit_stream_queue",
}

EMBEDDED_DELIVERIES: Final = {
    "no limit": [
        (False, {"a": 1}),  # none on a consumer's first delivery
        (True, {"a": 1, "x-delivery-count": 1}),
        (True, {"a": 1, "x-delivery-count": 2}),
        3,
        (4, True),
    ],
    "limit 2, dropped": [(b"m1", None), (b"m1", 1), (b"m1", 2), (b"m2", None)],
    "limit 1, dead-lettered": [
        None,
        1,
        (
            b"m",
            {
                "x-first-death-exchange": "",
                "x-first-death-queue": "Q",
                "x-first-death-reason": "delivery_limit",
            },
            [
                {
                    "count": 1,
                    "reason": "delivery_limit",
                    "queue": "Q",
                    "exchange": "",
                    "routing-keys": ["Q"],
                }
            ],
        ),
    ],
}


def _named(seen: dict[str, object]) -> dict[str, object]:
    """The dead-letter trace with its generated queue name as Q."""
    trace = seen["limit 1, dead-lettered"]
    assert isinstance(trace, list)
    _, headers, deaths = trace[2]
    name = headers["x-first-death-queue"]
    headers["x-first-death-queue"] = "Q"
    for death in deaths:
        death["queue"] = "Q"
        death["routing-keys"] = ["Q" if k == name else k for k in death["routing-keys"]]
    return seen


def test_arguments_by_queue_type_as_rabbitmq(rabbitmq_url: str, embedded_url: str) -> None:
    assert probe_arguments(embedded_url) == probe_arguments(rabbitmq_url)


def test_arguments_by_queue_type_on_the_embedded_broker(embedded_url: str) -> None:
    answers = probe_arguments(embedded_url)
    assert {label: answers[label] for label in EMBEDDED_ARGUMENTS} == EMBEDDED_ARGUMENTS


def test_quorum_delivery_counts_and_limits_as_rabbitmq(
    rabbitmq_url: str, embedded_url: str
) -> None:
    assert _named(quorum_deliveries(embedded_url)) == _named(quorum_deliveries(rabbitmq_url))


def test_quorum_delivery_counts_and_limits_on_the_embedded_broker(embedded_url: str) -> None:
    assert _named(quorum_deliveries(embedded_url)) == EMBEDDED_DELIVERIES


def test_global_qos_and_a_quorum_consumer_as_rabbitmq(rabbitmq_url: str, embedded_url: str) -> None:
    expected = "540 NOT_IMPLEMENTED - queue 'Q' in vhost '/' does not support global qos"
    assert global_qos_consume(rabbitmq_url) == expected
    assert global_qos_consume(embedded_url) == expected


def test_the_default_delivery_limit_is_configurable() -> None:
    # RabbitMQ 4.0's default of 20, here 2: an argument still wins over it
    options = BrokerOptions(quorum_delivery_limit=2)
    with amqp_broker.run_in_thread(options=options) as url, amqp_blocking.connect(url) as conn:
        channel = conn.channel()
        channel.confirm_select()
        counts: dict[str, list[object]] = {}
        for queue, arguments in (
            ("by-default", {}),
            ("by-argument", {"x-delivery-limit": 0}),
        ):
            channel.queue_declare(
                queue, durable=True, arguments={"x-queue-type": "quorum", **arguments}
            )
            channel.basic_publish(b"m", routing_key=queue)
            seen: list[object] = []
            while (message := channel.basic_get(queue)) is not None:
                seen.append(_count(message))
                message.nack(requeue=True)
            counts[queue] = seen
        assert counts == {"by-default": [0, 1, 2], "by-argument": [0]}


@pytest.mark.parametrize("kind", ["quorum", "stream"])
def test_replicated_types_refuse_server_names(embedded_url: str, kind: str) -> None:
    with amqp_blocking.connect(embedded_url) as conn:
        with pytest.raises(ChannelClosedError) as caught:
            conn.channel().queue_declare("", durable=True, arguments={"x-queue-type": kind})
        assert caught.value.reply_text == (
            f"PRECONDITION_FAILED - Cannot declare a server-named queue for type "
            f"rabbit_{kind}_queue"
        )
