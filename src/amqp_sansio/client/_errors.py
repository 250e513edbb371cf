"""The exceptions every client adapter raises: one class per AMQP reply code, plus the outcomes
that are not closes (a lost transport, a nacked or returned publish, a cancelled consumer).

``amqp_trio``, ``amqp_asyncio`` and ``amqp_blocking`` raise these same classes, so code that
handles errors moves between them unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from .. import ProtocolHeader, ProtocolHeaderRefused, ProtocolVersion

if TYPE_CHECKING:
    from ._message import Message

__all__ = [
    "AMQPError",
    "AMQPNotImplemented",
    "AMQPSyntaxError",
    "AccessRefused",
    "ChannelClosedError",
    "ChannelError",
    "CloseReason",
    "CommandInvalid",
    "ConnectionClosedError",
    "ConnectionForced",
    "ConnectionLostError",
    "ConnectionTimeoutError",
    "ConsumerCancelledError",
    "ContentTooLarge",
    "FrameError",
    "HeartbeatTimeoutError",
    "InternalError",
    "InvalidPath",
    "MessageReturnedError",
    "NoConsumers",
    "NoRoute",
    "NotAllowed",
    "NotFound",
    "PreconditionFailed",
    "ProtocolVersionRefused",
    "PublishNackedError",
    "PublishOutcomeUnknownError",
    "ResourceError",
    "ResourceLocked",
    "UnexpectedFrame",
    "error_for_close",
    "error_from",
]


class AMQPError(Exception):
    """Base class of every error a client adapter raises about the broker or the link."""


class _CloseError(AMQPError):
    """An error carrying the fields of a ``channel.close`` or ``connection.close``."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int

    def __init__(
        self, reply_text: str, *, reply_code: int, class_id: int = 0, method_id: int = 0
    ) -> None:
        super().__init__(f"{reply_code} {reply_text}" if reply_text else str(reply_code))
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments do not survive the default exception pickling.
        return (
            _rebuild_close_error,
            (type(self), self.reply_text, self.reply_code, self.class_id, self.method_id),
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.reply_text!r}, reply_code={self.reply_code}, "
            f"class_id={self.class_id}, method_id={self.method_id})"
        )


def _rebuild_close_error(
    cls: type[_CloseError], reply_text: str, reply_code: int, class_id: int, method_id: int
) -> _CloseError:
    return cls(reply_text, reply_code=reply_code, class_id=class_id, method_id=method_id)


class ChannelClosedError(_CloseError):
    """The channel is closed: by the broker (a soft error; the connection stays usable) or by
    us (reply code 200). The subclasses name the soft reply codes."""


class ContentTooLarge(ChannelClosedError):
    """311 CONTENT_TOO_LARGE."""


class NoRoute(ChannelClosedError):
    """312 NO_ROUTE."""


class NoConsumers(ChannelClosedError):
    """313 NO_CONSUMERS."""


class AccessRefused(ChannelClosedError):
    """403 ACCESS_REFUSED: the user may not use this resource."""


class NotFound(ChannelClosedError):
    """404 NOT_FOUND: no such exchange or queue (e.g. a passive declare)."""


class ResourceLocked(ChannelClosedError):
    """405 RESOURCE_LOCKED: an exclusive queue or consumer belongs to another connection."""


class PreconditionFailed(ChannelClosedError):
    """406 PRECONDITION_FAILED: e.g. a redeclare with different arguments, an unknown
    delivery tag."""


class ConnectionClosedError(_CloseError):
    """The connection is closed: by the broker (with its reply code and text) or by us (200).
    Every pending call and iterator on the connection raises it. The subclasses name the
    hard reply codes; a soft code on ``connection.close`` (RabbitMQ refuses a login with
    403) keeps this base class."""


class ConnectionForced(ConnectionClosedError):
    """320 CONNECTION_FORCED: an operator closed the connection or the broker shut down."""


class InvalidPath(ConnectionClosedError):
    """402 INVALID_PATH."""


class FrameError(ConnectionClosedError):
    """501 FRAME_ERROR."""


class AMQPSyntaxError(ConnectionClosedError):
    """502 SYNTAX_ERROR."""


class CommandInvalid(ConnectionClosedError):
    """503 COMMAND_INVALID."""


class ChannelError(ConnectionClosedError):
    """504 CHANNEL_ERROR."""


class UnexpectedFrame(ConnectionClosedError):
    """505 UNEXPECTED_FRAME."""


class ResourceError(ConnectionClosedError):
    """506 RESOURCE_ERROR."""


class NotAllowed(ConnectionClosedError):
    """530 NOT_ALLOWED: e.g. an unknown virtual host."""


class AMQPNotImplemented(ConnectionClosedError):
    """540 NOT_IMPLEMENTED: e.g. ``basic.reject`` on a RabbitMQ stream queue."""


class ProtocolVersionRefused(AMQPNotImplemented):
    """The server does not speak the version we asked for: it answered our protocol header with
    its own (``offered``) and closed, as the spec's negotiation says. ``protocol="auto"``
    reconnects with what it offers; otherwise connect with ``protocol=offered.version.value``.

    :ivar requested: the version we asked for.
    :ivar offered: the header the server wrote; ``offered.version`` is what it speaks.
    """

    requested: ProtocolVersion
    offered: ProtocolHeader

    def __init__(
        self, reply_text: str, *, requested: ProtocolVersion, offered: ProtocolHeader
    ) -> None:
        super().__init__(reply_text, reply_code=540)
        self.requested = requested
        self.offered = offered

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_refused, (self.reply_text, self.requested, self.offered.octets))


def _rebuild_refused(
    reply_text: str, requested: ProtocolVersion, offered: bytes
) -> ProtocolVersionRefused:
    return ProtocolVersionRefused(reply_text, requested=requested, offered=ProtocolHeader(offered))


class InternalError(ConnectionClosedError):
    """541 INTERNAL_ERROR."""


class ConnectionLostError(AMQPError):
    """The transport went away (EOF, reset, heartbeat timeout) without a close handshake.

    Pending calls and unconfirmed publishes get this: nobody said the broker refused them,
    and a publish that got it may or may not have been routed.
    """


class HeartbeatTimeoutError(ConnectionLostError):
    """Nothing arrived from the broker for two heartbeat intervals (the spec's limit), so the
    client dropped the transport: the broker, its host or the network between is gone or stuck.

    Every adapter raises it with the same text; ``address`` is the broker's ``host:port`` and
    ``heartbeat`` the negotiated interval in seconds.
    """

    address: str
    heartbeat: int

    def __init__(self, address: str, heartbeat: int) -> None:
        super().__init__(
            f"no bytes from {address} for two heartbeat intervals ({heartbeat} s each): "
            "the connection was dropped"
        )
        self.address = address
        self.heartbeat = heartbeat

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.address, self.heartbeat))


class ConnectionTimeoutError(AMQPError, TimeoutError):
    """The TCP connect, TLS handshake and AMQP handshake did not finish within
    ``connection_timeout``."""


class PublishNackedError(AMQPError):
    """The broker answered a publish in confirm mode with ``basic.nack``."""

    publish_number: int

    def __init__(self, publish_number: int) -> None:
        super().__init__(f"the broker nacked publish {publish_number}")
        self.publish_number = publish_number

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.publish_number,))


class PublishOutcomeUnknownError(AMQPError):
    """The connection or the channel ended before the broker confirmed a publish in confirm
    mode: the broker may have routed it or not, and nobody can tell. Never a nack (the broker
    did not refuse it) and never the close error itself (a 320 says why the connection went,
    not what became of each publish).

    Republish if duplicates are acceptable (consumers deduplicate by message id), or check
    the queue. :attr:`cause` (also ``__cause__``) is the error that ended the connection or
    channel.
    """

    publish_number: int
    cause: AMQPError | None

    def __init__(self, publish_number: int, cause: AMQPError | None = None) -> None:
        why = "" if cause is None else f": {cause}"
        super().__init__(
            f"publish {publish_number} has an unknown outcome (the broker may or may not have "
            f"routed it; the connection or channel ended before its confirm{why})"
        )
        self.publish_number = publish_number
        self.cause = cause
        self.__cause__ = cause

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.publish_number, self.cause))


class MessageReturnedError(AMQPError):
    """A mandatory publish could not be routed and came back (``basic.return``).

    ``publish_number`` is None outside confirm mode. ``message`` holds what came back
    (its ``delivery_tag`` is 0: a returned message is not a delivery).
    """

    publish_number: int | None
    reply_code: int
    reply_text: str
    message: Message

    def __init__(
        self, publish_number: int | None, reply_code: int, reply_text: str, message: Message
    ) -> None:
        super().__init__(
            f"publish {publish_number} to exchange {message.exchange!r} with routing key "
            f"{message.routing_key!r} was returned: {reply_code} {reply_text}"
        )
        self.publish_number = publish_number
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (self.publish_number, self.reply_code, self.reply_text, self.message),
        )


class ConsumerCancelledError(AMQPError):
    """The broker cancelled the consumer (``basic.cancel`` from the server: its queue was
    deleted, or a cluster node went away). Messages buffered before it were handed out first."""

    consumer_tag: str

    def __init__(self, consumer_tag: str) -> None:
        super().__init__(f"the broker cancelled consumer {consumer_tag!r}")
        self.consumer_tag = consumer_tag

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.consumer_tag,))


_CHANNEL_ERRORS: Final[dict[int, type[ChannelClosedError]]] = {
    311: ContentTooLarge,
    312: NoRoute,
    313: NoConsumers,
    403: AccessRefused,
    404: NotFound,
    405: ResourceLocked,
    406: PreconditionFailed,
}

_CONNECTION_ERRORS: Final[dict[int, type[ConnectionClosedError]]] = {
    320: ConnectionForced,
    402: InvalidPath,
    501: FrameError,
    502: AMQPSyntaxError,
    503: CommandInvalid,
    504: ChannelError,
    505: UnexpectedFrame,
    506: ResourceError,
    530: NotAllowed,
    540: AMQPNotImplemented,
    541: InternalError,
}


def error_for_close(
    reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0, *, connection: bool
) -> ChannelClosedError | ConnectionClosedError:
    """The exception for a ``channel.close`` (``connection=False``) or ``connection.close``
    (``connection=True``): the subclass named after the reply code, or the base class for a
    code without one (200, or a code that does not belong to that level)."""
    if connection:
        conn_cls = _CONNECTION_ERRORS.get(reply_code, ConnectionClosedError)
        return conn_cls(reply_text, reply_code=reply_code, class_id=class_id, method_id=method_id)
    chan_cls = _CHANNEL_ERRORS.get(reply_code, ChannelClosedError)
    return chan_cls(reply_text, reply_code=reply_code, class_id=class_id, method_id=method_id)


class CloseReason(Protocol):
    """What a close carries: a ``ChannelClosed``/``ConnectionClosed`` event or a
    :class:`~amqp_sansio.RemoteProtocolError`."""

    @property
    def reply_code(self) -> int: ...
    @property
    def reply_text(self) -> str: ...
    @property
    def class_id(self) -> int: ...
    @property
    def method_id(self) -> int: ...


def error_from(
    reason: CloseReason, *, connection: bool
) -> ChannelClosedError | ConnectionClosedError:
    """:func:`error_for_close` with the fields of a close event or a protocol error; the
    server's refusal of our protocol header is a :class:`ProtocolVersionRefused`."""
    if isinstance(reason, ProtocolHeaderRefused):
        return ProtocolVersionRefused(
            reason.reply_text, requested=reason.requested, offered=reason.offered
        )
    return error_for_close(
        reason.reply_code,
        reason.reply_text,
        reason.class_id,
        reason.method_id,
        connection=connection,
    )
