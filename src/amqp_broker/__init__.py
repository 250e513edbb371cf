"""amqp_broker: a small in-memory AMQP 0-9-1 broker on ``amqp_sansio``'s server role.

Built for tests and demos that must run without RabbitMQ: ``amqp-broker`` (:func:`main`, also
``python -m amqp_broker``) serves it on a port; :func:`running` (Trio) and
:func:`run_in_thread` (synchronous code) start one on a free port and yield its URL;
:class:`BrokerThread` runs one in a thread of its own and :meth:`~BrokerThread.snapshot` (or
:func:`inspect`) says what it holds (:class:`BrokerSnapshot`). :class:`Broker` is the sans-IO
model and :class:`Session` turns one server-role core's events into model calls, so both are
testable without sockets; :func:`memory_pair` puts the model behind an
``amqp_sansio.testing.ConnectionPair``.
:class:`BrokerOptions` holds the limits, timeouts and flow control (RabbitMQ's defaults), and
:class:`User`/:class:`Permission` the users and what they may do, :class:`Policy` a
``rabbitmqctl set_policy`` (:meth:`Broker.set_policy`). :func:`memory_server` is a
server factory for ``amqp_sansio.testing`` (``MemoryConnection``, ``fault_sweep``).
"""

from __future__ import annotations

from ._broker import Broker
from ._channel import DeliverySink, GetResult, ModelChannel, ModelConnection, PublishOutcome
from ._cli import load_config, main
from ._errors import BrokerError
from ._inmemory import (
    MemoryServer,
    MemoryServer010,
    MemoryServerSide,
    MemoryServerSide010,
    memory_pair,
    memory_server,
    memory_server_0_10,
)
from ._inspect import (
    BindingSnapshot,
    BrokerSnapshot,
    ConnectionSnapshot,
    ExchangeSnapshot,
    MessageSnapshot,
    QueueSnapshot,
    peek,
    purge,
)
from ._message import Message
from ._options import BrokerOptions
from ._permissions import Permission, User
from ._policies import Policy
from ._queues import QueueInfo
from ._routing import topic_matches
from ._server import (
    BrokerThread,
    close_connection,
    inspect,
    make_broker,
    management_url,
    run_in_thread,
    running,
    serve,
    serving_broker,
    shutdown,
)
from ._server_0_10 import handle_0_10, serve_0_10
from ._session import Session, SessionTransport
from ._store import DurableStore, StoreError

__all__ = [
    "BindingSnapshot",
    "Broker",
    "BrokerError",
    "BrokerOptions",
    "BrokerSnapshot",
    "BrokerThread",
    "ConnectionSnapshot",
    "DeliverySink",
    "DurableStore",
    "ExchangeSnapshot",
    "GetResult",
    "MemoryServer",
    "MemoryServer010",
    "MemoryServerSide",
    "MemoryServerSide010",
    "Message",
    "MessageSnapshot",
    "ModelChannel",
    "ModelConnection",
    "Permission",
    "Policy",
    "PublishOutcome",
    "QueueInfo",
    "QueueSnapshot",
    "Session",
    "SessionTransport",
    "StoreError",
    "User",
    "close_connection",
    "handle_0_10",
    "inspect",
    "load_config",
    "main",
    "make_broker",
    "management_url",
    "memory_pair",
    "memory_server",
    "memory_server_0_10",
    "peek",
    "purge",
    "run_in_thread",
    "running",
    "serve",
    "serve_0_10",
    "serving_broker",
    "shutdown",
    "topic_matches",
]

# Public objects say where users import them from (repr, pickling, autodoc).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("amqp_broker._"):
        _obj.__module__ = __name__
del _name, _obj
