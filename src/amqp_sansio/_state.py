"""The connection and channel state machines, as data.

Rule 1 (after h11): everything that decides whether a method is legal, and which state it
leads to, lives in this file. Rule 2: this file does not know which role *we* play. Every table
is keyed by the role that **sends** the method, so our sends and the peer's frames are checked
by the same entries: a client core refuses to send what a server core would reject on receipt,
and vice versa.

States are shared views of the conversation (both cores move through the same states for the
same bytes). The close handshakes need to know who started them, so the closing states name
the role that sent ``close`` (``CLIENT_CLOSING``/``SERVER_CLOSING``), which keeps the tables
role-agnostic.

A missing entry means "illegal": :class:`LocalProtocolError` for our sends (checked before
anything is encoded), a 503/504 connection error for received methods, except that a peer's
methods crossing our ``close`` are discarded (:func:`discards`).
"""

from __future__ import annotations

import enum
from typing import Final, TypeAlias

from ._generated.spec_0_9_1 import (
    METHODS,
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUnblocked,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
)
from ._method import Method, Role

__all__ = [
    "CHANNEL_TRANSITIONS",
    "CONNECTION_TRANSITIONS",
    "REPLY_TYPES",
    "ChannelState",
    "ConnectionState",
    "Input",
    "closing_state",
    "discards",
    "refusal_code",
]

_CLIENT: Final = Role.CLIENT
_SERVER: Final = Role.SERVER


class ConnectionState(enum.Enum):
    """Where the connection (channel 0) is; named after whose move it is."""

    # Members are singletons compared by identity: the C identity hash keeps the per-frame
    # transition lookups off enum's Python-level __hash__ (hash of the name).
    __hash__ = object.__hash__

    AWAIT_HEADER = "AWAIT_HEADER"  # the client's protocol header
    AWAIT_START = "AWAIT_START"  # the server's connection.start
    AWAIT_START_OK = "AWAIT_START_OK"
    AWAIT_TUNE = "AWAIT_TUNE"  # the server decides: secure, tune, or close (refused)
    AWAIT_SECURE_OK = "AWAIT_SECURE_OK"
    AWAIT_TUNE_OK = "AWAIT_TUNE_OK"
    AWAIT_OPEN = "AWAIT_OPEN"
    AWAIT_OPEN_OK = "AWAIT_OPEN_OK"  # the server decides: open-ok or close (refused)
    OPEN = "OPEN"
    CLIENT_CLOSING = "CLIENT_CLOSING"  # the client sent connection.close
    SERVER_CLOSING = "SERVER_CLOSING"  # the server sent connection.close
    CLOSED = "CLOSED"
    ERROR = "ERROR"


class ChannelState(enum.Enum):
    """Where one channel is. A channel id not in use is ``CLOSED``."""

    __hash__ = object.__hash__  # see ConnectionState

    CLOSED = "CLOSED"
    OPENING = "OPENING"  # channel.open sent, open-ok not yet
    OPEN = "OPEN"
    CLIENT_CLOSING = "CLIENT_CLOSING"
    SERVER_CLOSING = "SERVER_CLOSING"


class Input(enum.Enum):
    """Inputs that are not methods."""

    __hash__ = object.__hash__  # see ConnectionState

    PROTOCOL_HEADER = "PROTOCOL_HEADER"


_Key: TypeAlias = type[Method] | Input
_ConnTable: TypeAlias = dict[Role, dict[ConnectionState, dict[_Key, ConnectionState]]]
_ChanTable: TypeAlias = dict[Role, dict[ChannelState, dict[_Key, ChannelState]]]

#: Every method type that is a reply to some request: receiving one that answers no outstanding
#: request is a 503.
REPLY_TYPES: Final[frozenset[type[Method]]] = frozenset(
    reply for cls in METHODS.values() for reply in cls.RESPONSES
)

# --- Connection (channel 0) -------------------------------------------------------------------

_C = ConnectionState

# Methods either role may send on channel 0 once the connection is open, besides close.
_OPEN_CHANNEL0: Final[tuple[type[Method], ...]] = (
    ConnectionBlocked,
    ConnectionUnblocked,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
)


def _open_loops(role: Role) -> dict[_Key, ConnectionState]:
    return {cls: _C.OPEN for cls in _OPEN_CHANNEL0 if role in cls.SENT_BY}


def _close_from(
    states: tuple[ConnectionState, ...], target: ConnectionState
) -> dict[ConnectionState, dict[_Key, ConnectionState]]:
    return {state: {ConnectionClose: target} for state in states}


# After the start method both sides may close; before it there is nobody to answer a close.
_NEGOTIATING: Final = (
    _C.AWAIT_START_OK,
    _C.AWAIT_TUNE,
    _C.AWAIT_SECURE_OK,
    _C.AWAIT_TUNE_OK,
    _C.AWAIT_OPEN,
    _C.AWAIT_OPEN_OK,
)


def _connection_table() -> _ConnTable:
    table: _ConnTable = {}
    for role, mine, theirs in (
        (_CLIENT, _C.CLIENT_CLOSING, _C.SERVER_CLOSING),
        (_SERVER, _C.SERVER_CLOSING, _C.CLIENT_CLOSING),
    ):
        rows: dict[ConnectionState, dict[_Key, ConnectionState]] = {s: {} for s in _C}
        for state, row in _close_from(_NEGOTIATING, mine).items():
            rows[state].update(row)
        rows[_C.OPEN] = {ConnectionClose: mine, **_open_loops(role)}
        # Close crossing ours: answer it with close-ok and keep waiting for our close-ok.
        rows[mine] = {ConnectionCloseOk: mine}
        rows[theirs] = {ConnectionCloseOk: _C.CLOSED, ConnectionClose: theirs}
        table[role] = rows
    client, server = table[_CLIENT], table[_SERVER]
    client[_C.AWAIT_HEADER][Input.PROTOCOL_HEADER] = _C.AWAIT_START
    server[_C.AWAIT_START][ConnectionStart] = _C.AWAIT_START_OK
    client[_C.AWAIT_START_OK][ConnectionStartOk] = _C.AWAIT_TUNE
    server[_C.AWAIT_TUNE][ConnectionSecure] = _C.AWAIT_SECURE_OK
    server[_C.AWAIT_TUNE][ConnectionTune] = _C.AWAIT_TUNE_OK
    client[_C.AWAIT_SECURE_OK][ConnectionSecureOk] = _C.AWAIT_TUNE
    client[_C.AWAIT_TUNE_OK][ConnectionTuneOk] = _C.AWAIT_OPEN
    client[_C.AWAIT_OPEN][ConnectionOpen] = _C.AWAIT_OPEN_OK
    server[_C.AWAIT_OPEN_OK][ConnectionOpenOk] = _C.OPEN
    return table


#: ``CONNECTION_TRANSITIONS[sender][state][method type] -> next state``; total over states.
CONNECTION_TRANSITIONS: Final[_ConnTable] = _connection_table()

# --- Channels ---------------------------------------------------------------------------------

_H = ChannelState

_CHANNEL_LIFECYCLE: Final = frozenset((ChannelOpen, ChannelOpenOk, ChannelClose, ChannelCloseOk))


def _channel_table() -> _ChanTable:
    table: _ChanTable = {}
    for role, mine, theirs in (
        (_CLIENT, _H.CLIENT_CLOSING, _H.SERVER_CLOSING),
        (_SERVER, _H.SERVER_CLOSING, _H.CLIENT_CLOSING),
    ):
        # Everything this role may send on an open channel: every method of a class other than
        # connection (10), minus the lifecycle methods handled below. Whether it is in order
        # (replies, content) is checked by the request FIFO and the content assembler.
        work: dict[_Key, ChannelState] = {
            cls: _H.OPEN
            for cls in METHODS.values()
            if cls.CLASS_ID != 10 and cls not in _CHANNEL_LIFECYCLE and role in cls.SENT_BY
        }
        rows: dict[ChannelState, dict[_Key, ChannelState]] = {s: {} for s in _H}
        rows[_H.OPEN] = {**work, ChannelClose: mine}
        rows[mine] = {ChannelCloseOk: mine}
        rows[theirs] = {ChannelCloseOk: _H.CLOSED, ChannelClose: theirs}
        table[role] = rows
    client, server = table[_CLIENT], table[_SERVER]
    client[_H.CLOSED][ChannelOpen] = _H.OPENING
    # The client may pipeline work behind channel.open: the server handles frames in order.
    client[_H.OPENING] = {
        **{cls: _H.OPENING for cls in client[_H.OPEN] if cls is not ChannelClose},
        ChannelClose: _H.CLIENT_CLOSING,
    }
    server[_H.OPENING] = {ChannelOpenOk: _H.OPEN, ChannelClose: _H.SERVER_CLOSING}
    return table


#: ``CHANNEL_TRANSITIONS[sender][state][method type] -> next state``; total over states.
CHANNEL_TRANSITIONS: Final[_ChanTable] = _channel_table()


def closing_state(role: Role) -> tuple[ConnectionState, ChannelState]:
    """The connection and channel states in which *role* has sent ``close``."""
    if role is _CLIENT:
        return _C.CLIENT_CLOSING, _H.CLIENT_CLOSING
    return _C.SERVER_CLOSING, _H.SERVER_CLOSING


def discards(state: ConnectionState | ChannelState, receiver: Role) -> bool:
    """Whether *receiver* silently drops a method the tables refuse in *state*.

    After sending ``close`` a peer discards everything but ``close`` and ``close-ok`` (spec,
    connection.close and channel.close rules): those methods crossed our close on the wire.
    """
    return state in closing_state(receiver)


def refusal_code(state: ChannelState, cls: type[Method]) -> int:
    """The reply code for a method the channel table refuses in *state*.

    504 CHANNEL_ERROR for anything on a channel that is not open and for a second
    ``channel.open`` (RabbitMQ: "second 'channel.open' seen"); 503 COMMAND_INVALID otherwise.
    """
    if state is ChannelState.CLOSED or cls is ChannelOpen:
        return 504
    return 503
