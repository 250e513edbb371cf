"""The states of an AMQP 0-10 connection's negotiation and of a session, as data.

Rule 1 (h11's): the connection handshake's transitions live here, keyed by the role that sends
the control, so our sends and the peer's controls are checked against the same table; the
module does not know which role we play. ``connection.close``, ``close-ok`` and ``heartbeat``
are legal in every state after the protocol headers and are handled by the connection itself.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final

from .._method import Role
from ._generated.spec_0_10 import (
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionRedirect,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
)

if TYPE_CHECKING:
    from ._types import Control

__all__ = ["HANDSHAKE", "ConnectionState", "SessionState"]


class ConnectionState(enum.Enum):
    """Where the connection's conversation is (the same for both ends)."""

    #: Before the protocol headers were exchanged.
    AWAIT_HEADER = "AWAIT_HEADER"
    #: Headers exchanged; the server sends ``start``.
    AWAIT_START = "AWAIT_START"
    #: ``start`` sent; the client answers ``start-ok``.
    AWAIT_START_OK = "AWAIT_START_OK"
    #: ``start-ok`` or ``secure-ok`` sent; the server (its application) sends ``secure`` or
    #: ``tune``, or refuses with ``close``.
    AUTHENTICATING = "AUTHENTICATING"
    #: ``secure`` sent; the client (its application) answers ``secure-ok``.
    AWAIT_SECURE_OK = "AWAIT_SECURE_OK"
    #: ``tune`` sent; the client answers ``tune-ok``.
    AWAIT_TUNE_OK = "AWAIT_TUNE_OK"
    #: ``tune-ok`` sent; the client sends ``open``.
    AWAIT_OPEN = "AWAIT_OPEN"
    #: ``open`` sent; the server (its application) answers ``open-ok`` or ``redirect``, or
    #: refuses with ``close``.
    OPENING = "OPENING"
    #: Sessions may attach.
    OPEN = "OPEN"
    #: We sent ``close`` and wait for ``close-ok``.
    CLOSING = "CLOSING"
    #: Closed by the close handshake or a redirect, or the transport ended.
    CLOSED = "CLOSED"
    #: A protocol error, a failed send or a heartbeat timeout: nothing more is possible.
    ERROR = "ERROR"


_S = ConnectionState

#: ``HANDSHAKE[sender][state][control class]``: the state after *sender* sent the control.
HANDSHAKE: Final[dict[Role, dict[ConnectionState, dict[type[Control], ConnectionState]]]] = {
    Role.SERVER: {
        _S.AWAIT_START: {ConnectionStart: _S.AWAIT_START_OK},
        _S.AUTHENTICATING: {ConnectionSecure: _S.AWAIT_SECURE_OK, ConnectionTune: _S.AWAIT_TUNE_OK},
        _S.OPENING: {ConnectionOpenOk: _S.OPEN, ConnectionRedirect: _S.CLOSED},
    },
    Role.CLIENT: {
        _S.AWAIT_START_OK: {ConnectionStartOk: _S.AUTHENTICATING},
        _S.AWAIT_SECURE_OK: {ConnectionSecureOk: _S.AUTHENTICATING},
        _S.AWAIT_TUNE_OK: {ConnectionTuneOk: _S.AWAIT_OPEN},
        _S.AWAIT_OPEN: {ConnectionOpen: _S.OPENING},
    },
}


class SessionState(enum.Enum):
    """Where one channel's session is."""

    #: We sent ``attach`` and wait for ``attached`` (or ``detached``).
    ATTACHING = "ATTACHING"
    #: Attached: commands flow both ways.
    ATTACHED = "ATTACHED"
    #: An ``execution.exception`` was raised (by either end): commands are refused until the
    #: session is detached.
    FAILED = "FAILED"
    #: We sent ``detach`` and wait for ``detached``.
    DETACHING = "DETACHING"
    #: Detached (the session is gone from the channel).
    DETACHED = "DETACHED"
