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

import importlib
from typing import TYPE_CHECKING, Final

from amqp_sansio.client import exports as _exports
from amqp_sansio.client.exports import *  # noqa: F403  (the exceptions, ConnectionParameters)

from ._channel import Channel, Consumer, Publisher, PublishTicket
from ._connection import Connection, connect, connect_stream
from ._message import Message
from ._recovery import RecoveryEvents
from ._server import (
    ConnectionHandler,
    ServerConnection,
    read_protocol_header,
    serve,
    serve_stream,
    serve_streams,
)

if TYPE_CHECKING:
    from ._server_0_10 import ServerConnection010, serve_stream_0_10
    from ._v0_10 import Connection010, Session010, Subscription010, connect_0_10

# AMQP 0-10's half of the adapter (its generated tables cost as much to import as the rest of
# the package): loaded when one of its names is first used, so a 0-9-1 client never pays.
_LAZY: Final = {
    "Connection010": "._v0_10",
    "Session010": "._v0_10",
    "Subscription010": "._v0_10",
    "connect_0_10": "._v0_10",
    "ServerConnection010": "._server_0_10",
    "serve_stream_0_10": "._server_0_10",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(module, __name__), name)
    if getattr(value, "__module__", "").startswith(f"{__name__}._"):
        value.__module__ = __name__
    globals()[name] = value
    return value


__all__ = [
    "Channel",
    "Connection",
    "Connection010",
    "ConnectionHandler",
    "Consumer",
    "Message",
    "PublishTicket",
    "Publisher",
    "RecoveryEvents",
    "ServerConnection",
    "ServerConnection010",
    "Session010",
    "Subscription010",
    "connect",
    "connect_0_10",
    "connect_stream",
    "read_protocol_header",
    "serve",
    "serve_stream",
    "serve_stream_0_10",
    "serve_streams",
]
__all__ += _exports.__all__

# Public objects say where users import them from (repr, pickling, autodoc).
for _name in __all__:
    if _name in _LAZY:
        continue  # set by __getattr__ when loaded
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(f"{__name__}._"):
        _obj.__module__ = __name__
del _name, _obj
