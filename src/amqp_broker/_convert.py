"""Message properties between AMQP 0-10 and the model (0-9-1's ``basic`` properties).

One model holds every message as 0-9-1 properties; 0-10 transfers are converted on the way in
and out, field by field as in the table of ``docs/amqp-0-10.md`` (after Qpid Broker-J's
0-8/0-9 <-> 0-10 converters). A 0-10 ``message-id`` is a UUID; a 0-9-1 one that is not a UUID
travels in the application headers as ``x-amqp-0-9-1-message-id``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Final

from amqp_sansio import BasicProperties, FieldValue, TypedValue
from amqp_sansio.v0_10 import (
    Array,
    DeliveryProperties,
    MessageProperties,
    ReplyTo,
    Struct,
    Typed,
)

if TYPE_CHECKING:
    from amqp_sansio import FieldTable
    from amqp_sansio.v0_10 import Map, Value

__all__ = ["MESSAGE_ID_HEADER", "field_value", "from_0_10", "map_value", "to_0_10"]

#: Where a 0-9-1 message id that is not a UUID goes in 0-10 application headers.
MESSAGE_ID_HEADER: Final = "x-amqp-0-9-1-message-id"


def field_value(value: Value) -> FieldValue:
    """A 0-10 map value as a 0-9-1 field value."""
    if isinstance(value, Typed):
        value = value.value
    if isinstance(value, dict):
        return {k: field_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [field_value(v) for v in value]
    if isinstance(value, Array):
        return [field_value(v) for v in value.values]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Struct):
        return repr(value)
    if isinstance(value, (bool, int, float, str, bytes, datetime)) or value is None:
        return value
    return str(value)


def map_value(value: FieldValue) -> Value:
    """A 0-9-1 field value as a 0-10 map value."""
    if isinstance(value, TypedValue):
        value = value.value
    if isinstance(value, dict):
        return {k: map_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [map_value(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, (bool, int, float, str, bytes, datetime)) or value is None:
        return value
    return str(value)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def from_0_10(headers: tuple[Struct, ...]) -> tuple[str, BasicProperties]:
    """``(routing_key, properties)`` of a 0-10 transfer's header segment."""
    delivery = DeliveryProperties()
    props = MessageProperties()
    for entry in headers:
        if type(entry) is DeliveryProperties:
            delivery = entry
        elif type(entry) is MessageProperties:
            props = entry
    table: FieldTable | None = None
    if props.application_headers:
        table = {k: field_value(v) for k, v in props.application_headers.items()}
    message_id: str | None = None
    if props.message_id is not None:
        message_id = str(props.message_id)
    if table and isinstance(table.get(MESSAGE_ID_HEADER), str):
        message_id = str(table.pop(MESSAGE_ID_HEADER))
    reply_to: str | None = None
    if props.reply_to is not None:
        exchange, key = props.reply_to.exchange or "", props.reply_to.routing_key or ""
        reply_to = key if not exchange else f"{exchange}/{key}"
    properties = BasicProperties(
        content_type=props.content_type,
        content_encoding=props.content_encoding,
        headers=table or None,
        delivery_mode=delivery.delivery_mode,
        priority=delivery.priority,
        correlation_id=_text(props.correlation_id),
        reply_to=reply_to,
        expiration=None if delivery.ttl is None else str(delivery.ttl),
        message_id=message_id,
        timestamp=delivery.timestamp,
        user_id=_text(props.user_id),
        app_id=_text(props.app_id),
    )
    return delivery.routing_key or "", properties


def to_0_10(
    exchange: str, routing_key: str, properties: BasicProperties, redelivered: bool
) -> tuple[Struct, ...]:
    """The header segment of a transfer delivering a model message."""
    headers: Map | None = None
    table = properties.headers
    if table:
        headers = {k: map_value(v) for k, v in table.items()}
    message_id: uuid.UUID | None = None
    if properties.message_id is not None:
        try:
            message_id = uuid.UUID(properties.message_id)
        except ValueError:
            headers = dict(headers or {})
            headers[MESSAGE_ID_HEADER] = properties.message_id
    reply_to: ReplyTo | None = None
    if properties.reply_to is not None:
        exchange_part, slash, key = properties.reply_to.partition("/")
        reply_to = (
            ReplyTo(exchange=exchange_part, routing_key=key)
            if slash
            else ReplyTo(exchange="", routing_key=properties.reply_to)
        )
    ttl: int | None = None
    if properties.expiration is not None and properties.expiration.isdigit():
        ttl = int(properties.expiration)
    delivery = DeliveryProperties(
        redelivered=redelivered,
        priority=properties.priority,
        delivery_mode=properties.delivery_mode,
        ttl=ttl,
        timestamp=properties.timestamp,
        exchange=exchange,
        routing_key=routing_key,
    )
    message = MessageProperties(
        message_id=message_id,
        correlation_id=None
        if properties.correlation_id is None
        else properties.correlation_id.encode(),
        reply_to=reply_to,
        content_type=properties.content_type,
        content_encoding=properties.content_encoding,
        user_id=None if properties.user_id is None else properties.user_id.encode(),
        app_id=None if properties.app_id is None else properties.app_id.encode(),
        application_headers=headers,
    )
    # message-properties only when it holds something: byte credit counts the header
    # segment, and qpidd's header for a bare message is delivery-properties alone
    if message == _EMPTY:
        return (delivery,)
    return (delivery, message)


_EMPTY: Final = MessageProperties()
