"""Events: what :meth:`Connection.next_event` hands out.

Every event is a ``@final`` attrs class with slots. Events the core makes itself are named in the
past tense; a wire method that needs no interpretation by the core arrives as
:class:`MethodReceived` carrying the generated method object.

Events are frozen, except :class:`MessageReceived`, which sits on the delivery hot path: a frozen
attrs ``__init__`` goes through ``object.__setattr__`` per field, which measured about twice as slow
to construct (see the comment on the class). Nothing in the core keeps a
reference to an event after handing it out, so mutability cannot corrupt the core's state.

Events holding field tables (dicts) are not hashable; ``eq`` compares field by field.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final, TypeAlias, final

import attrs

if TYPE_CHECKING:
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
    "ConsumerCancelled",
    "Event",
    "MessageBodyReceived",
    "MessageCompleted",
    "MessageReceived",
    "MessageStarted",
    "MethodReceived",
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
    peer's ``close-ok`` answered ours. The transport may now be closed."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    by_peer: bool


@final
@attrs.frozen(kw_only=True, slots=True)
class ConnectionLost:
    """The transport closed (``receive_data(b"")``) before the close handshake finished.

    ``pending_requests`` are ``(channel, request)`` pairs we sent that will never be answered;
    ``unconfirmed_publishes`` are ``(channel, publish_seq)`` pairs in confirm mode. This is not
    a nack: nobody said the broker refused them.
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
    """

    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    by_peer: bool


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


# --- Content ----------------------------------------------------------------------------------


# Not frozen: constructing the frozen variant took twice as long (0.59 us vs 0.30 us per
# instance including the timeit call, CPython 3.11, attrs 26.1), once per delivered message.
@final
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class MessageReceived:
    """A whole message: its method (deliver, get-ok, return; publish in the server role), its
    properties and its body.

    The body is ``bytes`` when it arrived in one frame (no copy beyond the frame reader's) and a
    ``bytearray`` filled in place when it arrived in several (never copied again).
    """

    channel: int
    method: Method
    properties: ContentProperties
    body: bytes | bytearray


@final
@attrs.frozen(kw_only=True, slots=True)
class MessageStarted:
    """Chunk mode: a message larger than ``chunk_threshold`` begins; its body follows as
    :class:`MessageBodyReceived` events and ends with :class:`MessageCompleted`."""

    channel: int
    method: Method
    properties: ContentProperties
    body_size: int


@final
@attrs.frozen(kw_only=True, slots=True)
class MessageBodyReceived:
    """Chunk mode: the next piece of a message body, in order."""

    channel: int
    data: bytes


@final
@attrs.frozen(kw_only=True, slots=True)
class MessageCompleted:
    """Chunk mode: the last piece of the body arrived."""

    channel: int


Event: TypeAlias = (
    ConnectionOpened
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
    | MethodReceived
    | MessageReceived
    | MessageStarted
    | MessageBodyReceived
    | MessageCompleted
)
