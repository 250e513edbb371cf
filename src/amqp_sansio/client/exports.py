"""The one list of what every client adapter re-exports from the client layer: the exceptions it
raises, :class:`~amqp_sansio.client.ConnectionParameters`, the recovery policy and events, and
the core's :class:`~amqp_sansio.BasicProperties` (a message's properties, to publish with).

``amqp_trio``, ``amqp_asyncio`` and ``amqp_blocking`` star-import this module, and add its
``__all__`` to their own, so the three always offer the same names (mypy and the API docs see
them through the star import)::

    from amqp_sansio.client import exports as _exports
    from amqp_sansio.client.exports import *  # noqa: F403

    __all__ = [...]
    __all__ += _exports.__all__
"""

from __future__ import annotations

from .. import BasicProperties
from ._credentials import Credentials
from ._errors import (
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
    HeartbeatTimeoutError,
    InternalError,
    InvalidPath,
    MessageReturnedError,
    NoConsumers,
    NoRoute,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    ProtocolVersionRefused,
    PublishNackedError,
    PublishOutcomeUnknownError,
    ResourceError,
    ResourceLocked,
    UnexpectedFrame,
)
from ._params import ConnectionParameters
from ._recovery import (
    ChannelReopened,
    Recovered,
    RecoveryAttempt,
    RecoveryGaveUp,
    RecoveryLost,
    RecoveryPolicy,
    RecoveryState,
    StaleDeliveryError,
    TopologyRecoveryError,
)

__all__ = [
    "AMQPError",
    "AMQPNotImplemented",
    "AMQPSyntaxError",
    "AccessRefused",
    "BasicProperties",
    "ChannelClosedError",
    "ChannelError",
    "ChannelReopened",
    "CommandInvalid",
    "ConnectionClosedError",
    "ConnectionForced",
    "ConnectionLostError",
    "ConnectionParameters",
    "ConnectionTimeoutError",
    "ConsumerCancelledError",
    "ContentTooLarge",
    "Credentials",
    "FrameError",
    "HeartbeatTimeoutError",
    "InternalError",
    "InvalidPath",
    "MessageReturnedError",
    "NoConsumers",
    "NoRoute",
    "NotAllowed",
    "NotFound",
    "PreconditionFailed",
    "ProtocolVersionRefused",
    "PublishNackedError",
    "PublishOutcomeUnknownError",
    "Recovered",
    "RecoveryAttempt",
    "RecoveryGaveUp",
    "RecoveryLost",
    "RecoveryPolicy",
    "RecoveryState",
    "ResourceError",
    "ResourceLocked",
    "StaleDeliveryError",
    "TopologyRecoveryError",
    "UnexpectedFrame",
]
