"""What the client adapters (``amqp_trio``, ``amqp_asyncio``, ``amqp_blocking``) share without
doing any I/O: connection parameters and AMQP URLs, the exception classes they raise, the
:class:`Message` they hand out, and the publisher-confirm bookkeeping.
"""

from __future__ import annotations

from ._client_errors import (
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
    error_for_close,
    error_from,
)
from ._client_message import ConfirmTracker, Message, PublishOutcome
from ._client_params import DEFAULT_URL, AuthMechanism, ConnectionParameters
from ._util import fix_module_names

__all__ = [
    "DEFAULT_URL",
    "AMQPError",
    "AMQPNotImplemented",
    "AMQPSyntaxError",
    "AccessRefused",
    "AuthMechanism",
    "ChannelClosedError",
    "ChannelError",
    "CommandInvalid",
    "ConfirmTracker",
    "ConnectionClosedError",
    "ConnectionForced",
    "ConnectionLostError",
    "ConnectionParameters",
    "ConnectionTimeoutError",
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
    "PublishOutcome",
    "ResourceError",
    "ResourceLocked",
    "UnexpectedFrame",
    "error_for_close",
    "error_from",
]

fix_module_names(__name__, globals(), __all__)
