"""Stream queues on the wire, against RabbitMQ 3.10 and the embedded broker with the same
expectations: declare and consume restrictions with RabbitMQ's codes and texts, the
``x-stream-offset`` specs, the offset header, credit by prefetch, and retention by
``x-max-length-bytes``. Every stream is deleted at the end."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

import pytest
import trio

import amqp_trio
from amqp_sansio import BasicProperties, Int64, Timestamp
from amqp_sansio.client import (
    AMQPNotImplemented,
    InternalError,
    PreconditionFailed,
)
from tests.support.scenarios import unique

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from amqp_sansio import FieldTable, FieldValue

pytestmark = pytest.mark.trio

STREAM: Final[FieldTable] = {"x-queue-type": "stream"}
# A hang guard: every test is a few round trips (one waits for the next wall-clock second).
LIMIT: Final = 30


@pytest.fixture
async def stream(amqp_url: str) -> AsyncIterator[str]:
    """A stream queue holding s0..s4 (each published alone and confirmed: one chunk each)."""
    name = unique("stream")
    async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
        await ch.queue_declare(name, durable=True, arguments=STREAM)
        await ch.confirm_select()
        for n in range(5):
            await ch.basic_publish(b"s%d" % n, routing_key=name)
        try:
            yield name
        finally:
            async with amqp_trio.connect(amqp_url) as cleanup, cleanup.channel() as c:
                await c.queue_delete(name)


async def read(url: str, queue: str, spec: FieldValue | None, *, quiet: float = 0.3) -> list[int]:
    """The offsets a consumer starting at *spec* gets until nothing comes for *quiet* s."""
    arguments: FieldTable = {} if spec is None else {"x-stream-offset": spec}
    offsets: list[int] = []
    async with amqp_trio.connect(url) as conn, conn.channel() as ch:
        await ch.basic_qos(100)
        async with ch.basic_consume(queue, arguments=arguments) as consumer:
            iterator = consumer.__aiter__()
            while True:
                with trio.move_on_after(quiet):
                    message = await iterator.__anext__()
                    headers = message.properties.headers or {}
                    offset = message.stream_offset
                    assert offset is not None
                    assert headers["x-stream-offset"] == offset
                    assert message.body == (b"s%d" % offset if offset < 5 else b"later")
                    assert not message.redelivered
                    offsets.append(offset)
                    await message.ack()
                    continue
                return offsets


async def test_offsets_first_last_next_number_and_time(amqp_url: str, stream: str) -> None:
    with trio.fail_after(LIMIT):
        assert await read(amqp_url, stream, "first") == [0, 1, 2, 3, 4]
        assert await read(amqp_url, stream, "last") == [4]
        assert await read(amqp_url, stream, "next") == []
        assert await read(amqp_url, stream, None) == []
        assert await read(amqp_url, stream, Int64(2)) == [2, 3, 4]
        assert await read(amqp_url, stream, 1000) == []  # past the end: nothing yet
        assert await read(amqp_url, stream, "1h") == [0, 1, 2, 3, 4]
        assert await read(amqp_url, stream, Timestamp(int(time.time()) - 3600)) == [
            0,
            1,
            2,
            3,
            4,
        ]
        # A timestamp after the first five: published in the next wall-clock second.
        boundary = int(time.time()) + 1
        await trio.sleep(boundary - time.time() + 0.05)
        async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
            await ch.confirm_select()
            await ch.basic_publish(b"later", routing_key=stream)
        assert await read(amqp_url, stream, Timestamp(boundary)) == [5]


async def test_a_consumer_at_next_gets_what_is_published_after(amqp_url: str, stream: str) -> None:
    with trio.fail_after(LIMIT):
        async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
            await ch.basic_qos(10)
            async with ch.basic_consume(stream) as consumer:
                async with amqp_trio.connect(amqp_url) as other, other.channel() as pub:
                    await pub.basic_publish(
                        b"new", routing_key=stream, properties=BasicProperties(headers={"a": 1})
                    )
                async for message in consumer:
                    assert message.body == b"new"
                    assert message.properties.headers == {"a": 1, "x-stream-offset": 5}
                    assert message.stream_offset == 5
                    await message.ack()
                    break


async def test_prefetch_is_the_credit(amqp_url: str, stream: str) -> None:
    with trio.fail_after(LIMIT):
        async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
            await ch.basic_qos(2)
            got = []
            async with ch.basic_consume(stream, arguments={"x-stream-offset": "first"}) as consumer:
                iterator = consumer.__aiter__()
                got.append(await iterator.__anext__())
                got.append(await iterator.__anext__())
                with trio.move_on_after(0.5) as scope:
                    await iterator.__anext__()
                assert scope.cancelled_caught  # two unacked: no credit left
                await got[-1].ack(multiple=True)
                third = await iterator.__anext__()
                assert third.stream_offset == 2
                await third.ack()


async def test_declare_restrictions(amqp_url: str) -> None:
    name = unique("stream-bad")
    where = f"queue '{name}' in vhost '/'"
    cases: list[tuple[dict[str, bool], FieldTable, str]] = [
        ({}, STREAM, f"invalid property 'non-durable' for {where}"),
        (
            {"durable": True, "exclusive": True},
            STREAM,
            f"invalid property 'exclusive-owner' for {where}",
        ),
        (
            {"durable": True, "auto_delete": True},
            STREAM,
            f"invalid property 'auto-delete' for {where}",
        ),
        (
            {"durable": True},
            {**STREAM, "x-max-priority": 5},
            f"invalid arg 'x-max-priority' for {where} of queue type rabbit_stream_queue",
        ),
        (
            {"durable": True},
            {**STREAM, "x-message-ttl": 5},
            f"invalid arg 'x-message-ttl' for {where} of queue type rabbit_stream_queue",
        ),
        (
            {"durable": True},
            {**STREAM, "x-max-age": "1X"},
            f"invalid arg 'x-max-age' for {where}: invalid_max_age",
        ),
        (
            {"durable": True},
            {**STREAM, "x-max-length-bytes": -3},
            f"invalid arg 'x-max-length-bytes' for {where}: {{value_negative,-3}}",
        ),
        (
            {"durable": True},
            {**STREAM, "x-stream-max-segment-size-bytes": 3_000_000_001},
            "Exceeded max value for x-stream-max-segment-size-bytes",
        ),
    ]
    with trio.fail_after(LIMIT):
        async with amqp_trio.connect(amqp_url) as conn:
            for flags, arguments, text in cases:
                async with conn.channel() as ch:
                    with pytest.raises(PreconditionFailed) as failed:
                        await ch.queue_declare(name, arguments=arguments, **flags)
                    assert failed.value.reply_text == f"PRECONDITION_FAILED - {text}"
            async with conn.channel() as ch:
                with pytest.raises(PreconditionFailed) as failed:
                    await ch.queue_declare("", durable=True, arguments=STREAM)
                assert failed.value.reply_text == (
                    "PRECONDITION_FAILED - Cannot declare a server-named queue for type "
                    "rabbit_stream_queue"
                )
            async with conn.channel() as ch:
                await ch.queue_declare(name, durable=True, arguments={**STREAM, "x-max-age": "7D"})
                with pytest.raises(PreconditionFailed) as failed:
                    await ch.queue_declare(name, durable=True)
                assert failed.value.reply_text == (
                    f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for {where}: "
                    "received none but current is the value 'stream' of type 'longstr'"
                )
            async with conn.channel() as ch:
                await ch.queue_delete(name)


async def test_consume_restrictions(amqp_url: str, stream: str) -> None:
    where = f"queue '{stream}' in vhost '/'"
    with trio.fail_after(LIMIT):
        async with amqp_trio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                with pytest.raises(PreconditionFailed) as failed:
                    async with ch.basic_consume(stream):
                        raise AssertionError("consumed without a prefetch")
                assert failed.value.reply_text == (
                    f"PRECONDITION_FAILED - consumer prefetch count is not set for '{where}'"
                )
            async with conn.channel() as ch:
                await ch.basic_qos(10)
                with pytest.raises(PreconditionFailed) as failed:
                    async with ch.basic_consume(stream, arguments={"x-stream-offset": "5x"}):
                        raise AssertionError("consumed at 5x")
                assert failed.value.reply_text == (
                    f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for {where}: "
                    '{invalid_stream_offset_arg,{longstr,<<"5x">>}}'
                )
    not_implemented = "NOT_IMPLEMENTED - "
    closing: list[tuple[str, str]] = [
        ("no_ack", f"automatic acknowledgement not supported by stream queues {where}"),
        ("global", f"{where} does not support global qos"),
        ("get", f"basic.get not supported by stream queues {where}"),
        ("purge", f"queue.purge not supported by stream queues {where}"),
        ("reject", f"basic.nack and basic.reject not supported by stream queues {where}"),
    ]
    with trio.fail_after(LIMIT):
        for case, text in closing:
            async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
                with pytest.raises(AMQPNotImplemented) as unsupported:
                    await _violate(ch, stream, case)
                assert unsupported.value.reply_text == not_implemented + text
        for case in ("bogus", "recover"):  # RabbitMQ 3.10's channel crashes on these
            async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
                with pytest.raises(InternalError) as crashed:
                    await _violate(ch, stream, case)
                assert crashed.value.reply_text == "INTERNAL_ERROR"


async def _violate(ch: amqp_trio.Channel, stream: str, case: str) -> None:
    """Do what a stream queue refuses (*case*) and wait for the refusal."""
    await ch.basic_qos(10)
    if case == "no_ack":
        async with ch.basic_consume(stream, no_ack=True):
            pass
    elif case == "global":
        await ch.basic_qos(10, global_=True)
        async with ch.basic_consume(stream):
            pass
    elif case == "get":
        await ch.basic_get(stream)
    elif case == "purge":
        await ch.queue_purge(stream)
    elif case == "bogus":
        async with ch.basic_consume(stream, arguments={"x-stream-offset": "bogus"}):
            pass
    else:
        async with ch.basic_consume(stream, arguments={"x-stream-offset": "first"}) as consumer:
            async for message in consumer:
                if case == "reject":
                    await message.reject()
                else:
                    await ch.basic_recover()
                await ch.queue_declare(stream, passive=True)  # a round trip: the close comes


async def test_retention_by_max_length_bytes_keeps_the_newest(amqp_url: str) -> None:
    name = unique("stream-retention")
    arguments: FieldTable = {
        **STREAM,
        "x-max-length-bytes": 2000,
        "x-stream-max-segment-size-bytes": 500,
    }
    with trio.fail_after(LIMIT):
        async with amqp_trio.connect(amqp_url) as conn, conn.channel() as ch:
            await ch.queue_declare(name, durable=True, arguments=arguments)
            try:
                await ch.confirm_select()
                for n in range(100):  # one chunk each, so segments roll
                    await ch.basic_publish(b"%03d" % n + b"x" * 97, routing_key=name)
                await ch.basic_qos(200)
                while True:  # RabbitMQ's retention runs in the background
                    bodies: list[bytes] = []
                    async with ch.basic_consume(
                        name, arguments={"x-stream-offset": "first"}
                    ) as consumer:
                        iterator = consumer.__aiter__()
                        while True:
                            with trio.move_on_after(0.3):
                                message = await iterator.__anext__()
                                bodies.append(message.body[:3])
                                await message.ack()
                                continue
                            break
                    if len(bodies) < 100:
                        break
                    await trio.sleep(0.1)
                # the newest messages, in order, up to the last one published
                assert bodies == [b"%03d" % n for n in range(100 - len(bodies), 100)]
                assert 0 < len(bodies) < 50
            finally:
                await ch.queue_delete(name)
