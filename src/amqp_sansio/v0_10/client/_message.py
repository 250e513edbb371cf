"""What a 0-10 client sends and receives: :class:`Properties` (the header segment, flat) and
:class:`Message` (a received transfer with its settlement)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol, final

import attrs

from .._generated.spec_0_10 import DeliveryMode, DeliveryProperties, MessageProperties, ReplyTo
from .._types import Array, Map, Struct, Typed, Value

if TYPE_CHECKING:
    import uuid

    from .._events import MessageReceived

__all__ = ["Message", "Properties", "Settler", "plain", "plain_map"]


def plain(value: Value) -> Value:
    """A decoded value without its :class:`Typed` wrappers (maps and lists too)."""
    if isinstance(value, Typed):
        value = value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Array):
        return [plain(v) for v in value.values]
    return value


def plain_map(value: Map | None) -> dict[str, Value]:
    """A decoded map's plain values (an empty dict for None)."""
    return {} if not value else {k: plain(v) for k, v in value.items()}


def _text(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _given(value: bytes | None) -> str | bytes | None:
    # The inverse of _text: a str sent comes back a str; octets that are not UTF-8 stay bytes.
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value


@final
@attrs.frozen(kw_only=True)
class Properties:
    """A transfer's header segment, flat: the fields of ``delivery-properties`` and
    ``message-properties`` a client sets. ``persistent`` is ``delivery_mode`` 2; ``ttl`` is in
    milliseconds; ``reply_to`` is ``(exchange, routing_key)``; ``message_id`` a UUID (0-10's
    type). Strings given for the binary fields (``correlation_id``, ``user_id``, ``app_id``) are
    UTF-8 encoded."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: Map | None = None
    persistent: bool | None = None
    priority: int | None = None
    ttl: int | None = None
    message_id: uuid.UUID | None = None
    correlation_id: bytes | str | None = None
    reply_to: tuple[str, str] | None = None
    user_id: bytes | str | None = None
    app_id: bytes | str | None = None

    def header_segment(self, routing_key: str, body_size: int) -> tuple[Struct, ...]:
        """The structs of the header segment for a transfer routed by *routing_key*."""
        delivery = DeliveryProperties(routing_key=routing_key)
        if self.persistent is not None:
            delivery.delivery_mode = (
                DeliveryMode.PERSISTENT if self.persistent else DeliveryMode.NON_PERSISTENT
            )
        delivery.priority = self.priority
        delivery.ttl = self.ttl
        props = MessageProperties(
            content_length=body_size,
            message_id=self.message_id,
            correlation_id=_text(self.correlation_id),
            reply_to=None
            if self.reply_to is None
            else ReplyTo(exchange=self.reply_to[0], routing_key=self.reply_to[1]),
            content_type=self.content_type,
            content_encoding=self.content_encoding,
            user_id=_text(self.user_id),
            app_id=_text(self.app_id),
            application_headers=self.headers,
        )
        return (delivery, props)


#: The properties of a transfer that sets none.
NO_PROPERTIES: Final = Properties()


class Settler(Protocol):
    """Settles received transfers on their session (the client core's session)."""

    @property
    def epoch(self) -> int:
        """The connection epoch the session was attached in (see :attr:`Message.epoch`)."""
        ...

    def accept(self, command_id: int) -> None: ...

    def release(self, command_id: int, redelivered: bool) -> None: ...

    def reject(self, command_id: int, code: int, text: str | None) -> None: ...

    def acquire(self, command_id: int) -> None: ...


@final
class Message:
    """A received ``message.transfer``.

    ``body`` and the properties of its header segment (``routing_key``, ``exchange``,
    ``redelivered``, ``headers`` with plain values, ``content_type``, ...);
    ``delivery_properties``/``message_properties`` are the structs themselves. With
    explicit accept (the subscription's default) settle it once with :meth:`accept`,
    :meth:`release` or :meth:`reject`: they queue the command and return at once.
    """

    __slots__ = ("_settled", "_settler", "event")

    def __init__(self, event: MessageReceived, settler: Settler) -> None:
        #: The core's event.
        self.event: Final = event
        self._settler = settler
        self._settled = False

    def __repr__(self) -> str:
        return (
            f"<Message destination={self.destination!r} routing_key={self.routing_key!r} "
            f"size={len(self.body)}>"
        )

    @property
    def body(self) -> bytes:
        return self.event.body

    @property
    def command_id(self) -> int:
        """The transfer's command id on its session."""
        return self.event.command_id

    @property
    def epoch(self) -> int:
        """The epoch of the connection it came on (0 without recovery, as a 0-9-1 message's):
        settling one from a lost connection is stale (never sent)."""
        return self._settler.epoch

    @property
    def destination(self) -> str:
        """The subscription's destination the message was delivered to."""
        return self.event.transfer.destination or ""

    @property
    def delivery_properties(self) -> DeliveryProperties:
        return self.event.delivery_properties or DeliveryProperties()

    @property
    def message_properties(self) -> MessageProperties:
        return self.event.message_properties or MessageProperties()

    @property
    def routing_key(self) -> str:
        return self.delivery_properties.routing_key or ""

    @property
    def exchange(self) -> str:
        return self.delivery_properties.exchange or ""

    @property
    def redelivered(self) -> bool:
        return self.delivery_properties.redelivered

    @property
    def persistent(self) -> bool:
        return self.delivery_properties.delivery_mode == DeliveryMode.PERSISTENT

    @property
    def headers(self) -> dict[str, Value]:
        """``application-headers`` with plain values."""
        return plain_map(self.message_properties.application_headers)

    @property
    def content_type(self) -> str | None:
        return self.message_properties.content_type

    @property
    def message_id(self) -> uuid.UUID | None:
        return self.message_properties.message_id

    @property
    def content_encoding(self) -> str | None:
        return self.message_properties.content_encoding

    @property
    def priority(self) -> int | None:
        """``delivery-properties.priority`` (0-9), None when the sender set none."""
        priority = self.delivery_properties.priority
        return None if priority is None else int(priority)

    @property
    def ttl(self) -> int | None:
        """``delivery-properties.ttl``: the time to live in milliseconds the sender gave."""
        return self.delivery_properties.ttl

    @property
    def correlation_id(self) -> str | bytes | None:
        """As it was given to :class:`Properties`: 0-10 carries it as binary, so UTF-8 comes
        back as ``str`` (0-9-1's type, and what a str was sent as) and other octets as
        ``bytes``."""
        return _given(self.message_properties.correlation_id)

    @property
    def user_id(self) -> str | bytes | None:
        """The authenticated user the broker checked (``str`` for UTF-8, as
        :attr:`correlation_id`)."""
        return _given(self.message_properties.user_id)

    @property
    def app_id(self) -> str | bytes | None:
        """The sending application (``str`` for UTF-8, as :attr:`correlation_id`)."""
        return _given(self.message_properties.app_id)

    @property
    def reply_to(self) -> tuple[str, str] | None:
        reply = self.message_properties.reply_to
        if reply is None:
            return None
        return (reply.exchange or "", reply.routing_key or "")

    @property
    def properties(self) -> Properties:
        """The header segment as :class:`Properties` (what a sender gives
        :meth:`transfer <amqp_trio.Session010.transfer>`): the same fields as the attributes
        above, so a message can be sent on with them."""
        mode = self.delivery_properties.delivery_mode
        headers = self.message_properties.application_headers
        return Properties(
            content_type=self.content_type,
            content_encoding=self.content_encoding,
            headers=None if headers is None else self.headers,
            persistent=None if mode is None else mode == DeliveryMode.PERSISTENT,
            priority=self.priority,
            ttl=self.ttl,
            message_id=self.message_id,
            correlation_id=self.correlation_id,
            reply_to=self.reply_to,
            user_id=self.user_id,
            app_id=self.app_id,
        )

    @property
    def settled(self) -> bool:
        """Whether :meth:`accept`, :meth:`release` or :meth:`reject` was called."""
        return self._settled

    def _settle(self) -> None:
        if self._settled:
            raise RuntimeError(f"message {self.command_id} was already settled")
        self._settled = True

    def accept(self) -> None:
        """``message.accept``: the message is consumed."""
        self._settle()
        self._settler.accept(self.command_id)

    def release(self, *, redelivered: bool = False) -> None:
        """``message.release``: back to its queue for another consumer."""
        self._settle()
        self._settler.release(self.command_id, redelivered)

    def reject(self, code: int = 0, text: str | None = None) -> None:
        """``message.reject``: the broker drops it or routes it to the queue's alternate
        exchange."""
        self._settle()
        self._settler.reject(self.command_id, code, text)

    def acquire(self) -> None:
        """``message.acquire`` of a message browsed with acquire mode not-acquired (the
        broker's answer is not waited for: use the session's ``acquire`` for it)."""
        self._settler.acquire(self.command_id)
