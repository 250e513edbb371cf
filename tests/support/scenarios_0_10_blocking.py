"""The 0-10 scenarios of :mod:`tests.support.scenarios_0_10`, step for step, for
``amqp_blocking`` (the same code without ``await``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import pytest

import amqp_blocking
from amqp_sansio import BasicProperties
from amqp_sansio.v0_10.client import (
    ExecutionError,
    NotFoundError,
    SessionEndedError,
)
from tests.support.scenarios_0_10 import MESSAGE_ID, full_properties, unique

__all__ = [
    "alternate_in_use",
    "errors_end_the_session",
    "published_here_consumed_there",
    "topology_and_messages",
    "unique",
]

if TYPE_CHECKING:
    from amqp_sansio.client import Message as Message091

Session: TypeAlias = amqp_blocking.Session010
Channel: TypeAlias = amqp_blocking.Channel


def topology_and_messages(session: Session) -> None:
    """Declare, bind, query, transfer with properties, subscribe with credit, accept,
    release, reject into the alternate exchange, browse, a transaction, delete."""
    alt, dead, queue, exchange = unique("alt"), unique("dead"), unique("q"), unique("x")
    session.exchange_declare(alt, "fanout")
    session.queue_declare(dead, auto_delete=True)
    session.exchange_bind(dead, alt)
    session.exchange_declare(exchange, "topic")
    session.queue_declare(queue, alternate_exchange=alt)
    session.exchange_bind(queue, exchange, "a.*")
    bound = session.exchange_bound(exchange, queue, "a.*")
    assert not (bound.exchange_not_found)
    assert not (bound.queue_not_matched)
    assert not (bound.key_not_matched)
    assert (session.exchange_bound(exchange, queue, "b.*")).key_not_matched
    assert (session.exchange_query(exchange)).type == "topic"
    assert (session.exchange_query(unique("none"))).not_found
    for n in range(3):
        session.transfer(exchange, b"body %d" % n, routing_key="a.b", properties=full_properties(n))
    session.transfer(exchange, b"unrouted", routing_key="z.z")
    info = session.queue_query(queue)
    assert (info.queue, info.message_count, info.alternate_exchange) == (queue, 3, alt)

    browser = session.subscribe(queue, acquire=False, accept=False)
    seen = [browser.get() for _ in range(3)]
    assert [m.body if m else None for m in seen] == [b"body 0", b"body 1", b"body 2"]
    browser.cancel()
    assert (session.queue_query(queue)).message_count == 3  # browsing took nothing

    sub = session.subscribe(queue, prefetch=2)
    first = sub.get()
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
    second = sub.get()
    assert second is not None
    assert second.body == b"body 1"
    second.release()
    again = sub.get()
    assert again is not None
    assert again.body == b"body 1" or again.body == b"body 2"
    rest = [again]
    while len(rest) < 2:
        message = sub.get()
        assert message is not None
        rest.append(message)
    by_body = {m.body: m for m in rest}
    assert by_body[b"body 1"].redelivered
    by_body[b"body 1"].accept()
    by_body[b"body 2"].reject()  # to the alternate exchange, then the dead queue
    with pytest.raises(RuntimeError):
        by_body[b"body 2"].accept()  # settled once only
    session.sync()
    assert (session.queue_query(dead)).message_count == 1
    sub.cancel()
    assert sub.get() is None

    session.tx_select()
    session.transfer("", b"rolled back", routing_key=queue)
    session.tx_rollback()
    assert (session.queue_query(queue)).message_count == 0
    session.transfer("", b"committed", routing_key=queue)
    session.tx_commit()
    assert (session.queue_query(queue)).message_count == 1
    session.queue_purge(queue)
    session.queue_delete(queue)
    session.exchange_delete(exchange)
    session.queue_delete(dead)
    session.exchange_delete(alt)


def errors_end_the_session(session: Session) -> None:
    """``execution.exception`` is a typed error; the session is unusable afterwards."""
    with pytest.raises(NotFoundError) as info:
        session.queue_declare(unique("missing"), passive=True)
    assert info.value.error_code == 404
    assert isinstance(info.value, ExecutionError)
    with pytest.raises((NotFoundError, SessionEndedError)):
        session.queue_query("anything")


def alternate_in_use(session: Session) -> None:
    """0-10's alternate-exchange rules (the broker's, seen through the client)."""
    alt, queue = unique("alt"), unique("q")
    session.exchange_declare(alt, "fanout")
    session.queue_declare(queue, alternate_exchange=alt, auto_delete=True)
    with pytest.raises(ExecutionError) as info:
        session.exchange_delete(alt)
    assert info.value.error_code == 530


def published_here_consumed_there(session: Session, channel: Channel) -> None:
    """0-10 in, 0-9-1 out, and the reverse, over one broker: the property mapping of
    ``docs/amqp-0-10.md``."""
    queue = unique("cross")
    session.queue_declare(queue)
    session.transfer("", b"from 0-10", routing_key=queue, properties=full_properties(7))
    got: Message091 | None = channel.basic_get(queue, no_ack=True)
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

    channel.basic_publish(
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
    sub = session.subscribe(queue)
    message = sub.get()
    assert message is not None
    assert message.body == b"from 0-9-1"
    assert message.content_type == "application/json"
    assert message.headers == {"k": "v", "i": 5, "x-amqp-0-9-1-message-id": "not-a-uuid"}
    assert message.persistent
    assert message.correlation_id == "c-1"
    assert message.reply_to == ("", "replies")
    assert message.delivery_properties.ttl == 60000
    message.accept()
    session.sync()
    sub.cancel()
    session.queue_delete(queue)
