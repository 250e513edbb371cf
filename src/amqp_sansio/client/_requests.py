"""The channel requests of the client adapters, without I/O: what each channel method sends and
what it makes of the reply.

An adapter's channel method is three steps: build the request here, send it (and wait for the
reply) with the adapter's own primitives, and interpret the reply here. Field values are
checked where they are encoded (``Connection.send_method`` raises ``LocalProtocolError``
naming the field), so the builders check only what the core cannot know: the adapters' own
arguments (consumer tags, buffer sizes, publisher windows). The per-message hot paths
(``basic_publish``, ``basic_ack``, consumer iteration) build their methods inline in the
adapters: a call more per message would show in the benchmarks.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final, TypeVar

import attrs

from .. import (
    BasicCancel,
    BasicConsume,
    BasicGet,
    BasicGetEmpty,
    BasicNack,
    BasicQos,
    BasicRecover,
    BasicReject,
    ChannelFlow,
    ChannelFlowOk,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
)
from ._params import ConnectionParameters

if TYPE_CHECKING:
    import logging
    from collections.abc import Container

    from .. import FieldTable, Method

__all__ = [
    "DEFAULT_CONSUMER_BUFFER",
    "basic_cancel",
    "basic_consume",
    "basic_get",
    "basic_nack",
    "basic_qos",
    "basic_recover",
    "basic_reject",
    "check_window",
    "connection_parameters",
    "consumer_buffer_size",
    "consumer_tag",
    "declared_queue",
    "exchange_bind",
    "exchange_declare",
    "exchange_delete",
    "exchange_unbind",
    "flow",
    "flow_state",
    "got_message",
    "message_count",
    "queue_bind",
    "queue_declare",
    "queue_delete",
    "queue_purge",
    "queue_unbind",
    "report_dropped",
]

#: A consumer's buffer when the channel has no prefetch count and none was given.
DEFAULT_CONSUMER_BUFFER: Final = 1000

_M = TypeVar("_M")


def connection_parameters(
    url_or_params: str | ConnectionParameters, connection_name: str | None
) -> ConnectionParameters:
    """What ``connect(url_or_params, connection_name=...)`` connects with.

    :raises TypeError: *url_or_params* is neither a URL nor :class:`ConnectionParameters`.
    :raises ValueError: the URL is malformed (see :meth:`ConnectionParameters.from_url`).
    """
    if isinstance(url_or_params, ConnectionParameters):
        params = url_or_params
    elif isinstance(url_or_params, str):
        params = ConnectionParameters.from_url(url_or_params)
    else:
        raise TypeError(
            "url_or_params must be an AMQP URL or ConnectionParameters, not "
            f"{type(url_or_params).__name__}"
        )
    if connection_name is not None:
        params = attrs.evolve(params, connection_name=connection_name)
    return params


# --- exchange ---------------------------------------------------------------------------------


def exchange_declare(
    exchange: str,
    exchange_type: str,
    *,
    passive: bool,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: FieldTable | None,
) -> ExchangeDeclare:
    """``exchange.declare`` (answered by ``exchange.declare-ok``)."""
    return ExchangeDeclare(
        exchange=exchange,
        type=exchange_type,
        passive=passive,
        durable=durable,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments or {},
    )


def exchange_delete(exchange: str, *, if_unused: bool) -> ExchangeDelete:
    """``exchange.delete``."""
    return ExchangeDelete(exchange=exchange, if_unused=if_unused)


def exchange_bind(
    destination: str, source: str, routing_key: str, *, arguments: FieldTable | None
) -> ExchangeBind:
    """``exchange.bind`` (RabbitMQ extension)."""
    return ExchangeBind(
        destination=destination, source=source, routing_key=routing_key, arguments=arguments or {}
    )


def exchange_unbind(
    destination: str, source: str, routing_key: str, *, arguments: FieldTable | None
) -> ExchangeUnbind:
    """``exchange.unbind`` (RabbitMQ extension)."""
    return ExchangeUnbind(
        destination=destination, source=source, routing_key=routing_key, arguments=arguments or {}
    )


# --- queue ------------------------------------------------------------------------------------


def queue_declare(
    queue: str,
    *,
    passive: bool,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: FieldTable | None,
) -> QueueDeclare:
    """``queue.declare``; read its reply with :func:`declared_queue`."""
    return QueueDeclare(
        queue=queue,
        passive=passive,
        durable=durable,
        exclusive=exclusive,
        auto_delete=auto_delete,
        arguments=arguments or {},
    )


def queue_bind(
    queue: str, exchange: str, routing_key: str, *, arguments: FieldTable | None
) -> QueueBind:
    """``queue.bind``."""
    return QueueBind(
        queue=queue, exchange=exchange, routing_key=routing_key, arguments=arguments or {}
    )


def queue_unbind(
    queue: str, exchange: str, routing_key: str, *, arguments: FieldTable | None
) -> QueueUnbind:
    """``queue.unbind``."""
    return QueueUnbind(
        queue=queue, exchange=exchange, routing_key=routing_key, arguments=arguments or {}
    )


def queue_purge(queue: str) -> QueuePurge:
    """``queue.purge``; read its reply with :func:`message_count`."""
    return QueuePurge(queue=queue)


def queue_delete(queue: str, *, if_unused: bool, if_empty: bool) -> QueueDelete:
    """``queue.delete``; read its reply with :func:`message_count`."""
    return QueueDelete(queue=queue, if_unused=if_unused, if_empty=if_empty)


# --- basic ------------------------------------------------------------------------------------


def basic_qos(prefetch_count: int, *, prefetch_size: int, global_: bool) -> BasicQos:
    """``basic.qos``."""
    return BasicQos(prefetch_count=prefetch_count, prefetch_size=prefetch_size, global_=global_)


def consumer_tag(requested: str, prefix: str, in_use: Container[str]) -> str:
    """The tag for a new consumer: *requested*, or ``prefix.<random hex>`` when it is empty.

    :raises ValueError: the tag is already in use on the channel (*in_use*).
    """
    tag = requested or f"{prefix}.{uuid.uuid4().hex}"
    if tag in in_use:
        raise ValueError(f"consumer tag {tag!r} is already in use on this channel")
    return tag


def consumer_buffer_size(buffer_size: int | None, prefetch_count: int) -> int:
    """A consumer's buffer: *buffer_size* when given, else the channel's prefetch count, else
    :data:`DEFAULT_CONSUMER_BUFFER` (also for a size below 1)."""
    size = buffer_size if buffer_size is not None else prefetch_count
    return size if size > 0 else DEFAULT_CONSUMER_BUFFER


def basic_consume(
    queue: str, tag: str, *, no_ack: bool, exclusive: bool, arguments: FieldTable | None
) -> BasicConsume:
    """``basic.consume`` with the tag from :func:`consumer_tag`."""
    return BasicConsume(
        queue=queue, consumer_tag=tag, no_ack=no_ack, exclusive=exclusive, arguments=arguments or {}
    )


def basic_cancel(tag: str) -> BasicCancel:
    """``basic.cancel``."""
    return BasicCancel(consumer_tag=tag)


def basic_get(queue: str, *, no_ack: bool) -> BasicGet:
    """``basic.get``; read its reply with :func:`got_message`."""
    return BasicGet(queue=queue, no_ack=no_ack)


def basic_nack(delivery_tag: int, *, multiple: bool, requeue: bool) -> BasicNack:
    """``basic.nack`` (RabbitMQ extension; no reply)."""
    return BasicNack(delivery_tag=delivery_tag, multiple=multiple, requeue=requeue)


def basic_reject(delivery_tag: int, *, requeue: bool) -> BasicReject:
    """``basic.reject`` (no reply)."""
    return BasicReject(delivery_tag=delivery_tag, requeue=requeue)


def basic_recover(requeue: bool) -> BasicRecover:
    """``basic.recover``."""
    return BasicRecover(requeue=requeue)


def check_window(window: int) -> int:
    """A publisher's window of unconfirmed publishes.

    :raises ValueError: *window* is not a positive int.
    """
    if type(window) is not int or window < 1:
        raise ValueError(f"window must be a positive int, not {window!r}")
    return window


def flow(active: bool) -> ChannelFlow:
    """``channel.flow``; read its reply with :func:`flow_state`."""
    return ChannelFlow(active=active)


# --- replies ----------------------------------------------------------------------------------


def _unexpected(expected: str, reply: object) -> AssertionError:
    # The core matched the reply to the request, so this is a bug, never the peer's doing.
    return AssertionError(f"expected {expected}, got {reply!r}")


def declared_queue(reply: object) -> QueueDeclareOk:
    """The reply to ``queue.declare``: the queue's name and counts."""
    if type(reply) is not QueueDeclareOk:
        raise _unexpected("queue.declare-ok", reply)
    return reply


def message_count(reply: object) -> int:
    """The message count of a ``queue.purge-ok`` or ``queue.delete-ok``."""
    if type(reply) is QueuePurgeOk or type(reply) is QueueDeleteOk:
        return reply.message_count
    raise _unexpected("queue.purge-ok or queue.delete-ok", reply)


def flow_state(reply: object) -> bool:
    """The state a ``channel.flow-ok`` confirms."""
    if type(reply) is not ChannelFlowOk:
        raise _unexpected("channel.flow-ok", reply)
    return reply.active


def got_message(reply: Method | _M | None, message_type: type[_M]) -> _M | None:
    """The reply to ``basic.get``: None for ``basic.get-empty``, else the message as the
    adapter's router handed it over (a *message_type*)."""
    if type(reply) is BasicGetEmpty:
        return None
    if isinstance(reply, message_type):
        return reply
    raise _unexpected(f"basic.get-empty or a {message_type.__name__}", reply)


def report_dropped(
    logger: logging.Logger, tag: str, dropped: int, *, no_ack: bool, channel: int
) -> None:
    """Log the deliveries a stopped consumer never handed out (nothing when none)."""
    if not dropped:
        return
    if no_ack:
        logger.warning(
            "consumer %s stopped with %d no-ack deliveries not handed out; they are lost",
            tag,
            dropped,
        )
    else:
        logger.info(
            "consumer %s stopped with %d deliveries not handed out; they stay "
            "unacknowledged and are redelivered when channel %d closes",
            tag,
            dropped,
            channel,
        )
