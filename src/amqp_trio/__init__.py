"""amqp_trio: the Trio adapter over the sans-IO core.

The client: :func:`connect` (an async context manager) gives a :class:`Connection`;
``conn.channel()`` gives a :class:`Channel` with AMQP-native methods (``queue_declare``,
``basic_publish``, ``basic_consume``, ...). The exceptions, :class:`ConnectionParameters` and the
message data are shared with the other adapters in :mod:`amqp_sansio.client` and re-exported
here.

The server role: :func:`serve` runs a handler per accepted connection, each a
:class:`ServerConnection` around a server-role core.
"""

from __future__ import annotations

from amqp_sansio._util import fix_module_names
from amqp_sansio.client import (
    AccessRefused,
    AMQPError,
    AMQPNotImplemented,
    AMQPSyntaxError,
    ChannelClosedError,
    ChannelError,
    CommandInvalid,
    ConnectionClosedError,
    ConnectionForced,
    ConnectionLostError,
    ConnectionParameters,
    ConnectionTimeoutError,
    ConsumerCancelledError,
    ContentTooLarge,
    FrameError,
    InternalError,
    InvalidPath,
    MessageReturnedError,
    NoConsumers,
    NoRoute,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    PublishNackedError,
    ResourceError,
    ResourceLocked,
    UnexpectedFrame,
)

from ._channel import Channel, Consumer, Publisher, PublishTicket
from ._connection import Connection, connect, connect_stream
from ._message import Message
from ._server import ConnectionHandler, ServerConnection, serve, serve_stream

__all__ = [
    "AMQPError",
    "AMQPNotImplemented",
    "AMQPSyntaxError",
    "AccessRefused",
    "Channel",
    "ChannelClosedError",
    "ChannelError",
    "CommandInvalid",
    "Connection",
    "ConnectionClosedError",
    "ConnectionForced",
    "ConnectionHandler",
    "ConnectionLostError",
    "ConnectionParameters",
    "ConnectionTimeoutError",
    "Consumer",
    "ConsumerCancelledError",
    "ContentTooLarge",
    "FrameError",
    "InternalError",
    "InvalidPath",
    "Message",
    "MessageReturnedError",
    "NoConsumers",
    "NoRoute",
    "NotAllowed",
    "NotFound",
    "PreconditionFailed",
    "PublishNackedError",
    "PublishTicket",
    "Publisher",
    "ResourceError",
    "ResourceLocked",
    "ServerConnection",
    "UnexpectedFrame",
    "connect",
    "connect_stream",
    "serve",
    "serve_stream",
]


fix_module_names(__name__, globals(), __all__)
