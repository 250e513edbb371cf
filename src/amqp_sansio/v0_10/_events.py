"""Events: what :meth:`Connection.next_event` hands out.

As in the 0-9-1 core, every event is a ``@final`` attrs class with slots; events the core makes
itself are named in the past tense (:class:`SessionOpened`, :class:`CommandsCompleted`), and
commands the application must act on arrive as :class:`CommandReceived` (or
:class:`MessageReceived` for ``message.transfer``) carrying the generated command object.
Events are frozen, except :class:`MessageReceived`, which sits on the delivery hot path (see the
0-9-1 ``MessageReceived``); nothing in the core keeps a reference to an event it handed out.

Command ids in events are the wire's 32-bit ids, as :meth:`Session.send` returns them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, final

import attrs

from ._generated.spec_0_10 import DeliveryProperties, MessageProperties

if TYPE_CHECKING:
    from ._generated.spec_0_10 import ExecutionException, MessageTransfer
    from ._types import Command, Map, SequenceSet, Struct

__all__ = [
    "AuthenticationRequested",
    "CommandReceived",
    "CommandsCompleted",
    "ConnectionClosed",
    "ConnectionLost",
    "ConnectionOpened",
    "ConnectionRedirected",
    "Event",
    "ExceptionRaised",
    "HeartbeatTimeout",
    "MessageReceived",
    "ResultReceived",
    "SecureRequested",
    "SessionEnded",
    "SessionOpened",
    "VirtualHostRequested",
]


def _redacted(value: object) -> str:
    return "<redacted>"


# --- Connection -------------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True, slots=True, eq=True)
class ConnectionOpened:
    """The handshake finished (``open-ok`` received by the client, sent by the server).

    ``channel_max``, ``max_frame_size`` and ``heartbeat`` are the negotiated values (heartbeat 0
    means off); ``known_hosts`` is what ``open-ok`` listed.
    """

    server_properties: Map
    client_properties: Map
    channel_max: int
    max_frame_size: int
    heartbeat: int
    virtual_host: str
    known_hosts: tuple[str, ...]


@final
@attrs.frozen(kw_only=True, slots=True)
class AuthenticationRequested:
    """Server role: the client sent ``start-ok`` or ``secure-ok``.

    Answer with :meth:`Connection.accept_authentication`,
    :meth:`Connection.refuse_authentication` or :meth:`Connection.send_secure`. ``username`` is
    parsed from a PLAIN response (None otherwise); the response never appears in a ``repr``.
    """

    mechanism: str
    response: bytes = attrs.field(repr=_redacted)
    username: str | None
    client_properties: Map
    locale: str


@final
@attrs.frozen(kw_only=True, slots=True)
class SecureRequested:
    """Client role: the server sent ``connection.secure``; answer with
    :meth:`Connection.answer_secure`."""

    challenge: bytes


@final
@attrs.frozen(kw_only=True, slots=True)
class VirtualHostRequested:
    """Server role: the client sent ``connection.open``. Answer with
    :meth:`Connection.accept_virtual_host`, :meth:`Connection.redirect` or
    :meth:`Connection.refuse_virtual_host`."""

    virtual_host: str
    capabilities: tuple[str, ...]
    insist: bool


@final
@attrs.frozen(kw_only=True, slots=True)
class ConnectionRedirected:
    """Client role: the server answered ``open`` with ``redirect``: connect to ``host`` (or one
    of ``known_hosts``) instead. The connection is over; close the transport."""

    host: str
    known_hosts: tuple[str, ...]


@final
@attrs.frozen(kw_only=True, slots=True)
class ConnectionClosed:
    """The close handshake finished: the peer's ``close`` was answered (``by_peer``), or the
    peer's ``close-ok`` answered ours. The transport may now be closed.

    ``incomplete_commands`` are ``(channel, command_id)`` pairs we sent that the peer never
    reported complete, per session in the order they were sent.
    """

    reply_code: int
    reply_text: str
    by_peer: bool
    incomplete_commands: tuple[tuple[int, int], ...] = ()


@final
@attrs.frozen(kw_only=True, slots=True)
class ConnectionLost:
    """The transport closed (``receive_data(b"")``) before the close handshake finished.

    ``incomplete_commands`` as in :class:`ConnectionClosed`: the peer may or may not have
    executed them.
    """

    incomplete_commands: tuple[tuple[int, int], ...]


@final
@attrs.frozen(kw_only=True, slots=True)
class HeartbeatTimeout:
    """Nothing arrived from the peer for two heartbeat intervals (see
    :meth:`Connection.handle_timer`): the peer is presumed dead. The connection refuses every
    send from here on; close the transport and feed ``receive_data(b"")``."""


# --- Sessions ---------------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True, slots=True)
class SessionOpened:
    """A session is attached to ``channel`` and open for commands: the peer answered our
    ``attach`` with ``attached`` (``by_peer`` False), or the peer attached and the core
    answered ``attached`` (``by_peer`` True). Our ``command-point`` is sent; commands may
    flow. (Not named ``SessionAttached``: that is the control's flat name.)"""

    channel: int
    name: bytes
    by_peer: bool


@final
@attrs.frozen(kw_only=True, slots=True)
class SessionEnded:
    """A session ended: ``session.detached`` arrived or was sent (not named
    ``SessionDetached``: that is the control's flat name).

    ``by_peer`` is True when the peer detached (its ``detach``, which the core answered, or an
    unsolicited ``detached``: a refused ``attach`` says why in ``code``). ``code`` is a
    ``DetachCode``. Sessions are never resumed: the state of both directions is dropped, and
    ``incomplete_commands`` are the ids we sent that the peer never reported complete.
    """

    channel: int
    name: bytes
    code: int
    by_peer: bool
    incomplete_commands: tuple[int, ...] = ()


@final
@attrs.frozen(kw_only=True, slots=True)
class CommandReceived:
    """A command from the peer for the application (anything but ``message.transfer`` and the
    execution commands the core handles).

    ``sync`` is the ``session.header`` sync bit: the peer wants to hear about its completion at
    once. ``headers`` and ``body`` are the header and body segments of the few commands that
    have them (None when absent). In the server role, complete the command with
    :meth:`Session.complete` (or :meth:`Session.send_result` for one with a result) once it has
    taken effect; in the client role the core completes it when it is handed out.
    """

    channel: int
    command_id: int
    command: Command
    sync: bool
    headers: tuple[Struct, ...] | None = None
    body: bytes | None = None


# Not frozen, for the same reason as the 0-9-1 MessageReceived: constructed once per message.
@final
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class MessageReceived:
    """A ``message.transfer``: its command, its header segment's structs and its body.

    ``body`` is the received ``bytes`` (one copy, by the frame reader) when it arrived in one
    frame, and joined once when it arrived in several; ``b""`` without a body segment.
    ``headers`` is ``()`` without a header segment; entries with codes the spec does not define
    are :class:`UnknownStruct` and are forwarded unchanged. ``size`` counts the header and body
    segments' octets, the unit of byte credit.

    When ``transfer.accept_mode`` is explicit (0, or absent), settle it with
    :meth:`Session.accept`, :meth:`Session.reject` or :meth:`Session.release`.
    """

    channel: int
    command_id: int
    transfer: MessageTransfer
    headers: tuple[Struct, ...]
    body: bytes
    sync: bool
    size: int

    @property
    def delivery_properties(self) -> DeliveryProperties | None:
        """The header segment's ``delivery-properties``, if any."""
        for entry in self.headers:
            if type(entry) is DeliveryProperties:
                return entry
        return None

    @property
    def message_properties(self) -> MessageProperties | None:
        """The header segment's ``message-properties``, if any."""
        for entry in self.headers:
            if type(entry) is MessageProperties:
                return entry
        return None


@final
@attrs.frozen(kw_only=True, slots=True)
class CommandsCompleted:
    """The peer completed commands we sent (``session.completed``): ``commands`` holds the ids
    not reported before, in order. ``execution.sync`` completes once every earlier command
    did, so its id here means all commands before it are complete."""

    channel: int
    commands: SequenceSet


@final
@attrs.frozen(kw_only=True, slots=True)
class ResultReceived:
    """``execution.result``: ``value`` is the result of our command ``command_id``, which was
    ``request`` (None if the id names no command of ours awaiting a result)."""

    channel: int
    command_id: int
    request: Command | None
    value: Struct | None


@final
@attrs.frozen(kw_only=True, slots=True)
class ExceptionRaised:
    """An ``execution.exception`` ended the session's work.

    ``by_peer`` True: the peer raised it about our command ``exception.command_id``
    (``request`` is that command when known); the peer will detach the session, and the core
    answers. ``by_peer`` False: the core raised it because the peer's command ``command_id``
    was invalid (a command its role can't send, ...), then detached. Either way further
    commands are refused and the session's state is dropped at detach.
    """

    channel: int
    exception: ExecutionException
    request: Command | None
    by_peer: bool


Event: TypeAlias = (
    ConnectionOpened
    | AuthenticationRequested
    | SecureRequested
    | VirtualHostRequested
    | ConnectionRedirected
    | ConnectionClosed
    | ConnectionLost
    | HeartbeatTimeout
    | SessionOpened
    | SessionEnded
    | CommandReceived
    | MessageReceived
    | CommandsCompleted
    | ResultReceived
    | ExceptionRaised
)
