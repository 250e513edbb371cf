"""The 0-10 client layer: everything ``amqp_trio``, ``amqp_asyncio`` and ``amqp_blocking``
share for AMQP 0-10 without doing any I/O.

For users: :class:`Message` (a received transfer and its settlement), :class:`Properties`
(what a transfer carries), and the errors: :class:`ExecutionError` and its subclasses by
``execution.exception`` code, :class:`SessionEndedError`. For adapters: :class:`ClientCore`,
:class:`ClientSession`, :class:`SubscriptionCore` and :class:`Pending` (see ``_core``), and
the session API as data (:data:`SESSION_REQUESTS`, from which ``tools/gen_channels.py`` writes
the adapters' methods).
"""

from __future__ import annotations

from ..._util import fix_module_names
from ._core import (
    DEFAULT_PREFETCH,
    ClientCore,
    ClientSession,
    FlowModeName,
    Pending,
    SubscriptionCore,
    config_from,
)
from ._errors import (
    ExecutionError,
    IllegalArgument,
    IllegalState,
    InvalidArgument,
    NotAllowedError,
    NotFoundError,
    NotImplementedByPeer,
    PeerInternalError,
    PreconditionFailedError,
    ResourceDeleted,
    ResourceLimitExceeded,
    ResourceLockedError,
    SessionBusy,
    SessionEndedError,
    UnauthorizedAccess,
    UnknownCommand,
    execution_error,
)
from ._message import Message, Properties, Settler, plain, plain_map
from ._recovery import LostSessions, SessionRestoration
from ._requests import SESSION_REQUESTS, SessionRequest
from ._topology import Topology010

__all__ = [
    "DEFAULT_PREFETCH",
    "SESSION_REQUESTS",
    "ClientCore",
    "ClientSession",
    "ExecutionError",
    "FlowModeName",
    "IllegalArgument",
    "IllegalState",
    "InvalidArgument",
    "LostSessions",
    "Message",
    "NotAllowedError",
    "NotFoundError",
    "NotImplementedByPeer",
    "PeerInternalError",
    "Pending",
    "PreconditionFailedError",
    "Properties",
    "ResourceDeleted",
    "ResourceLimitExceeded",
    "ResourceLockedError",
    "SessionBusy",
    "SessionEndedError",
    "SessionRequest",
    "SessionRestoration",
    "Settler",
    "SubscriptionCore",
    "Topology010",
    "UnauthorizedAccess",
    "UnknownCommand",
    "config_from",
    "execution_error",
    "plain",
    "plain_map",
]

fix_module_names(__name__, globals(), __all__)
