"""amqp_asyncio against RabbitMQ: cancellation and task groups.

The shared scenarios run in tests/amqp_asyncio/test_scenarios.py. Here: cancelling pending calls,
a consumer loop, a channel opening or a confirm wait must leave the connection usable (the
late replies are dropped, the core's request FIFO stays in step with the broker).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import pytest

import amqp_asyncio
from amqp_sansio import QueueDeclareOk
from amqp_sansio.client import ConnectionClosedError, NotFound
from tests.support.scenarios import unique

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

pytestmark = pytest.mark.rabbitmq

_TIMEOUT: Final = 30


def _run(test: Callable[[str], Awaitable[None]], url: str) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(_TIMEOUT):
            await test(url)

    asyncio.run(bounded())


async def _pending_calls_cancelled(url: str) -> None:
    async with amqp_asyncio.connect(url) as conn, conn.channel() as ch:
        names = [unique(f"cancel{n}") for n in range(10)]
        tasks = [asyncio.create_task(ch.queue_declare(name, exclusive=True)) for name in names]
        await asyncio.sleep(0)  # every request is written; no reply has been read yet
        for task in tasks[::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for n, result in enumerate(results):
            if n % 2:
                assert isinstance(result, QueueDeclareOk)
                assert result.queue == names[n]
            else:
                assert isinstance(result, asyncio.CancelledError)
        # The late replies were dropped: the next call gets its own reply.
        ok = await ch.queue_declare(names[0], passive=True)
        assert ok.queue == names[0]
        assert not conn.is_closed


def test_cancelled_pending_calls_leave_the_connection_usable(rabbitmq_url: str) -> None:
    _run(_pending_calls_cancelled, rabbitmq_url)


async def _consumer_loop_cancelled(url: str) -> None:
    async with amqp_asyncio.connect(url) as conn, conn.channel() as ch:
        queue = (await ch.queue_declare(exclusive=True)).queue
        await ch.basic_publish(b"one", routing_key=queue)
        received: list[bytes] = []

        async def consume() -> None:
            async with ch.basic_consume(queue) as consumer:
                async for msg in consumer:
                    received.append(msg.body)
                    await msg.ack()

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await consume()  # waits for a second message that never comes
        assert received == [b"one"]
        # The consumer was cancelled on the way out; the channel carries on.
        ok = await ch.queue_declare(queue, passive=True)
        assert ok.consumer_count == 0
        await ch.confirm_select()
        await ch.basic_publish(b"two", routing_key=queue)
        msg = await ch.basic_get(queue)
        assert msg is not None
        assert msg.body == b"two"
        await msg.ack()


def test_a_cancelled_consumer_loop_leaves_the_channel_usable(rabbitmq_url: str) -> None:
    _run(_consumer_loop_cancelled, rabbitmq_url)


async def _task_group(url: str) -> None:
    async with amqp_asyncio.connect(url) as conn, conn.channel() as ch:
        queue = (await ch.queue_declare(exclusive=True)).queue
        await ch.basic_qos(50)
        count = 300
        received: list[int] = []

        async def consume() -> None:
            async with ch.basic_consume(queue) as consumer:
                async for msg in consumer:
                    received.append(int(msg.body))
                    await msg.ack()
                    if len(received) == count:
                        return

        async def publish() -> None:
            async with conn.channel() as pch, pch.publisher(window=20) as pub:
                for n in range(count):
                    await pub.publish(b"%d" % n, routing_key=queue)

        async with asyncio.TaskGroup() as group:
            group.create_task(consume())
            group.create_task(publish())
        assert received == list(range(count))

        # A failing task cancels its siblings, which are parked in calls and iterators.
        async def fail_soon() -> None:
            await asyncio.sleep(0.1)
            await ch.queue_declare(unique("missing"), passive=True)

        async def wait_forever() -> None:
            async with conn.channel() as other, other.basic_consume(queue) as consumer:
                async for _ in consumer:
                    pass

        async def run_both() -> None:
            async with asyncio.TaskGroup() as group:
                group.create_task(wait_forever())
                group.create_task(fail_soon())

        with pytest.raises(ExceptionGroup) as group_error:
            await run_both()
        assert group_error.group_contains(NotFound)
        assert not conn.is_closed
        async with conn.channel() as again:
            assert (await again.queue_declare(queue, passive=True)).consumer_count == 0


def test_task_groups(rabbitmq_url: str) -> None:
    _run(_task_group, rabbitmq_url)


async def _cancelled_open_and_confirm(url: str) -> None:
    async with amqp_asyncio.connect(url) as conn:
        opening = asyncio.create_task(conn.open_channel())
        await asyncio.sleep(0)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        async with conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.confirm_select()
            publishing = asyncio.create_task(ch.basic_publish(b"a", routing_key=queue))
            await asyncio.sleep(0)
            publishing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await publishing
            await ch.basic_publish(b"b", routing_key=queue)  # its own confirm, not a's
            ok = await ch.queue_declare(queue, passive=True)
            assert ok.message_count == 2
        assert not conn.is_closed


def test_cancelled_channel_open_and_confirm_wait(rabbitmq_url: str) -> None:
    _run(_cancelled_open_and_confirm, rabbitmq_url)


async def _closed_connection(url: str) -> None:
    async with amqp_asyncio.connect(url) as conn:
        ch = await conn.open_channel()
        queue = (await ch.queue_declare(exclusive=True)).queue
        ended: list[BaseException | None] = []

        async def consume() -> None:
            try:
                async with ch.basic_consume(queue) as consumer:
                    async for _ in consumer:
                        pass
                ended.append(None)
            except ConnectionClosedError as exc:
                ended.append(exc)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.1)
        await conn.aclose()
        await task
        assert len(ended) == 1
        assert conn.is_closed
        error = await conn.wait_closed()
        assert isinstance(error, ConnectionClosedError)
        assert error.reply_code == 200
        with pytest.raises(ConnectionClosedError):
            await ch.basic_publish(b"", routing_key=queue)


def test_closing_the_connection_ends_consumers(rabbitmq_url: str) -> None:
    _run(_closed_connection, rabbitmq_url)


async def _consume_pipelined_with_other_calls(url: str) -> None:
    # RabbitMQ may answer a later request before basic.consume-ok; the adapter must not let
    # them share the channel's request queue (the core matches replies in order).
    async with amqp_asyncio.connect(url) as conn, conn.channel() as ch:
        queue = (await ch.queue_declare(exclusive=True)).queue

        async def consume_briefly() -> str:
            async with ch.basic_consume(queue) as consumer:
                return consumer.consumer_tag

        results = await asyncio.gather(
            consume_briefly(),
            ch.queue_declare(queue, passive=True),
            consume_briefly(),
            ch.queue_declare(queue, passive=True),
        )
        assert len({results[0], results[2]}) == 2
        starting = asyncio.create_task(consume_briefly())
        await asyncio.sleep(0)  # basic.consume is written; cancel before consume-ok
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        counts = [(await ch.queue_declare(queue, passive=True)).consumer_count for _ in range(20)]
        assert counts[-1] == 0
        assert not conn.is_closed


def test_consumes_pipelined_with_other_calls_on_one_channel(rabbitmq_url: str) -> None:
    _run(_consume_pipelined_with_other_calls, rabbitmq_url)
