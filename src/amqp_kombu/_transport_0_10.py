"""The kombu transport over amqp_blocking's AMQP 0-10 client (``transport_options={"protocol":
"0-10"}``): kombu's channels are 0-10 sessions, its consumers subscriptions.

kombu speaks 0-9-1's concepts; on 0-10 they map as follows. Exchanges and queues are declared
with the same flags (0-10 has no server-named queues: a queue declared without a name is named
here). A queue binding is ``exchange.bind``; an exchange-to-exchange binding has no 0-10
equivalent and is refused. A publish is a ``message.transfer`` (with ``confirm_publish``, sent
with the sync bit: it returns once the broker completed it, 0-10's confirm). A consumer is a
subscription in credit mode with the channel's prefetch as its credit (granted back as
``drain_events`` takes messages); an ack is ``message.accept``, a requeue ``message.release``,
a reject without requeue ``message.reject``. ``basic_get`` subscribes with one message of credit
and flushes (``message.flush``). Message counts come from ``queue.query``.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Final, final

from kombu.transport import base

import amqp_blocking
from amqp_sansio.v0_10 import MessageFlush
from amqp_sansio.v0_10.client import Properties

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from amqp_sansio import BasicProperties, FieldTable
    from amqp_sansio.v0_10 import Map, Value
    from amqp_sansio.v0_10.client import Message as Message010Raw

    from ._transport import OutgoingMessage, QueueDeclared

    # kombu's bases are duck-typed and unannotated: see _transport.
    _MessageBase = object
    _ChannelBase = object
else:
    _MessageBase = base.Message
    _ChannelBase = base.StdChannel

__all__ = ["Channel010", "Connection010", "Message010"]

#: The credit of a subscription started before any ``basic_qos`` (kombu's consumers set one).
DEFAULT_CREDIT: Final = 100
#: 0-10's "no limit" for credit (``basic_qos(prefetch_count=0)``).
UNLIMITED_CREDIT: Final = 0xFFFF_FFFF


@final
class Message010(_MessageBase):
    """A received 0-10 transfer as kombu sees it: ``delivery_tag`` is its command id on the
    session, ``delivery_info["consumer_tag"]`` the subscription's destination."""

    def __init__(self, raw: Message010Raw, channel: Channel010) -> None:
        props = raw.message_properties
        delivery = raw.delivery_properties
        correlation = props.correlation_id
        reply_to = raw.reply_to
        properties: dict[str, object] = {
            "delivery_mode": 2 if raw.persistent else 1,
            "application_headers": raw.headers,
        }
        optional: dict[str, object | None] = {
            "content_type": props.content_type,
            "content_encoding": props.content_encoding,
            "priority": delivery.priority,
            "correlation_id": None
            if correlation is None
            else correlation.decode("utf-8", "replace"),
            "reply_to": None if reply_to is None else reply_to[1],
            "message_id": None if props.message_id is None else str(props.message_id),
            "app_id": None if props.app_id is None else props.app_id.decode("utf-8", "replace"),
            "user_id": None if props.user_id is None else props.user_id.decode("utf-8", "replace"),
        }
        properties.update({k: v for k, v in optional.items() if v is not None})
        base.Message.__init__(  # type: ignore[no-untyped-call]
            self,  # type: ignore[arg-type]  # a kombu Message at run time (see _MessageBase)
            body=raw.body,
            channel=channel,
            delivery_tag=raw.command_id,
            content_type=props.content_type,
            content_encoding=props.content_encoding,
            delivery_info={
                "consumer_tag": raw.destination,
                "delivery_tag": raw.command_id,
                "redelivered": raw.redelivered,
                "exchange": raw.exchange,
                "routing_key": raw.routing_key,
                "priority": delivery.priority,
            },
            properties=properties,
            headers=raw.headers,
        )


@final
class _Subscribed:
    """One consumer of a channel: its subscription and where its messages go."""

    __slots__ = ("callback", "no_ack", "on_cancel", "subscription")

    def __init__(
        self,
        subscription: amqp_blocking.Subscription010,
        callback: Callable[[Message010Raw], object] | None,
        on_cancel: Callable[[str], object] | None,
        no_ack: bool,
    ) -> None:
        self.subscription: Final = subscription
        self.callback: Final = callback
        self.on_cancel: Final = on_cancel
        self.no_ack: Final = no_ack


@final
class Channel010(_ChannelBase):
    """A kombu channel on an AMQP 0-10 session (py-amqp's method names and defaults, as
    :class:`~amqp_kombu.Channel`). An ``execution.exception`` ends the session: the call
    raises the typed error (a kombu channel error) and kombu opens another channel."""

    _ids: Final = itertools.count(1)

    def __init__(self, connection: Connection010, session: amqp_blocking.Session010) -> None:
        #: The transport connection (kombu reads ``channel.connection.client``).
        self.connection: Final = connection
        self._session = session
        self.channel_id: Final = next(self._ids)
        self.no_ack_consumers: set[str] = set()
        #: Never called: 0-10 has no ``basic.return``.
        self.events: dict[str, set[object]] = {"basic_return": set()}
        self._consumers: dict[str, _Subscribed] = {}
        #: Transfers delivered with explicit accept and not settled yet, by command id.
        self._unsettled: dict[int, Message010Raw] = {}
        self._credit = DEFAULT_CREDIT
        self._sync_publish = connection.confirm_publish

    def __repr__(self) -> str:
        return f"<amqp_kombu.Channel010 {self.channel_id} session {self._session.name!r}>"

    @property
    def is_open(self) -> bool:
        return not self._session.is_closed

    @property
    def session(self) -> amqp_blocking.Session010:
        """The amqp_blocking 0-10 session underneath."""
        return self._session

    # --- messages ----------------------------------------------------------------------------

    def prepare_message(
        self,
        body: bytes | str,
        priority: int | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
        headers: FieldTable | None = None,
        properties: Mapping[str, object] | None = None,
    ) -> OutgoingMessage:
        from ._transport import prepare_message

        return prepare_message(body, priority, content_type, content_encoding, headers, properties)

    def message_to_python(self, raw: Message010Raw) -> Message010:
        return Message010(raw, self)

    def prepare_queue_arguments(self, arguments: FieldTable, **kwargs: object) -> FieldTable:
        result: FieldTable = base.to_rabbitmq_queue_arguments(arguments, **kwargs)
        return result

    def basic_publish(
        self,
        message: OutgoingMessage,
        exchange: str = "",
        routing_key: str = "",
        mandatory: bool = False,
        immediate: bool = False,
        timeout: float | None = None,
        confirm_timeout: float | None = None,
    ) -> None:
        """``message.transfer``; with ``confirm_publish``, returns once the broker completed
        it. *mandatory* has no 0-10 meaning (an unroutable transfer is dropped, or goes to the
        exchange's alternate).

        :raises NotImplementedError: *immediate*.
        """
        if immediate:
            raise NotImplementedError("basic.publish with immediate=True has no 0-10 equivalent")
        self._session.transfer(
            exchange,
            message.body,
            routing_key=routing_key,
            properties=_properties_0_10(message.properties),
            sync=self._sync_publish,
        )

    # --- declarations ------------------------------------------------------------------------

    def exchange_declare(
        self,
        exchange: str,
        type: str,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = True,
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self._session.exchange_declare(
            exchange,
            type,
            passive=passive,
            durable=durable,
            auto_delete=auto_delete,
            arguments=_map(arguments),
        )

    def exchange_delete(self, exchange: str, if_unused: bool = False, nowait: bool = False) -> None:
        self._session.exchange_delete(exchange, if_unused=if_unused)

    def exchange_bind(
        self,
        destination: str,
        source: str = "",
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        raise NotImplementedError("AMQP 0-10 has no exchange-to-exchange bindings")

    def exchange_unbind(
        self,
        destination: str,
        source: str = "",
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        raise NotImplementedError("AMQP 0-10 has no exchange-to-exchange bindings")

    def queue_declare(
        self,
        queue: str = "",
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = True,
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> QueueDeclared:
        """Declare *queue* (named here when it has no name: 0-10 has no server-named queues)
        and return its name and counts (from ``queue.query``). An exclusive queue is the
        declaring session's in 0-10: only this channel may consume from it."""
        from ._transport import QueueDeclared

        name = queue or f"amqp-kombu.gen-{uuid.uuid4().hex}"
        self._session.queue_declare(
            name,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=_map(arguments),
        )
        found = self._session.queue_query(name)
        return QueueDeclared(name, found.message_count or 0, found.subscriber_count or 0)

    def queue_bind(
        self,
        queue: str,
        exchange: str = "",
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self._session.exchange_bind(queue, exchange, routing_key, _map(arguments))

    def queue_unbind(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self._session.exchange_unbind(queue, exchange, routing_key)

    def queue_purge(self, queue: str = "", nowait: bool = False) -> int:
        count = self._session.queue_query(queue).message_count or 0
        self._session.queue_purge(queue)
        return count

    def queue_delete(
        self, queue: str = "", if_unused: bool = False, if_empty: bool = False, nowait: bool = False
    ) -> int:
        """Delete *queue*; returns how many messages it held. A queue that does not exist is
        no error (as RabbitMQ's 0-9-1 ``queue.delete``)."""
        found = self._session.queue_query(queue)
        if found.queue is None:
            return 0
        self._session.queue_delete(queue, if_unused=if_unused, if_empty=if_empty)
        return found.message_count or 0

    # --- consuming and settling --------------------------------------------------------------

    def basic_qos(self, prefetch_size: int, prefetch_count: int, a_global: bool) -> None:
        """The credit of the subscriptions started after it (0-10 credit is per
        subscription; ``prefetch_size`` is not limited). Credit comes back as messages are
        taken, not as they are acked."""
        self._credit = prefetch_count or UNLIMITED_CREDIT

    def basic_consume(
        self,
        queue: str = "",
        consumer_tag: str = "",
        no_local: bool = False,
        no_ack: bool = False,
        exclusive: bool = False,
        nowait: bool = False,
        callback: Callable[[Message010Raw], object] | None = None,
        arguments: FieldTable | None = None,
        on_cancel: Callable[[str], object] | None = None,
    ) -> str:
        tag = consumer_tag or f"amqp-kombu.{uuid.uuid4().hex[:12]}"
        subscription = self._session.subscribe(
            queue,
            destination=tag,
            accept=not no_ack,
            exclusive=exclusive,
            arguments=_map(arguments),
            prefetch=self._credit,
        )
        self._consumers[tag] = _Subscribed(subscription, callback, on_cancel, no_ack)
        self.connection._subscribed(subscription, self)
        if no_ack:
            self.no_ack_consumers.add(tag)
        return tag

    def basic_cancel(self, consumer_tag: str, nowait: bool = False) -> None:
        """Cancel a subscription; what it had received still reaches its callback here (as
        :meth:`amqp_kombu.Channel.basic_cancel` does)."""
        subscribed = self._consumers.get(consumer_tag)
        self.no_ack_consumers.discard(consumer_tag)
        if subscribed is None:
            return
        try:
            subscribed.subscription.cancel()
            self.connection._dispatch_waiting()
        finally:
            self._consumers.pop(consumer_tag, None)
            self.connection._unsubscribed(subscribed.subscription)

    def basic_get(self, queue: str = "", no_ack: bool = False) -> Message010Raw | None:
        """One message, or None: a subscription with one message of credit, flushed."""
        destination = f"amqp-kombu.get-{uuid.uuid4().hex[:12]}"
        subscription = self._session.subscribe(
            queue, destination=destination, accept=not no_ack, prefetch=1
        )
        try:
            self._session.execute(MessageFlush(destination=destination))
            try:
                message = subscription.get(timeout=0)
            except TimeoutError:
                message = None
        finally:
            subscription.cancel()
        if message is not None and not no_ack:
            self._unsettled[message.command_id] = message
        return message

    def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        for message in self._settling(delivery_tag, multiple):
            message.accept()

    def basic_reject(self, delivery_tag: int, requeue: bool = True) -> None:
        for message in self._settling(delivery_tag, False):
            if requeue:
                message.release(redelivered=True)
            else:
                message.reject()

    def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        for message in self._settling(delivery_tag, multiple):
            if requeue:
                message.release(redelivered=True)
            else:
                message.reject()

    def basic_recover(self, requeue: bool = False) -> None:
        """Give every unsettled message back (``message.release``)."""
        unsettled, self._unsettled = self._unsettled, {}
        for message in unsettled.values():
            message.release(redelivered=True)

    def flow(self, active: bool) -> bool:
        raise NotImplementedError("channel.flow has no 0-10 equivalent here (use credit)")

    def _settling(self, delivery_tag: int, multiple: bool) -> list[Message010Raw]:
        if not multiple:
            message = self._unsettled.pop(delivery_tag, None)
            if message is None:
                raise ValueError(f"unknown delivery tag {delivery_tag} on {self!r}")
            return [message]
        tags = [tag for tag in self._unsettled if tag <= delivery_tag]
        return [self._unsettled.pop(tag) for tag in sorted(tags)]

    def close(self) -> None:
        consumers = list(self._consumers.values())
        self._consumers.clear()
        self.no_ack_consumers.clear()
        for subscribed in consumers:
            self.connection._unsubscribed(subscribed.subscription)
        self._unsettled.clear()  # the broker releases them when the session ends
        self.connection._forget(self)
        with contextlib.suppress(amqp_blocking.AMQPError):
            self._session.close()

    def _dispatch(self, subscription: amqp_blocking.Subscription010, raw: Message010Raw) -> None:
        subscribed = self._consumers.get(subscription.destination)
        if subscribed is None or subscribed.callback is None:
            if not raw.settled and subscribed is not None and not subscribed.no_ack:
                raw.release()
            return
        if not subscribed.no_ack:
            self._unsettled[raw.command_id] = raw
        subscribed.callback(raw)


@final
class Connection010:
    """What ``kombu.Connection.connection`` is with ``protocol="0-10"``: an amqp_blocking
    0-10 connection and the sessions of its channels."""

    def __init__(self, conn: amqp_blocking.Connection010, *, confirm_publish: bool) -> None:
        self._conn = conn
        #: The kombu connection (kombu sets it).
        self.client: object = None
        #: Whether transfers are synced (0-10's publisher confirm).
        self.confirm_publish: Final = confirm_publish
        self._channels: dict[int, Channel010] = {}
        self._subscriptions: dict[amqp_blocking.Subscription010, Channel010] = {}

    def __repr__(self) -> str:
        return f"<amqp_kombu.Connection010 {self._conn!r}>"

    @property
    def blocking_connection(self) -> amqp_blocking.Connection010:
        """The amqp_blocking 0-10 connection underneath."""
        return self._conn

    @property
    def connected(self) -> bool:
        return not self._conn.is_closed

    @property
    def heartbeat(self) -> int:
        return self._conn.heartbeat

    @property
    def server_properties(self) -> Map:
        return self._conn.server_properties

    def channel(self) -> Channel010:
        channel = Channel010(self, self._conn.open_session())
        self._channels[channel.channel_id] = channel
        return channel

    def _forget(self, channel: Channel010) -> None:
        self._channels.pop(channel.channel_id, None)

    def _subscribed(self, subscription: amqp_blocking.Subscription010, channel: Channel010) -> None:
        self._subscriptions[subscription] = channel

    def _unsubscribed(self, subscription: amqp_blocking.Subscription010) -> None:
        self._subscriptions.pop(subscription, None)

    def drain_events(self, timeout: float | None = None) -> None:
        """Wait for the next message of any subscription and run its callback.

        :raises socket.timeout: nothing came within *timeout* seconds.
        :raises ExecutionError: a consuming session failed (a kombu channel error).
        :raises ConnectionClosedError: the connection is over (also ``ConnectionLostError``).
        """
        if not self._take(timeout):
            raise TimeoutError(f"no message within {timeout} s")  # socket.timeout: kombu's

    def _dispatch_waiting(self) -> None:
        while self._take(0):
            pass

    def _take(self, timeout: float | None) -> bool:
        subscriptions = list(self._subscriptions)
        ready = self._conn.wait_any(subscriptions, timeout)
        if ready is None:
            return False
        channel = self._subscriptions[ready]
        message = ready.get(timeout=0)
        if message is None:  # cancelled
            self._unsubscribed(ready)
            return True
        channel._dispatch(ready, message)
        return True

    def heartbeat_check(self) -> None:
        """Heartbeats are the I/O thread's: raise only when the connection is over."""
        if self._conn.is_closed:
            raise amqp_blocking.ConnectionLostError("the 0-10 connection is closed")

    def close(self) -> None:
        self._channels.clear()
        self._subscriptions.clear()
        self._conn.close()

    def collect(self) -> None:
        self.close()


def _properties_0_10(props: BasicProperties) -> Properties:
    """A 0-9-1 message's properties as a 0-10 transfer's (``expiration`` in milliseconds
    becomes the ttl; a ``message_id`` that is no UUID, 0-10's type, and ``type``,
    ``timestamp`` and ``cluster_id``, which 0-10 lacks, are not sent)."""
    message_id = None
    if props.message_id is not None:
        with contextlib.suppress(ValueError):
            message_id = uuid.UUID(props.message_id)
    ttl = None
    if props.expiration is not None:
        try:
            ttl = int(props.expiration)
        except ValueError:
            raise ValueError(
                f"expiration {props.expiration!r}: expected milliseconds as a string"
            ) from None
    return Properties(
        content_type=props.content_type,
        content_encoding=props.content_encoding,
        headers=_map(props.headers),
        persistent=None if props.delivery_mode is None else props.delivery_mode == 2,
        priority=props.priority,
        ttl=ttl,
        message_id=message_id,
        correlation_id=props.correlation_id,
        reply_to=None if props.reply_to is None else ("", props.reply_to),
        user_id=props.user_id,
        app_id=props.app_id,
    )


def _map(table: Mapping[str, object] | None) -> Map | None:
    """A field table as a 0-10 map.

    :raises ValueError: a value 0-10 has no type for (a ``Decimal``, a typed 0-9-1 value).
    """
    if not table:
        return None
    return {str(key): _value(key, value) for key, value in table.items()}


def _value(key: str, value: object) -> Value:
    if value is None or isinstance(value, (bool, int, float, str, bytes, datetime, uuid.UUID)):
        return value
    if isinstance(value, (list, tuple)):
        return [_value(key, item) for item in value]
    if isinstance(value, dict):
        return {str(k): _value(key, v) for k, v in value.items()}
    raise ValueError(f"{key}: a {type(value).__name__} value can't be sent over AMQP 0-10")
