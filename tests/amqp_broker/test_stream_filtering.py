"""Stream filtering as RabbitMQ 3.13 (issue 29), on the embedded broker only: RabbitMQ 3.10
has none. Publishers set ``x-stream-filter-value`` (a string); consumers give
``x-stream-filter`` (a string or an array of strings) and ``x-stream-match-unfiltered``.
RabbitMQ filters by chunk (a Bloom filter per chunk, so a filtered consumer may still get
messages of other values and must filter too); this broker's chunks are single messages, so
its filtering is exact. The rules come from ``rabbit_stream_queue.erl`` (``filter_spec``,
``stream_message``, ``check_filter_size``)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
from amqp_sansio import BasicProperties
from amqp_sansio.client import ChannelClosedError

if TYPE_CHECKING:
    from amqp_sansio import FieldTable, FieldValue

#: Published in this order: the filter value of each (None: no header; 7: not a string).
VALUES: Final[list[FieldValue]] = ["a", "b", None, "a", 7, "c"]


def _unique() -> str:
    return f"filtered-{uuid.uuid4().hex[:10]}"


def _received(channel: amqp_blocking.Channel, stream: str, arguments: FieldTable) -> list[int]:
    """Which of the published messages (their index) a consumer with *arguments* gets, read
    from the first offset up to the first end marker it gets."""
    consumer = channel.basic_consume(stream, arguments={"x-stream-offset": "first", **arguments})
    got = []
    while (message := consumer.get(timeout=10)) is not None:
        message.ack()
        if message.body == b"end":
            break
        got.append(int(message.body))
    consumer.cancel()
    return got


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, [0, 1, 2, 3, 4, 5]),
        ({"x-stream-filter": "a"}, [0, 3]),
        ({"x-stream-filter": ["a", "c"]}, [0, 3, 5]),
        ({"x-stream-filter": ["a", 1]}, [0, 3]),  # only the strings count
        ({"x-stream-filter": "b", "x-stream-match-unfiltered": True}, [1, 2, 4]),
        ({"x-stream-filter": "b", "x-stream-match-unfiltered": False}, [1]),
        ({"x-stream-match-unfiltered": False}, [0, 1, 2, 3, 4, 5]),  # no filter: everything
        ({"x-stream-filter": 5}, [0, 1, 2, 3, 4, 5]),  # not a string nor an array: none
    ],
)
def test_filtered_consumers_get_what_their_filter_lets_through(
    embedded_url: str, arguments: FieldTable, expected: list[int]
) -> None:
    stream = _unique()
    with amqp_blocking.connect(embedded_url) as conn:
        channel = conn.channel()
        channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_select()
        for n, value in enumerate(VALUES):
            headers: FieldTable = {} if value is None else {"x-stream-filter-value": value}
            channel.basic_publish(
                b"%d" % n, routing_key=stream, properties=BasicProperties(headers=headers)
            )
        # two end markers: one without a filter value, one with the consumer's first value
        # (a filtered consumer that does not match unfiltered messages skips the first)
        wanted = arguments.get("x-stream-filter")
        strings = [
            v for v in (wanted if isinstance(wanted, list) else [wanted]) if isinstance(v, str)
        ]
        for marker in [None, *strings[:1]]:
            headers = {} if marker is None else {"x-stream-filter-value": marker}
            channel.basic_publish(
                b"end", routing_key=stream, properties=BasicProperties(headers=headers)
            )
        channel.basic_qos(prefetch_count=10)
        assert _received(channel, stream, arguments) == expected
        channel.queue_delete(stream)


@pytest.mark.parametrize(("size", "refused"), [(15, True), (16, False), (255, False), (256, True)])
def test_the_filter_size_argument_is_checked(embedded_url: str, size: int, refused: bool) -> None:
    stream = _unique()
    arguments: FieldTable = {"x-queue-type": "stream", "x-stream-filter-size-bytes": size}
    with amqp_blocking.connect(embedded_url) as conn:
        channel = conn.channel()
        if refused:
            with pytest.raises(ChannelClosedError) as caught:
                channel.queue_declare(stream, durable=True, arguments=arguments)
            assert caught.value.reply_text == (
                "PRECONDITION_FAILED - Invalid value for  x-stream-filter-size-bytes"
            )
        else:
            channel.queue_declare(stream, durable=True, arguments=arguments)
            channel.queue_delete(stream)
