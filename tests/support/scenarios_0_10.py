"""What every 0-10 client adapter must do, written once.

The async scenarios only await the adapter's own methods, so ``amqp_asyncio`` runs them under
``asyncio.run`` and ``amqp_trio`` under ``trio.run``; ``amqp_blocking`` has the same steps in
:mod:`tests.amqp_blocking.test_v0_10`. Each scenario takes a session (and a 0-9-1 channel for
the cross-protocol ones) and uses unique names, deleting what it declared.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypeAlias

import pytest

from amqp_sansio import BasicProperties
from amqp_sansio.v0_10.client import (
    ExecutionError,
    NotFoundError,
    Properties,
    SessionEndedError,
)

if TYPE_CHECKING:
    import amqp_asyncio
    import amqp_trio
    from amqp_sansio.client import Message as Message091

AsyncSession: TypeAlias = "amqp_asyncio.Session010 | amqp_trio.Session010"
AsyncChannel: TypeAlias = "amqp_asyncio.Channel | amqp_trio.Channel"

MESSAGE_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def full_properties(n: int) -> Properties:
    return Properties(
        content_type="text/plain",
        content_encoding="utf-8",
        headers={"n": n, "who": "0-10"},
        persistent=True,
        priority=3,
        message_id=MESSAGE_ID,
        correlation_id=f"corr-{n}",
        reply_to=("amq.direct", "replies"),
        app_id="tests",
    )


async def topology_and_messages(session: AsyncSession) -> None:
    """Declare, bind, query, transfer with properties, subscribe with credit, accept,
    release, reject into the alternate exchange, browse, a transaction, delete."""
    alt, dead, queue, exchange = unique("alt"), unique("dead"), unique("q"), unique("x")
    await session.exchange_declare(alt, "fanout")
    await session.queue_declare(dead, auto_delete=True)
    await session.exchange_bind(dead, alt)
    await session.exchange_declare(exchange, "topic")
    await session.queue_declare(queue, alternate_exchange=alt)
    await session.exchange_bind(queue, exchange, "a.*")
    bound = await session.exchange_bound(exchange, queue, "a.*")
    assert not (bound.exchange_not_found)
    assert not (bound.queue_not_matched)
    assert not (bound.key_not_matched)
    assert (await session.exchange_bound(exchange, queue, "b.*")).key_not_matched
    assert (await session.exchange_query(exchange)).type == "topic"
    assert (await session.exchange_query(unique("none"))).not_found
    for n in range(3):
        await session.transfer(
            exchange, b"body %d" % n, routing_key="a.b", properties=full_properties(n)
        )
    await session.transfer(exchange, b"unrouted", routing_key="z.z")
    info = await session.queue_query(queue)
    assert (info.queue, info.message_count, info.alternate_exchange) == (queue, 3, alt)

    browser = await session.subscribe(queue, acquire=False, accept=False)
    seen = [await browser.get() for _ in range(3)]
    assert [m.body if m else None for m in seen] == [b"body 0", b"body 1", b"body 2"]
    await browser.cancel()
    assert (await session.queue_query(queue)).message_count == 3  # browsing took nothing

    sub = await session.subscribe(queue, prefetch=2)
    first = await sub.get()
    assert first is not None
    assert first.body == b"body 0"
    assert (first.routing_key, first.exchange, first.redelivered) == ("a.b", exchange, False)
    assert first.headers == {"n": 0, "who": "0-10"}
    assert first.content_type == "text/plain"
    assert first.message_id == MESSAGE_ID
    assert first.correlation_id == "corr-0"  # given as str: comes back a str
    assert (first.content_encoding, first.priority, first.app_id) == ("utf-8", 3, "tests")
    assert first.properties == full_properties(0)  # the header segment round-trips as given
    assert first.reply_to == ("amq.direct", "replies")
    assert first.persistent
    assert first.delivery_properties.priority == 3
    first.accept()
    second = await sub.get()
    assert second is not None
    assert second.body == b"body 1"
    second.release()
    again = await sub.get()
    assert again is not None
    assert again.body == b"body 1" or again.body == b"body 2"
    rest = [again]
    while len(rest) < 2:
        message = await sub.get()
        assert message is not None
        rest.append(message)
    by_body = {m.body: m for m in rest}
    assert by_body[b"body 1"].redelivered
    by_body[b"body 1"].accept()
    by_body[b"body 2"].reject()  # to the alternate exchange, then the dead queue
    with pytest.raises(RuntimeError):
        by_body[b"body 2"].accept()  # settled once only
    await session.sync()
    assert (await session.queue_query(dead)).message_count == 1
    await sub.cancel()
    assert await sub.get() is None

    await session.tx_select()
    await session.transfer("", b"rolled back", routing_key=queue)
    await session.tx_rollback()
    assert (await session.queue_query(queue)).message_count == 0
    await session.transfer("", b"committed", routing_key=queue)
    await session.tx_commit()
    assert (await session.queue_query(queue)).message_count == 1
    await session.queue_purge(queue)
    await session.queue_delete(queue)
    await session.exchange_delete(exchange)
    await session.queue_delete(dead)
    await session.exchange_delete(alt)


async def errors_end_the_session(session: AsyncSession) -> None:
    """``execution.exception`` is a typed error; the session is unusable afterwards."""
    with pytest.raises(NotFoundError) as info:
        await session.queue_declare(unique("missing"), passive=True)
    assert info.value.error_code == 404
    assert isinstance(info.value, ExecutionError)
    with pytest.raises((NotFoundError, SessionEndedError)):
        await session.queue_query("anything")


async def alternate_in_use(session: AsyncSession) -> None:
    """0-10's alternate-exchange rules (the broker's, seen through the client)."""
    alt, queue = unique("alt"), unique("q")
    await session.exchange_declare(alt, "fanout")
    await session.queue_declare(queue, alternate_exchange=alt, auto_delete=True)
    with pytest.raises(ExecutionError) as info:
        await session.exchange_delete(alt)
    assert info.value.error_code == 530


async def published_here_consumed_there(session: AsyncSession, channel: AsyncChannel) -> None:
    """0-10 in, 0-9-1 out, and the reverse, over one broker: the property mapping of
    ``docs/amqp-0-10.md``."""
    queue = unique("cross")
    await session.queue_declare(queue)
    await session.transfer("", b"from 0-10", routing_key=queue, properties=full_properties(7))
    got: Message091 | None = await channel.basic_get(queue, no_ack=True)
    assert got is not None
    assert got.body == b"from 0-10"
    props = got.properties
    assert props.content_type == "text/plain"
    assert props.content_encoding == "utf-8"
    assert props.delivery_mode == 2
    assert props.priority == 3
    assert props.headers == {"n": 7, "who": "0-10"}
    assert props.message_id == str(MESSAGE_ID)
    assert props.correlation_id == "corr-7"
    assert props.reply_to == "amq.direct/replies"
    assert props.app_id == "tests"

    await channel.basic_publish(
        b"from 0-9-1",
        routing_key=queue,
        properties=BasicProperties(
            content_type="application/json",
            headers={"k": "v", "i": 5},
            delivery_mode=2,
            message_id="not-a-uuid",
            correlation_id="c-1",
            reply_to="replies",
            expiration="60000",
        ),
    )
    sub = await session.subscribe(queue)
    message = await sub.get()
    assert message is not None
    assert message.body == b"from 0-9-1"
    assert message.content_type == "application/json"
    assert message.headers == {"k": "v", "i": 5, "x-amqp-0-9-1-message-id": "not-a-uuid"}
    assert message.persistent
    assert message.correlation_id == "c-1"
    assert message.reply_to == ("", "replies")
    assert message.delivery_properties.ttl == 60000
    message.accept()
    await session.sync()
    await sub.cancel()
    await session.queue_delete(queue)
