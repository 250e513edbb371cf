"""A received message as the client adapters hand it out: the data every adapter shares, and the
awaitable settlement of the two async adapters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol, Self, TypeVar

import attrs

from .. import BasicDeliver, BasicGetOk, BasicProperties, BasicReturn, Int64, MessageReceived

if TYPE_CHECKING:
    from .. import ContentProperties, Method

__all__ = ["AsyncMessage", "AsyncSettler", "Message", "bound_message"]

STREAM_OFFSET_HEADER: Final = "x-stream-offset"


# A MessageReceived itself: the adapters configure the core to build their message class
# (ConnectionConfig.message_class), and bound_message fills the rest of the same object.
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class Message(MessageReceived):
    """One message: from a consumer (``basic.deliver``), from ``basic_get`` (``basic.get-ok``)
    or returned by the broker (``basic.return``, inside :class:`MessageReturnedError`).

    Each adapter subclasses it to add ``ack()``, ``nack()`` and ``reject()`` (awaitable in the
    async adapters) bound to the channel the message came on.

    It is a :class:`~amqp_sansio.MessageReceived` so that the core can build it: the adapters
    have the core build each message as their class, so a delivery is one object from the
    wire to the application. Once handed out its ``method`` is None (its fields are copied
    out, and a buffered message keeps no second object alive for the garbage collector to
    visit); ``request`` is the ``basic.get`` a get-ok answers.

    :ivar body: the payload.
    :ivar properties: the content header's properties.
    :ivar exchange: the exchange it was published to.
    :ivar routing_key: the routing key it was published with.
    :ivar delivery_tag: the tag to acknowledge it with (0 for a returned message).
    :ivar redelivered: the broker delivered it before and it was not acknowledged.
    :ivar consumer_tag: the consumer it was delivered to; None for ``basic_get`` and returns.
    :ivar message_count: messages left in the queue after a ``basic_get``; None otherwise.
    :ivar channel: the number of the channel it arrived on.
    """

    # Narrower than the event's: bound_message makes a multi-frame body bytes, and every
    # message of the basic class carries BasicProperties.
    body: bytes  # type: ignore[mutable-override]
    properties: BasicProperties  # type: ignore[mutable-override]
    exchange: str
    routing_key: str
    delivery_tag: int = 0
    redelivered: bool = False
    consumer_tag: str | None = None
    message_count: int | None = None
    channel: int = 0
    # The core's method until bound_message copied its fields out, then None.
    method: Method | None = attrs.field(default=None, repr=False, eq=False)  # type: ignore[assignment]
    request: Method | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def stream_offset(self) -> int | None:
        """The ``x-stream-offset`` header RabbitMQ adds to each delivery from a stream queue;
        None when there is none (a classic or quorum queue) or it is not an integer."""
        headers = self.properties.headers
        value = None if headers is None else headers.get(STREAM_OFFSET_HEADER)
        if isinstance(value, Int64):
            return value.value
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return None

    @classmethod
    def from_content(
        cls,
        channel: int,
        method: Method,
        properties: ContentProperties,
        body: bytes | bytearray | memoryview,
    ) -> Self:
        """Build a message from a content-carrying method as the core delivers it
        (``BasicDeliver``, ``BasicGetOk`` or ``BasicReturn``)."""
        if type(body) is not bytes:
            body = bytes(body)  # a multi-frame body arrives as a bytearray (or a view: owned)
        assert isinstance(properties, BasicProperties)
        if type(method) is BasicDeliver:
            assert isinstance(method, BasicDeliver)
            # One per delivery: built with object.__new__ and slot stores (as the frame layer
            # builds frames), a third of the cost of attrs' keyword __init__.
            message = _new(cls)
            message.body = body
            message.properties = properties
            message.exchange = method.exchange
            message.routing_key = method.routing_key
            message.delivery_tag = method.delivery_tag
            message.redelivered = method.redelivered
            message.consumer_tag = method.consumer_tag
            message.message_count = None
            message.channel = channel
            message.method = None
            message.request = None
            added = _ADDED_FIELDS.get(cls)
            if added is None:
                added = _ADDED_FIELDS[cls] = _added_fields(cls)
            for name, default in added:
                setattr(message, name, default)
            return message
        if type(method) is BasicGetOk:
            assert isinstance(method, BasicGetOk)
            return cls(
                body=body,
                properties=properties,
                exchange=method.exchange,
                routing_key=method.routing_key,
                delivery_tag=method.delivery_tag,
                redelivered=method.redelivered,
                message_count=method.message_count,
                channel=channel,
            )
        if type(method) is BasicReturn:
            assert isinstance(method, BasicReturn)
            return cls(
                body=body,
                properties=properties,
                exchange=method.exchange,
                routing_key=method.routing_key,
                channel=channel,
            )
        raise TypeError(f"{type(method).__name__} does not carry a message")


_new: Final = object.__new__

_M = TypeVar("_M", bound=Message)

#: The fields every adapter's message adds to :class:`Message`, which bound_message sets.
_BOUND_FIELDS: Final = (
    ("_owner", None),
    ("epoch", 0),
    ("_epoch_cell", None),
    ("_came_on", None),
)
#: Message classes checked to add exactly those.
_BINDABLE: set[type[Message]] = set()


def bound_message(
    cls: type[_M],
    event: MessageReceived,
    owner: object,
    epoch: EpochCell | None,
    came_on: CameOn | None = None,
) -> _M:
    """*event* (a ``basic.deliver`` or ``basic.get-ok``) as the adapter's message class
    *cls*, bound to the channel *owner* it is settled on and, under recovery, to the
    connection's *epoch* (None without recovery: epoch 0, never stale) and the channel book
    it *came_on* (stale once the channel was reopened).

    A message the core built as *cls* (the adapter's ``ConnectionConfig.message_class``) is
    completed in place: one object per delivery. Otherwise a delivery is built with slot
    stores alone, each field set once: once per message, this is most of what an adapter adds
    to the core's delivery path.
    """
    method = event.method
    body = event.body
    # The bound fields are the subclass's (checked once per class by _bindable).
    if type(event) is cls and (cls in _BINDABLE or _bindable(cls)):
        message = event
        if type(body) is not bytes:
            message.body = bytes(body)  # a multi-frame body arrives as a bytearray
        if type(method) is BasicDeliver:
            message.consumer_tag = method.consumer_tag
            message.message_count = None
        elif type(method) is BasicGetOk:
            assert isinstance(method, BasicGetOk)
            message.consumer_tag = None
            message.message_count = method.message_count
        else:
            raise TypeError(f"{type(method).__name__} is not a delivery")
        message.exchange = method.exchange
        message.routing_key = method.routing_key
        message.delivery_tag = method.delivery_tag
        message.redelivered = method.redelivered
        message.method = None  # kept, a second tracked object per buffered message
        message._owner = owner  # type: ignore[attr-defined]
        if epoch is None:
            message.epoch = 0  # type: ignore[attr-defined]
            message._epoch_cell = None  # type: ignore[attr-defined]
        else:
            message.epoch = epoch.current  # type: ignore[attr-defined]
            message._epoch_cell = epoch  # type: ignore[attr-defined]
        message._came_on = came_on  # type: ignore[attr-defined]
        return message
    if type(method) is BasicDeliver and (cls in _BINDABLE or _bindable(cls)):
        if type(body) is not bytes:
            body = bytes(body)  # a multi-frame body arrives as a bytearray
        message = _new(cls)
        message.body = body
        # A basic.deliver's content is always basic's: the core decoded it with that class.
        message.properties = event.properties  # type: ignore[assignment]
        message.exchange = method.exchange
        message.routing_key = method.routing_key
        message.delivery_tag = method.delivery_tag
        message.redelivered = method.redelivered
        message.consumer_tag = method.consumer_tag
        message.message_count = None
        message.channel = event.channel
        message.method = None
        message.request = event.request
        message._owner = owner  # type: ignore[attr-defined]
        if epoch is None:
            message.epoch = 0  # type: ignore[attr-defined]
            message._epoch_cell = None  # type: ignore[attr-defined]
        else:
            message.epoch = epoch.current  # type: ignore[attr-defined]
            message._epoch_cell = epoch  # type: ignore[attr-defined]
        message._came_on = came_on  # type: ignore[attr-defined]
        return message
    message = cls.from_content(event.channel, method, event.properties, body)
    message.request = event.request
    message._owner = owner  # type: ignore[attr-defined]
    if epoch is not None:
        message.epoch = epoch.current  # type: ignore[attr-defined]
        message._epoch_cell = epoch  # type: ignore[attr-defined]
        message._came_on = came_on  # type: ignore[attr-defined]
    return message


def _bindable(cls: type[Message]) -> bool:
    if _ADDED_FIELDS.get(cls) is None:
        _ADDED_FIELDS[cls] = _added_fields(cls)
    if _ADDED_FIELDS[cls] != _BOUND_FIELDS:
        raise TypeError(f"{cls.__name__} must add exactly _owner, epoch, _epoch_cell and _came_on")
    _BINDABLE.add(cls)
    return True


class AsyncSettler(Protocol):
    """The channel an async adapter's message is settled on."""

    async def basic_ack(self, delivery_tag: int, *, multiple: bool = False) -> None: ...

    async def basic_nack(
        self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True
    ) -> None: ...

    async def basic_reject(self, delivery_tag: int, *, requeue: bool = True) -> None: ...

    async def _wait_for_book(self, book: CameOn, /) -> None:
        """Return once the channel settles on *book* (the incarnation a delivery came on), or
        once that can no longer happen: a delivery that came on the new connection while the
        channel is being restored is settled after the resume, on its own channel."""


class EpochCell(Protocol):
    """The connection's epoch a message checks its settle against (an
    :class:`~amqp_sansio.client.Epoch`)."""

    @property
    def current(self) -> int: ...

    def allows(self, delivery_tag: int, epoch: int, *, superseded: bool = False) -> bool: ...


class CameOn(Protocol):
    """What a message keeps of the channel it came on (a
    :class:`~amqp_sansio.client.ChannelBook`): whether it was opened again since."""

    @property
    def superseded(self) -> bool: ...


@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class AsyncMessage(Message):
    """A message with awaitable ``ack()``, ``nack()`` and ``reject()`` on the channel it
    arrived on: what amqp_trio and amqp_asyncio hand out (each as its own ``Message``)."""

    _owner: AsyncSettler | None = attrs.field(default=None, repr=False, eq=False, alias="owner")
    #: The epoch of the connection it came on (0 without recovery; see :class:`Epoch`).
    epoch: int = attrs.field(default=0, eq=False)
    _epoch_cell: EpochCell | None = attrs.field(
        default=None, repr=False, eq=False, alias="epoch_cell"
    )
    # The channel book it came on (under a recovery policy): superseded once the channel was
    # opened again, when its tag names nothing on the new one.
    _came_on: CameOn | None = attrs.field(default=None, repr=False, eq=False, alias="came_on")

    def _channel_obj(self) -> AsyncSettler | None:
        owner = self._owner
        if owner is None:
            raise RuntimeError("this message is not bound to a channel")
        cell = self._epoch_cell
        if cell is not None:
            came_on = self._came_on
            superseded = came_on is not None and came_on.superseded
            if not cell.allows(self.delivery_tag, self.epoch, superseded=superseded):
                return None  # from a lost connection or channel: never sent with a stale tag
        return owner

    async def _settler(self) -> AsyncSettler | None:
        """The channel to settle on now; None (or StaleDeliveryError) when the message is
        stale. One that came on the new connection during a restore waits for the resume,
        then is checked again (the attempt may have failed meanwhile)."""
        owner = self._channel_obj()
        came_on = self._came_on
        if owner is not None and came_on is not None:
            await owner._wait_for_book(came_on)
            owner = self._channel_obj()
        return owner

    async def ack(self, *, multiple: bool = False) -> None:
        """Acknowledge this message (and, with ``multiple``, every earlier one on the
        channel).

        :raises StaleDeliveryError: it came on a connection since lost (recovery), and the
            policy raises for those (it is never sent: the broker redelivers it).
        """
        owner = await self._settler()
        if owner is not None:
            await owner.basic_ack(self.delivery_tag, multiple=multiple)

    async def nack(self, *, multiple: bool = False, requeue: bool = True) -> None:
        """Negatively acknowledge this message (RabbitMQ extension). Stream queues refuse it
        with a 540 that closes the connection."""
        owner = await self._settler()
        if owner is not None:
            await owner.basic_nack(self.delivery_tag, multiple=multiple, requeue=requeue)

    async def reject(self, *, requeue: bool = True) -> None:
        """Reject this message. Stream queues refuse it with a 540 that closes the
        connection."""
        owner = await self._settler()
        if owner is not None:
            await owner.basic_reject(self.delivery_tag, requeue=requeue)


#: Per Message subclass: the fields it adds and their defaults, which from_content sets itself.
_ADDED_FIELDS: dict[type[Message], tuple[tuple[str, object], ...]] = {}


def _added_fields(cls: type[Message]) -> tuple[tuple[str, object], ...]:
    base = {field.name for field in attrs.fields(Message)}
    added: list[tuple[str, object]] = []
    for field in attrs.fields(cls):
        if field.name in base:
            continue
        if field.default is attrs.NOTHING or isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            raise TypeError(f"{cls.__name__}.{field.name}: from_content needs a plain default")
        added.append((field.name, field.default))
    return tuple(added)
