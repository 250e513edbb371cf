"""amqp_asyncio keeps reading while a consumer's buffer is full: with ``buffer_size`` equal to
the prefetch and an application that takes no message, a forced close is seen at once as
``ConnectionForced`` (it used to go unseen until the application read, then surface as
``ConnectionLostError``), against RabbitMQ and against the embedded broker."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

import amqp_asyncio
from amqp_asyncio import ConnectionForced

from ..support.rabbitmqctl import connection_pid, rabbitmqctl
from ..support.scenarios import unique

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_broker import BrokerThread

PREFETCH: Final = 20
#: How long the close may take to be seen: generous against a loaded machine, far below the
#: heartbeat interval (60 s) that a connection which stopped reading would need.
SEEN_WITHIN: Final = 10.0


async def _close_seen_with_a_full_buffer(url: str, close: Callable[[str], None]) -> None:
    name = unique("full-buffer")
    queue = unique("full-buffer-q")
    async with amqp_asyncio.connect(url, connection_name=name) as conn:
        ch = await conn.open_channel()
        await ch.queue_declare(queue)
        try:
            for n in range(PREFETCH * 3):
                await ch.basic_publish(b"%d" % n, routing_key=queue)
            await ch.basic_qos(PREFETCH)
            async with ch.basic_consume(queue, buffer_size=PREFETCH) as consumer:
                while consumer.buffered < PREFETCH:  # the application takes nothing
                    await asyncio.sleep(0.01)
                await asyncio.to_thread(close, name)
                async with asyncio.timeout(SEEN_WITHIN):
                    error = await conn.wait_closed()
                assert isinstance(error, ConnectionForced), error
                assert isinstance(conn.close_error, ConnectionForced)
        finally:
            async with amqp_asyncio.connect(url) as cleanup:
                await (await cleanup.open_channel()).queue_delete(queue)


def test_a_forced_close_is_seen_with_a_full_buffer_on_rabbitmq(rabbitmq_url: str) -> None:
    def close(name: str) -> None:
        rabbitmqctl("close_connection", connection_pid(name), "test")

    asyncio.run(_close_seen_with_a_full_buffer(rabbitmq_url, close))


def test_a_forced_close_is_seen_with_a_full_buffer_on_the_embedded_broker(
    amqp_broker: BrokerThread,
) -> None:
    def close(name: str) -> None:
        assert amqp_broker.close_connection(name, reply_text="test") == 1

    asyncio.run(_close_seen_with_a_full_buffer(amqp_broker.url, close))
