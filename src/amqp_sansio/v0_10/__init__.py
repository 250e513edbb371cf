"""amqp_sansio.v0_10: a sans-IO AMQP 0-10 protocol core, client and server role.

AMQP 0-10 is a protocol family of its own (framing, sessions, execution, message credit); it
shares only infrastructure with the 0-9-1 core in :mod:`amqp_sansio`: the error classes, the
``NEED_DATA`` sentinel, :class:`Role`, and the ``receive_data`` / ``next_event`` /
``data_to_send`` / ``next_deadline`` / ``handle_timer`` contract.

* :class:`Connection` and :class:`ConnectionConfig`: the connection in either role;
  :class:`Session`: a session on one of its channels.
* The events ``next_event()`` returns (:class:`SessionOpened`, :class:`MessageReceived`,
  :class:`CommandsCompleted`, ...).
* The generated spec (from the Qpid errata XML): every control (``SessionAttach``), command
  (``MessageTransfer``, ``QueueDeclare``), struct (``DeliveryProperties``), enum
  (``AcceptMode``, ``ErrorCode``) and ``TypeCode``, with flat names.
* The values without a built-in type: :class:`Typed`, :class:`Array`, :class:`SequenceSet`,
  :class:`ByteRanges`, :class:`UnknownStruct`; :func:`code_of` gives the encoding rules of
  plain values.
* :func:`is_protocol_header_0_10`: the seam for servers that accept several protocol versions
  on one port (see :class:`Connection`).

The frame layer is :mod:`amqp_sansio.v0_10.framing`; the test kit
:mod:`amqp_sansio.v0_10.testing`. See ``docs/amqp-0-10.md``.
"""

from __future__ import annotations

from .._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .._events import NEED_DATA, Sentinel
from .._method import Role
from ._connection import Connection, ConnectionConfig
from ._events import (
    AuthenticationRequested,
    CommandReceived,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionRedirected,
    Event,
    ExceptionRaised,
    HeartbeatTimeout,
    MessageReceived,
    ResultReceived,
    SecureRequested,
    SessionEnded,
    SessionOpened,
    VirtualHostRequested,
)
from ._framing import PROTOCOL_HEADER_0_10, is_protocol_header_0_10
from ._generated.spec_0_10 import *  # noqa: F403  (the generated module's __all__)
from ._generated.spec_0_10 import __all__ as _spec_all
from ._session import UNLIMITED, Credit, Session
from ._state import ConnectionState, SessionState
from ._types import (
    MAX_SEQUENCE_SET_RANGES,
    Array,
    ByteRanges,
    Command,
    Compound,
    Control,
    FieldSpec,
    Map,
    SequenceSet,
    Struct,
    Typed,
    UnknownStruct,
    Value,
    code_of,
    serial_add,
    serial_le,
    serial_lt,
)
from ._util import fix_module_names

__all__ = [
    "MAX_SEQUENCE_SET_RANGES",
    "NEED_DATA",
    "PROTOCOL_HEADER_0_10",
    "UNLIMITED",
    "Array",
    "AuthenticationRequested",
    "ByteRanges",
    "Command",
    "CommandReceived",
    "CommandsCompleted",
    "Compound",
    "Connection",
    "ConnectionClosed",
    "ConnectionConfig",
    "ConnectionLost",
    "ConnectionOpened",
    "ConnectionRedirected",
    "ConnectionState",
    "Control",
    "Credit",
    "Event",
    "ExceptionRaised",
    "FieldSpec",
    "HeartbeatTimeout",
    "LocalProtocolError",
    "Map",
    "MessageReceived",
    "ProtocolError",
    "RemoteProtocolError",
    "ResultReceived",
    "Role",
    "SecureRequested",
    "Sentinel",
    "SequenceSet",
    "Session",
    "SessionEnded",
    "SessionOpened",
    "SessionState",
    "Struct",
    "Typed",
    "UnknownStruct",
    "Value",
    "VirtualHostRequested",
    "code_of",
    "is_protocol_header_0_10",
    "serial_add",
    "serial_le",
    "serial_lt",
]
__all__ += _spec_all

fix_module_names(__name__, globals(), __all__)
