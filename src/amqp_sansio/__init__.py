"""amqp_sansio: a sans-IO AMQP 0-9-1 protocol core, which speaks 0-9 and 0-8 too.

The generated 0-9-1 wire methods (``QueueDeclare``, ``BasicDeliver``, ...), ``BasicProperties``,
``ReplyCode`` and the spec constants are re-exported here with flat names; 0-9's and 0-8's
method tables are :data:`AMQP_0_9` and :data:`AMQP_0_8` (``AMQP_0_8.make("basic.consume",
...)``), which share the 0-9-1 classes wherever a method is the same. The frame layer, for those
who drive frames themselves, is :mod:`amqp_sansio.framing`.
"""

from __future__ import annotations

from ._config import ConnectionConfig
from ._connection import Connection
from ._errors import LocalProtocolError, ProtocolError, ProtocolHeaderRefused, RemoteProtocolError
from ._events import (
    NEED_DATA,
    AuthenticationRequested,
    BlockedByPeer,
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    ConnectionRedirected,
    ConsumerCancelled,
    Event,
    HeartbeatTimeout,
    MessageBodyReceived,
    MessageCompleted,
    MessageReceived,
    MessageStarted,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
    SecureRequested,
    Sentinel,
    UnblockedByPeer,
    VirtualHostRequested,
)
from ._frames import ProtocolHeader, ProtocolVersion
from ._generated.spec_0_9_1 import *  # noqa: F403  (the generated module's __all__)
from ._generated.spec_0_9_1 import __all__ as _spec_all
from ._handshake import check_credentials, parse_credentials
from ._method import Buffer, ContentProperties, MessageContent, Method, Role
from ._negotiation import AUTO_ORDER, choose_version, header_for, next_protocol, requested_version
from ._protocol import AMQP_0_8, AMQP_0_8_QPID, AMQP_0_9, AMQP_0_9_1, ProtocolSpec
from ._state import ChannelState, ConnectionState
from ._table import (
    MAX_TABLE_DEPTH,
    MAX_TABLE_ENTRIES,
    FieldArray,
    FieldTable,
    FieldValue,
    Float32,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    LongString,
    Timestamp,
    TypedValue,
    UInt8,
    UInt16,
    UInt32,
)
from ._topology import Topology
from ._util import fix_module_names

__all__ = [
    "AMQP_0_8",
    "AMQP_0_8_QPID",
    "AMQP_0_9",
    "AMQP_0_9_1",
    "AUTO_ORDER",
    "MAX_TABLE_DEPTH",
    "MAX_TABLE_ENTRIES",
    "Buffer",
    "ContentProperties",
    "FieldArray",
    "FieldTable",
    "FieldValue",
    "Float32",
    "Float64",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "LocalProtocolError",
    "LongString",
    "MessageContent",
    "Method",
    "ProtocolError",
    "ProtocolHeader",
    "ProtocolHeaderRefused",
    "ProtocolSpec",
    "ProtocolVersion",
    "RemoteProtocolError",
    "Role",
    "Timestamp",
    "TypedValue",
    "UInt8",
    "UInt16",
    "UInt32",
    "check_credentials",
    "choose_version",
    "header_for",
    "next_protocol",
    "parse_credentials",
    "requested_version",
]
__all__ += [
    "NEED_DATA",
    "AuthenticationRequested",
    "BlockedByPeer",
    "ChannelClosed",
    "ChannelFlowChanged",
    "ChannelOpened",
    "ChannelState",
    "Connection",
    "ConnectionClosed",
    "ConnectionConfig",
    "ConnectionLost",
    "ConnectionOpened",
    "ConnectionRedirected",
    "ConnectionState",
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
    "Topology",
    "UnblockedByPeer",
    "VirtualHostRequested",
]
__all__ += _spec_all

fix_module_names(__name__, globals(), __all__)
