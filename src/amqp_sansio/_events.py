"""Events: what :meth:`Connection.next_event` hands out.

Every event is a ``@final`` attrs class with slots. Events the core makes itself are named in the
past tense; a wire method that needs no interpretation by the core arrives as
:class:`MethodReceived` carrying the generated method object.

Events are frozen, except :class:`MessageReceived`, which sits on the delivery hot path: a frozen
attrs ``__init__`` goes through ``object.__setattr__`` per field, which measured about twice as slow
to construct (see the comment on the class). Nothing in the core keeps a
reference to an event after handing it out, so mutability cannot corrupt the core's state.
It is also the one event that may be subclassed (:attr:`ConnectionConfig.message_class`): the
client layer's message is one, so a delivery is a single object.

Events holding field tables (dicts) are not hashable; ``eq`` compares field by field.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final, TypeAlias, final

import attrs

from ._generated.spec_0_9_1 import BasicProperties

if TYPE_CHECKING:
    from ._generated.spec_0_9_1 import BasicReturn
    from ._method import ContentProperties, Method
    from ._table import FieldTable

__all__ = [
    "NEED_DATA",
    "AuthenticationRequested",
    "BlockedByPeer",
    "ChannelClosed",
    "ChannelFlowChanged",
    "ChannelOpened",
    "ConnectionClosed",
    "ConnectionLost",
    "ConnectionOpened",
    "ConnectionRedirected",
    "ConsumerCancelled",
    "Event",
    "HeartbeatTimeout",
    "MessageBodyReceived",
    "MessageCompleted",
    "MessageReceived",
    "MessageStarted",
    "MethodReceived",
    "PublishConfirmed",
    "PublishNacked",
    "PublishReturned",
    "SecureRequested",
    "Sentinel",
    "UnblockedByPeer",
    "VirtualHostRequested",
]


class Sentinel(enum.Enum):
    """Values :meth:`Connection.next_event` returns that are not events."""

    #: More bytes are needed before another event can be produced.
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return self.value


#: Returned by ``next_event()`` when more bytes are needed (an Enum member: ``is`` narrows).
NEED_DATA: Final = Sentinel.NEED_DATA


def _redacted(value: object) -> str:
    return "<redacted>"


# --- Connection -------------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True, slots=True, eq=True)
class ConnectionOpened:
    """The handshake finished (after ``connection.open-ok``); both roles.

    The limits are the negotiated ones, with the wire's 0 ("no limit") already translated:
    ``channel_max`` 65535, ``frame_max`` ``2**32 - 1``; ``heartbeat`` 0 means off.
    """

    server_properties: FieldTable
    client_properties: FieldTable
    channel_max: int
    frame_max: int
    heartbeat: int
    virtual_host: str


@final
@attrs.frozen(kw_only=True, slots=True)
class ConnectionRedirected:
    """Client role, AMQP 0-8 and 0-9: the server answered ``connection.open`` with
    ``connection.redirect``. The connection is over (``CLOSED``, nothing more is parsed or
    sent): close the transport and connect to ``host`` (``"host"`` or ``"host:port"``);
    ``known_hosts`` lists other servers of the cluster, as the server names them."""

    host: str
    known_hosts: str


@final
@attrs.frozen(kw_only=True, slots=True)
class AuthenticationRequested:
    """Server role: the client sent ``start-ok`` or ``secure-ok``.

    Answer with :meth:`Connection.accept_authentication`,
    :meth:`Connection.refuse_authentication` or :meth:`Connection.send_secure`.
    ``username`` is parsed from PLAIN and AMQPLAIN responses (None otherwise, and None for a
    response that does not parse). The response itself never appears in a ``repr``.
    """

    mechanism: str
    response: bytes = attrs.field(repr=_redacted)
    username: str | None
    client_properties: FieldTable


@final
@attrs.frozen(kw_only=True, slots=True)
class SecureRequested:
    """Client role: the server sent ``connection.secure``; answer with ``answer_secure()``."""

    challenge: bytes


@final
@attrs.frozen(kw_only=True, slots=True)
class VirtualHostRequested:
    """Server role: the client sent ``connection.open``.

    Answer with :meth:`Connection.accept_virtual_host` or
    :meth:`Connection.refuse_virtual_host`.
    """

    virtual_host: str


@final
@attrs.frozen(kw_only=True, slots=True)
class ConnectionClosed:
    """The close handshake finished: the peer's ``close`` was answered (``by_peer``), or the
    peer's ``close-ok`` answered ours. The transport may now be closed.

    ``pending_requests`` and ``unconfirmed_publishes`` are what the closed channels left
    unanswered, as in :class:`ConnectionLost` (empty in the usual case of a quiet close).
    """

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    by_peer: bool
    pending_requests: tuple[tuple[int, Method], ...] = ()
    unconfirmed_publishes: tuple[tuple[int, int], ...] = ()


@final
@attrs.frozen(kw_only=True, slots=True)
class ConnectionLost:
    """The transport closed (``receive_data(b"")``) before the close handshake finished.

    ``pending_requests`` are ``(channel, request)`` pairs we sent that will never be answered
    (channel 0: ``connection.update-secret``), oldest first per channel;
    ``unconfirmed_publishes`` are ``(channel, publish_number)`` pairs published in confirm mode
    and never confirmed. This is not a nack: nobody said the broker refused them, and it may
    have routed them. In the server role they are the client's publishes in confirm mode that
    the application never acknowledged.
    """

    pending_requests: tuple[tuple[int, Method], ...]
    unconfirmed_publishes: tuple[tuple[int, int], ...]


@final
@attrs.frozen(kw_only=True, slots=True)
class BlockedByPeer:
    """The peer sent ``connection.blocked`` (RabbitMQ: a resource alarm stops publishing).

    Not named ``ConnectionBlocked``: that is the wire method's flat name.
    """

    reason: str


@final
@attrs.frozen(kw_only=True, slots=True)
class UnblockedByPeer:
    """The peer sent ``connection.unblocked``."""


@final
@attrs.frozen(kw_only=True, slots=True)
class HeartbeatTimeout:
    """No octet arrived from the peer for two heartbeat intervals (see
    :meth:`Connection.handle_timer`): the peer is presumed dead.

    The connection is unusable from here on (every send raises :class:`LocalProtocolError`) and
    nothing was queued for the peer. Close the transport, then feed ``receive_data(b"")``: the
    :class:`ConnectionLost` that follows lists every pending request and unconfirmed publish.
    """


# --- Channels ---------------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True, slots=True)
class ChannelOpened:
    """A channel is open: ``open-ok`` arrived (client) or was sent (server)."""

    channel: int


@final
@attrs.frozen(kw_only=True, slots=True)
class ChannelClosed:
    """A channel's close handshake finished; its id may be reused.

    ``by_peer`` says who sent the ``channel.close`` whose reply code this carries.
    ``unconfirmed_publishes`` are the publish numbers of this channel that were never confirmed
    (client role, confirm mode): they are neither acked nor nacked, and the broker may or may
    not have routed them. In the server role they are the client's publishes in confirm mode
    that the application never acknowledged.
    """

    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    by_peer: bool
    unconfirmed_publishes: tuple[int, ...] = ()


@final
@attrs.frozen(kw_only=True, slots=True)
class ChannelFlowChanged:
    """The peer sent ``channel.flow``; the core already answered with ``flow-ok``."""

    channel: int
    active: bool


@final
@attrs.frozen(kw_only=True, slots=True)
class ConsumerCancelled:
    """Client role: the server cancelled a consumer (``basic.cancel`` from the server)."""

    channel: int
    consumer_tag: str


@final
@attrs.frozen(kw_only=True, slots=True)
class MethodReceived:
    """A method the core passes through.

    ``request`` is the method of ours this one answers (the oldest outstanding request on the
    channel), or None when the method is not a reply (a request to the server role, an ack, ...).
    """

    channel: int
    method: Method
    request: Method | None


# --- Publisher confirms (client role) ---------------------------------------------------------


@final
@attrs.frozen(kw_only=True, slots=True)
class PublishConfirmed:
    """The broker took responsibility for these publishes (``basic.ack`` in confirm mode).

    ``publish_numbers`` are the numbers :meth:`Connection.publish` returned, ascending, with
    ``multiple`` already expanded to exactly the numbers not confirmed before; a number is never
    reported twice.
    """

    channel: int
    publish_numbers: tuple[int, ...]


@final
@attrs.frozen(kw_only=True, slots=True)
class PublishNacked:
    """The broker refused these publishes (``basic.nack`` in confirm mode); numbers as in
    :class:`PublishConfirmed`."""

    channel: int
    publish_numbers: tuple[int, ...]


@final
@attrs.frozen(kw_only=True, slots=True)
class PublishReturned:
    """Client role: the broker returned a message (``basic.return``: a mandatory publish that
    no queue took).

    In confirm mode it comes just before the :class:`PublishConfirmed` (or
    :class:`PublishNacked`) whose numbers contain ``publish_number``. RabbitMQ sends the return
    before the confirm but the return does not name the publish, so the core ties it to the
    lowest number in that confirm whose publish was mandatory, went to the same exchange with
    the same routing key, and is not yet tied to another return. That guess is exact unless
    routing differed between such publishes (bindings changed while they were in flight, or
    routing by headers: a headers exchange, ``CC``/``BCC``). Returns always come in the order
    the broker sent them. ``publish_number`` is None outside confirm mode, for a return that no
    unconfirmed publish can explain, for one that a younger return's confirm would otherwise
    overtake (RabbitMQ confirms returned publishes in order, so this needs an unusual broker),
    and for one still waiting for its confirm when the channel or the connection closed.
    """

    channel: int
    publish_number: int | None
    method: BasicReturn
    properties: BasicProperties
    body: bytes | bytearray | memoryview


# --- Content ----------------------------------------------------------------------------------


# Not frozen: constructing the frozen variant took twice as long (0.59 us vs 0.30 us per
# instance including the timeit call, CPython 3.11, attrs 26.1), once per delivered message.
# Not final: the core builds ConnectionConfig.message_class, a subclass with more slots that
# the client layer fills in place instead of copying the event into a second object.
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class MessageReceived:
    """A whole message: its method (deliver, get-ok, return; publish in the server role), its
    properties and its body.

    The body is ``bytes`` when it arrived in one frame (no copy beyond the frame reader's) and a
    ``bytearray`` filled in place when it arrived in several (never copied again). With
    :attr:`ConnectionConfig.body_view_threshold` set, a large body that arrived in one frame
    within one read is a read-only ``memoryview`` of the received octets (no copy at all).

    ``request`` is the ``basic.get`` a ``basic.get-ok`` answers (as :attr:`MethodReceived.request`
    names the request of other replies), None for every other message. It is context, not
    content: equality ignores it.

    The core builds each message as :attr:`ConnectionConfig.message_class` (this class unless
    configured), setting only these fields; test with ``isinstance``.
    """

    channel: int
    method: Method
    properties: ContentProperties
    body: bytes | bytearray | memoryview
    request: Method | None = attrs.field(default=None, eq=False)

    @property
    def basic_properties(self) -> BasicProperties:
        """:attr:`properties` typed as :class:`~amqp_sansio.BasicProperties`, what every message
        of the ``basic`` class carries (publish, deliver, get-ok, return): reads such as
        ``event.basic_properties.reply_to`` type-check without a cast.

        ``properties`` itself is typed as the base class because AMQP 0-8 and 0-9 also carry
        content in their ``file``, ``stream`` and ``test`` classes, each with its own properties.

        :raises TypeError: the message is not of the ``basic`` class.
        """
        properties = self.properties
        if not isinstance(properties, BasicProperties):
            raise TypeError(
                f"this {type(self.method).__name__} carries {type(properties).__name__}, not "
                "BasicProperties: read .properties"
            )
        return properties


@final
@attrs.frozen(kw_only=True, slots=True)
class MessageStarted:
    """Chunk mode: a message larger than ``chunk_threshold`` begins; its body follows as
    :class:`MessageBodyReceived` events and ends with :class:`MessageCompleted`."""

    channel: int
    method: Method
    properties: ContentProperties
    body_size: int
    #: The ``basic.get`` a chunked ``basic.get-ok`` answers (see :class:`MessageReceived`).
    request: Method | None = attrs.field(default=None, eq=False)


@final
@attrs.frozen(kw_only=True, slots=True)
class MessageBodyReceived:
    """Chunk mode: the next piece of a message body, in order (a read-only ``memoryview`` of the
    received octets under :attr:`ConnectionConfig.body_view_threshold`, see
    :class:`MessageReceived`)."""

    channel: int
    data: bytes | memoryview


@final
@attrs.frozen(kw_only=True, slots=True)
class MessageCompleted:
    """Chunk mode: the last piece of the body arrived."""

    channel: int


#: Every event :meth:`Connection.next_event` may return (besides ``NEED_DATA``).
Event: TypeAlias = (
    ConnectionOpened
    | ConnectionRedirected
    | AuthenticationRequested
    | SecureRequested
    | VirtualHostRequested
    | ConnectionClosed
    | ConnectionLost
    | BlockedByPeer
    | UnblockedByPeer
    | ChannelOpened
    | ChannelClosed
    | ChannelFlowChanged
    | ConsumerCancelled
    | HeartbeatTimeout
    | PublishConfirmed
    | PublishNacked
    | PublishReturned
    | MethodReceived
    | MessageReceived
    | MessageStarted
    | MessageBodyReceived
    | MessageCompleted
)
