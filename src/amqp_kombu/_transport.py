"""The kombu transport over amqp_blocking (AMQP 0-9-1): :class:`Transport`, the connection and
channel objects kombu drives, and the message it hands to consumers.

kombu's ``pyamqp`` transport is the model of what kombu expects: a connection with
``drain_events(timeout)`` that runs the consumers' callbacks in the calling thread, and channels
with py-amqp's method names and defaults. Here the socket, heartbeats and replies belong to
amqp_blocking's I/O thread; the consumers of all channels deliver into one
:class:`amqp_blocking.Inbox`, which ``drain_events`` takes from.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, NamedTuple, final

from kombu.transport import base

import amqp_blocking
from amqp_sansio import BasicProperties
from amqp_sansio.client import (
    ChannelClosedError,
    ConnectionClosedError,
    ConnectionForced,
    ConnectionLostError,
    ConnectionTimeoutError,
    ConsumerCancelledError,
    ContentTooLarge,
    InvalidPath,
    MessageReturnedError,
    NoConsumers,
    PublishNackedError,
    PublishOutcomeUnknownError,
    ResourceError,
    ResourceLocked,
)
from amqp_sansio.v0_10.client import ExecutionError, ResourceLockedError, SessionEndedError

from ._options import connection_parameters

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from amqp_sansio import FieldTable

    from ._transport_0_10 import Channel010, Connection010

    # kombu's bases are duck-typed and unannotated (their class attributes are typed None):
    # the checker sees this module's classes on their own.
    _MessageBase = object
    _ChannelBase = object
    _TransportBase = object
else:
    _MessageBase = base.Message
    _ChannelBase = base.StdChannel
    _TransportBase = base.Transport

__all__ = [
    "CHANNEL_ERRORS",
    "CONNECTION_ERRORS",
    "Channel",
    "Connection",
    "Message",
    "OutgoingMessage",
    "QueueDeclared",
    "SSLTransport",
    "Transport",
    "prepare_message",
]

logger = logging.getLogger("amqp_kombu")

DEFAULT_PORT: Final = 5672
DEFAULT_SSL_PORT: Final = 5671

#: What kombu treats as the connection failing (it reconnects for the recoverable ones).
CONNECTION_ERRORS: Final = (
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionTimeoutError,
    ConsumerCancelledError,
    PublishOutcomeUnknownError,
    OSError,
)
#: What kombu treats as one channel failing (over 0-10: the session's execution.exception).
CHANNEL_ERRORS: Final = (
    ChannelClosedError,
    PublishNackedError,
    MessageReturnedError,
    ExecutionError,
    SessionEndedError,
)

_RECOVERABLE_CONNECTION_ERRORS: Final = (
    ConnectionForced,  # 320: the broker is shutting down or an operator closed us
    InvalidPath,
    ResourceError,
    ConnectionLostError,
    ConnectionTimeoutError,
    # py-amqp makes both recoverable too: the consumer is started again on a new connection.
    ConsumerCancelledError,
    PublishNackedError,
    PublishOutcomeUnknownError,
    OSError,
)
_RECOVERABLE_CHANNEL_ERRORS: Final = (
    ContentTooLarge,
    NoConsumers,
    ResourceLocked,
    ResourceLockedError,
)

#: The properties kombu may pass to ``prepare_message`` (py-amqp's names).
_PROPERTY_NAMES: Final = frozenset(
    {
        "delivery_mode",
        "priority",
        "correlation_id",
        "reply_to",
        "expiration",
        "message_id",
        "timestamp",
        "type",
        "user_id",
        "app_id",
        "cluster_id",
        "content_type",
        "content_encoding",
        "application_headers",
    }
)


@final
class QueueDeclared(NamedTuple):
    """``queue_declare``'s answer, as py-amqp's ``queue_declare_ok_t``."""

    queue: str
    message_count: int
    consumer_count: int


@final
class OutgoingMessage(NamedTuple):
    """A message ``prepare_message`` made for ``basic_publish``."""

    body: bytes
    properties: BasicProperties


@final
class Message(_MessageBase):
    """A received message as kombu sees it (``body``, ``headers``, ``properties``,
    ``delivery_info``; ``ack()``/``reject()``/``requeue()`` on its channel)."""

    def __init__(self, raw: amqp_blocking.Message, channel: Channel) -> None:
        props = raw.properties
        headers = props.headers or {}
        base.Message.__init__(  # type: ignore[no-untyped-call]
            self,  # type: ignore[arg-type]  # a kombu Message at run time (see _MessageBase)
            body=raw.body,
            channel=channel,
            delivery_tag=raw.delivery_tag,
            content_type=props.content_type,
            content_encoding=props.content_encoding,
            delivery_info={
                "consumer_tag": raw.consumer_tag,
                "delivery_tag": raw.delivery_tag,
                "redelivered": raw.redelivered,
                "exchange": raw.exchange,
                "routing_key": raw.routing_key,
                "message_count": raw.message_count,
                "priority": props.priority,
            },
            properties=_properties_dict(props),
            headers=headers,
        )


def _properties_dict(props: BasicProperties) -> dict[str, object]:
    """The properties that are present, under py-amqp's names."""
    out: dict[str, object] = {}
    for name in _PROPERTY_NAMES:
        value = getattr(props, "headers" if name == "application_headers" else name)
        if value is not None:
            out[name] = value
    return out


def prepare_message(
    body: bytes | str,
    priority: int | None = None,
    content_type: str | None = None,
    content_encoding: str | None = None,
    headers: FieldTable | None = None,
    properties: Mapping[str, object] | None = None,
) -> OutgoingMessage:
    """The message a channel's ``basic_publish`` sends (kombu calls ``prepare_message`` with
    its serialized body). Names in *properties* that are no AMQP basic property are not sent,
    as in pyamqp (Celery passes some, ``origin`` on a retry)."""
    props = {name: value for name, value in (properties or {}).items() if name in _PROPERTY_NAMES}
    if isinstance(body, str):
        body = body.encode(content_encoding or "utf-8")
    app_headers = props.pop("application_headers", None)
    return OutgoingMessage(
        body,
        BasicProperties(
            content_type=content_type,
            content_encoding=content_encoding,
            headers=headers or app_headers or None,  # type: ignore[arg-type]
            priority=priority,
            **props,  # type: ignore[arg-type]
        ),
    )


@final
class Channel(_ChannelBase):
    """One AMQP channel with the methods kombu calls (py-amqp's names and defaults). ``nowait``
    is accepted and ignored: every call waits for its reply, which is how errors reach the
    call that caused them."""

    def __init__(self, connection: Connection, channel: amqp_blocking.Channel) -> None:
        #: The transport connection (kombu reads ``channel.connection.client``).
        self.connection: Final = connection
        self._channel = channel
        self.channel_id: Final = channel.number
        #: Tags of the no-ack consumers (kombu's Message.ack() skips those).
        self.no_ack_consumers: set[str] = set()
        #: kombu registers ``basic_return`` handlers here; returns outside confirm mode are
        #: only logged by amqp_blocking, so these are never called.
        self.events: dict[str, set[object]] = {"basic_return": set()}
        self._consumers: dict[str, _Consuming] = {}
        # Tags of no-ack consumers since cancelled: a late delivery of theirs needs no reject.
        self._cancelled_no_ack: set[str] = set()
        self._confirm = connection.confirm_publish
        if self._confirm:
            channel.confirm_select()

    def __repr__(self) -> str:
        return f"<amqp_kombu.Channel {self.channel_id}>"

    @property
    def is_open(self) -> bool:
        return not self._channel.is_closed

    @property
    def blocking_channel(self) -> amqp_blocking.Channel:
        """The amqp_blocking channel underneath."""
        return self._channel

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
        return prepare_message(body, priority, content_type, content_encoding, headers, properties)

    def message_to_python(self, raw: amqp_blocking.Message) -> Message:
        return Message(raw, self)

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
        """Publish; with ``confirm_publish`` on, return once the broker confirmed it.

        :raises NotImplementedError: *immediate* (RabbitMQ 3 refuses it too).
        :raises PublishNackedError: the broker nacked it (confirm mode).
        :raises MessageReturnedError: *mandatory* and unroutable (confirm mode).
        """
        if immediate:
            raise NotImplementedError("basic.publish with immediate=True (RabbitMQ 3 refuses it)")
        self._channel.basic_publish(
            message.body,
            exchange=exchange,
            routing_key=routing_key,
            properties=message.properties,
            mandatory=mandatory,
            timeout=confirm_timeout if confirm_timeout is not None else timeout,
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
        self._channel.exchange_declare(
            exchange,
            type,
            passive=passive,
            durable=durable,
            auto_delete=auto_delete,
            arguments=arguments,
        )

    def exchange_delete(self, exchange: str, if_unused: bool = False, nowait: bool = False) -> None:
        self._channel.exchange_delete(exchange, if_unused=if_unused)

    def exchange_bind(
        self,
        destination: str,
        source: str = "",
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self._channel.exchange_bind(destination, source, routing_key, arguments=arguments)

    def exchange_unbind(
        self,
        destination: str,
        source: str = "",
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self._channel.exchange_unbind(destination, source, routing_key, arguments=arguments)

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
        ok = self._channel.queue_declare(
            queue,
            passive=passive,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        return QueueDeclared(ok.queue, ok.message_count, ok.consumer_count)

    def queue_bind(
        self,
        queue: str,
        exchange: str = "",
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self._channel.queue_bind(queue, exchange, routing_key, arguments=arguments)

    def queue_unbind(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        nowait: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self._channel.queue_unbind(queue, exchange, routing_key, arguments=arguments)

    def queue_purge(self, queue: str = "", nowait: bool = False) -> int:
        return self._channel.queue_purge(queue)

    def queue_delete(
        self, queue: str = "", if_unused: bool = False, if_empty: bool = False, nowait: bool = False
    ) -> int:
        return self._channel.queue_delete(queue, if_unused=if_unused, if_empty=if_empty)

    # --- consuming and settling --------------------------------------------------------------

    def basic_qos(self, prefetch_size: int, prefetch_count: int, a_global: bool) -> None:
        self._channel.basic_qos(prefetch_count, prefetch_size=prefetch_size, global_=bool(a_global))

    def basic_consume(
        self,
        queue: str = "",
        consumer_tag: str = "",
        no_local: bool = False,
        no_ack: bool = False,
        exclusive: bool = False,
        nowait: bool = False,
        callback: Callable[[amqp_blocking.Message], object] | None = None,
        arguments: FieldTable | None = None,
        on_cancel: Callable[[str], object] | None = None,
    ) -> str:
        """Start a consumer whose messages ``drain_events`` hands to *callback*; returns its
        tag. When the broker cancels it, ``drain_events`` calls *on_cancel* with the tag, or
        raises :class:`~amqp_sansio.client.ConsumerCancelledError` without one (as pyamqp)."""
        consumer = self._channel.basic_consume(
            queue,
            no_ack=no_ack,
            exclusive=exclusive,
            consumer_tag=consumer_tag,
            arguments=arguments,
            inbox=self.connection.inbox,
        )
        tag = consumer.consumer_tag
        self._consumers[tag] = _Consuming(consumer, callback, on_cancel, no_ack)
        if no_ack:
            self.no_ack_consumers.add(tag)
        return tag

    def basic_cancel(self, consumer_tag: str, nowait: bool = False) -> None:
        """Cancel a consumer. Its deliveries that came before ``cancel-ok`` still reach its
        callback, here (py-amqp runs callbacks while it waits for a reply, so kombu's tests
        and users expect those messages once the cancel returns)."""
        consuming = self._consumers.get(consumer_tag)
        self.no_ack_consumers.discard(consumer_tag)
        if consuming is None:
            return
        try:
            consuming.consumer.cancel()
            self.connection._dispatch_waiting()
        finally:
            self._consumers.pop(consumer_tag, None)
            if consuming.no_ack:
                self._cancelled_no_ack.add(consumer_tag)

    def basic_get(self, queue: str = "", no_ack: bool = False) -> amqp_blocking.Message | None:
        return self._channel.basic_get(queue, no_ack=no_ack)

    def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self._channel.basic_ack(delivery_tag, multiple=multiple)

    def basic_reject(self, delivery_tag: int, requeue: bool = True) -> None:
        self._channel.basic_reject(delivery_tag, requeue=requeue)

    def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self._channel.basic_nack(delivery_tag, multiple=multiple, requeue=requeue)

    def basic_recover(self, requeue: bool = False) -> None:
        self._channel.basic_recover(requeue)

    def flow(self, active: bool) -> bool:
        return self._channel.flow(active)

    def close(self) -> None:
        self.connection._forget(self)
        consumers = list(self._consumers.values())
        self._consumers.clear()
        self.no_ack_consumers.clear()
        self._channel.close()
        for consuming in consumers:
            # Ended with the channel: this drops what they left in the inbox (the broker
            # requeued it), so no delivery of this channel reaches one opened after it.
            consuming.consumer.close()

    def _dispatch(self, raw: amqp_blocking.Message) -> None:
        consuming = self._consumers.get(raw.consumer_tag or "")
        if consuming is None or consuming.callback is None:
            # No callback for it (kombu cancelled the consumer without dispatching): back to
            # the queue now, rather than unacknowledged until the channel closes.
            tag = raw.consumer_tag or ""
            no_ack = tag in self._cancelled_no_ack if consuming is None else consuming.no_ack
            if not no_ack:
                self._channel.basic_reject(raw.delivery_tag, requeue=True)
            return
        consuming.callback(raw)

    def _cancelled(self, error: ConsumerCancelledError) -> bool:
        """The broker cancelled one of our consumers? Tell kombu (False: not ours)."""
        consuming = self._consumers.pop(error.consumer_tag, None)
        if consuming is None:
            return False
        self.no_ack_consumers.discard(error.consumer_tag)
        if consuming.on_cancel is None:
            raise error
        consuming.on_cancel(error.consumer_tag)
        return True


@final
class _Consuming:
    """One consumer of a channel: where its messages go."""

    __slots__ = ("callback", "consumer", "no_ack", "on_cancel")

    def __init__(
        self,
        consumer: amqp_blocking.Consumer,
        callback: Callable[[amqp_blocking.Message], object] | None,
        on_cancel: Callable[[str], object] | None,
        no_ack: bool,
    ) -> None:
        self.consumer: Final = consumer
        self.callback: Final = callback
        self.on_cancel: Final = on_cancel
        self.no_ack: Final = no_ack


@final
class Connection:
    """What ``kombu.Connection.connection`` is with this transport: an amqp_blocking
    connection, its channels, and the inbox their consumers deliver into."""

    def __init__(self, conn: amqp_blocking.Connection, *, confirm_publish: bool) -> None:
        self._conn = conn
        #: The kombu connection (kombu sets it; its consumers find it here).
        self.client: object = None
        #: Whether every channel is in confirm mode (the ``confirm_publish`` option).
        self.confirm_publish: Final = confirm_publish
        #: Where the consumers of every channel deliver.
        self.inbox: Final = amqp_blocking.Inbox()
        self._channels: dict[int, Channel] = {}

    def __repr__(self) -> str:
        return f"<amqp_kombu.Connection {self._conn!r}>"

    @property
    def blocking_connection(self) -> amqp_blocking.Connection:
        """The amqp_blocking connection underneath."""
        return self._conn

    @property
    def connected(self) -> bool:
        return not self._conn.is_closed

    @property
    def heartbeat(self) -> int:
        return self._conn.heartbeat

    @property
    def server_properties(self) -> FieldTable:
        return self._conn.server_properties

    def channel(self) -> Channel:
        channel = Channel(self, self._conn.channel())
        self._channels[channel.channel_id] = channel
        return channel

    def _forget(self, channel: Channel) -> None:
        if self._channels.get(channel.channel_id) is channel:
            del self._channels[channel.channel_id]

    def drain_events(self, timeout: float | None = None) -> None:
        """Wait for the next delivery (or broker cancel) on any channel and run its callback.

        :raises socket.timeout: nothing came within *timeout* seconds.
        :raises ConnectionClosedError: the connection is closed (also ``ConnectionLostError``).
        :raises ChannelClosedError: a consuming channel was closed by the broker.
        """
        error = self._conn.close_error
        if error is not None and not len(self.inbox):
            raise error
        if not self._take(timeout):
            raise TimeoutError(f"no message within {timeout} s")  # socket.timeout: kombu's

    def _dispatch_waiting(self) -> None:
        """Run the callbacks of every delivery waiting now."""
        while self._take(0):
            pass

    def _take(self, timeout: float | None) -> bool:
        """Dispatch the inbox's next item; False when none came within *timeout*."""
        try:
            raw = self.inbox.get(timeout)
        except ConsumerCancelledError as cancelled:
            for consuming_channel in list(self._channels.values()):
                if consuming_channel._cancelled(cancelled):
                    return True
            raise
        if raw is None:
            return False
        channel = self._channels.get(raw.channel)
        if channel is not None:  # else closed by kombu, and the broker requeued it
            channel._dispatch(raw)
        return True

    def heartbeat_check(self) -> None:
        """Heartbeats are amqp_blocking's I/O thread's: raise only when it found the broker
        gone."""
        error = self._conn.close_error
        if error is not None:
            raise error

    def close(self) -> None:
        self._channels.clear()
        self._conn.close()

    def collect(self) -> None:
        """Drop the connection without waiting for the broker (kombu's cleanup after a
        failure)."""
        self._channels.clear()
        self._conn.close(timeout=0.5)


class Transport(_TransportBase):
    """kombu's transport over amqp_blocking: ``amqp-sansio://`` URLs, or
    ``transport="amqp_kombu:Transport"`` (Celery: ``broker_transport``)."""

    default_port = DEFAULT_PORT
    default_ssl_port = DEFAULT_SSL_PORT

    connection_errors = CONNECTION_ERRORS
    channel_errors = CHANNEL_ERRORS
    recoverable_connection_errors = _RECOVERABLE_CONNECTION_ERRORS
    recoverable_channel_errors = _RECOVERABLE_CHANNEL_ERRORS

    driver_name = "amqp-sansio"
    #: ``"amqp"``: Celery enables what it does for AMQP brokers (gossip, mingle, quorum
    #: queue detection).
    driver_type = "amqp"

    # No event loop integration: amqp_blocking's thread owns the socket, so kombu's hub has
    # nothing to poll; Celery runs its blocking loop (drain_events with a timeout), and
    # heartbeats go on in the I/O thread whatever the worker does.
    implements = base.Transport.implements.extend(asynchronous=False, heartbeats=True)

    def __init__(
        self,
        client: object,
        default_port: int | None = None,
        default_ssl_port: int | None = None,
        **kwargs: object,
    ) -> None:
        #: The kombu connection this transport serves.
        self.client = client
        self.default_port = default_port or DEFAULT_PORT
        self.default_ssl_port = default_ssl_port or DEFAULT_SSL_PORT

    def driver_version(self) -> str:
        from importlib.metadata import version

        return version("amqp-sansio")

    def establish_connection(self) -> Connection | Connection010:
        conninfo = self.client
        for name, default in self.default_connection_params.items():
            if not getattr(conninfo, name, None):
                setattr(conninfo, name, default)
        options: dict[str, object] = dict(getattr(conninfo, "transport_options", None) or {})
        password = getattr(conninfo, "password", None)
        connect_timeout = getattr(conninfo, "connect_timeout", None)
        heartbeat = getattr(conninfo, "heartbeat", None)
        params, context = connection_parameters(
            hostname=str(getattr(conninfo, "hostname", None)),
            port=int(getattr(conninfo, "port", None) or self.default_port),
            userid=str(getattr(conninfo, "userid", None)),
            password=password if callable(password) else str(password),
            virtual_host=str(getattr(conninfo, "virtual_host", None) or "/"),
            login_method=getattr(conninfo, "login_method", None),
            ssl_option=getattr(conninfo, "ssl", None),
            connect_timeout=None if connect_timeout is None else float(connect_timeout),
            heartbeat=None if heartbeat is None else float(heartbeat),
            transport_options=options,
        )
        confirm = bool(options.get("confirm_publish"))
        if params.protocol == "0-10":
            from ._transport_0_10 import Connection010

            conn010 = Connection010(
                amqp_blocking.connect_0_10(params, ssl_context=context), confirm_publish=confirm
            )
            conn010.client = conninfo
            return conn010
        conn = Connection(
            amqp_blocking.connect(params, ssl_context=context), confirm_publish=confirm
        )
        conn.client = conninfo
        return conn

    def create_channel(self, connection: Connection | Connection010) -> Channel | Channel010:
        return connection.channel()

    def drain_events(
        self, connection: Connection | Connection010, timeout: float | None = None
    ) -> None:
        connection.drain_events(timeout)

    def _collect(self, connection: Connection | Connection010 | None) -> None:
        if connection is not None:
            connection.collect()

    def verify_connection(self, connection: Connection | Connection010) -> bool:
        return connection.connected

    def close_connection(self, connection: Connection | Connection010) -> None:
        connection.client = None
        connection.close()

    def get_heartbeat_interval(self, connection: Connection | Connection010) -> int:
        return connection.heartbeat

    def heartbeat_check(self, connection: Connection | Connection010, rate: int = 2) -> None:
        connection.heartbeat_check()

    def qos_semantics_matches_spec(self, connection: Connection | Connection010) -> bool:
        """False for RabbitMQ 3.3 to 3.x, whose ``global`` prefetch means per channel (kombu
        then asks for it where the spec's per-consumer meaning was meant)."""
        props = connection.server_properties
        if props.get("product") != "RabbitMQ":
            return True
        version = str(props.get("version") or "")
        try:
            major_minor = tuple(int(part) for part in version.split(".")[:2])
        except ValueError:
            return True
        return not (3, 3) <= major_minor < (4, 0)

    @property
    def default_connection_params(self) -> dict[str, object]:
        return {
            "userid": "guest",
            "password": "guest",
            "port": self.default_ssl_port
            if getattr(self.client, "ssl", None)
            else self.default_port,
            "hostname": "localhost",
            "login_method": "PLAIN",
        }


@final
class SSLTransport(Transport):
    """``amqps-sansio://``: :class:`Transport` with TLS on."""

    def __init__(
        self,
        client: object,
        default_port: int | None = None,
        default_ssl_port: int | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(client, default_port, default_ssl_port, **kwargs)
        if not getattr(client, "ssl", None):
            setattr(client, "ssl", True)  # noqa: B010  (kombu's connection: no declared type)
