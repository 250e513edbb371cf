"""amqp_blocking: the amqp_sansio client over blocking sockets, with one background I/O thread
per connection (heartbeats never starve, however long a message handler takes) and every call
safe from any thread.

::

    import amqp_blocking

    with amqp_blocking.connect("amqp://guest:guest@127.0.0.1:5672/") as conn:
        with conn.channel() as ch:
            ch.queue_declare("jobs")
            ch.basic_publish(b"hello", routing_key="jobs")
            for msg in ch.consume("jobs", timeout=1.0):
                msg.ack()

The exceptions, :class:`ConnectionParameters` and the message data are shared with the other
adapters in :mod:`amqp_sansio.client` and re-exported here.
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

from ._channel import Channel, Consumer, Message, Publisher, PublishTicket
from ._connection import Connection, OpenedCore, connect, connect_core

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
    "OpenedCore",
    "PreconditionFailed",
    "PublishNackedError",
    "PublishTicket",
    "Publisher",
    "ResourceError",
    "ResourceLocked",
    "UnexpectedFrame",
    "connect",
    "connect_core",
]


fix_module_names(__name__, globals(), __all__)
