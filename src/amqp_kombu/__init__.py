"""amqp_kombu: a kombu transport over :mod:`amqp_blocking`, so kombu and Celery run on
amqp-sansio (AMQP 0-9-1, and 0-10 with ``transport_options={"protocol": "0-10"}``).

Importing it registers the URL schemes ``amqp-sansio://`` and ``amqps-sansio://`` with kombu;
``transport="amqp_kombu:Transport"`` (Celery's ``broker_transport``) selects it with no import::

    import amqp_kombu  # noqa: F401  (registers amqp-sansio://)
    import kombu

    with kombu.Connection("amqp-sansio://guest:guest@127.0.0.1//") as conn:
        queue = conn.SimpleQueue("jobs")
        queue.put({"hello": "world"})
        message = queue.get(timeout=1)
        message.ack()

See :doc:`/kombu` for the options and what differs from kombu's ``pyamqp`` transport.
"""

from __future__ import annotations

from typing import Final

from kombu import transport as _kombu_transport

from ._options import KOMBU_OPTIONS, TRANSPORT_OPTIONS, connection_parameters
from ._transport import (
    CHANNEL_ERRORS,
    CONNECTION_ERRORS,
    Channel,
    Connection,
    Message,
    OutgoingMessage,
    QueueDeclared,
    SSLTransport,
    Transport,
)
from ._transport_0_10 import Channel010, Connection010, Message010

__all__ = [
    "CHANNEL_ERRORS",
    "CONNECTION_ERRORS",
    "KOMBU_OPTIONS",
    "SCHEMES",
    "TRANSPORT_OPTIONS",
    "Channel",
    "Channel010",
    "Connection",
    "Connection010",
    "Message",
    "Message010",
    "OutgoingMessage",
    "QueueDeclared",
    "SSLTransport",
    "Transport",
    "connection_parameters",
    "register",
]

#: The URL schemes :func:`register` adds to kombu's transport aliases.
SCHEMES: Final = {
    "amqp-sansio": "amqp_kombu:Transport",
    "amqps-sansio": "amqp_kombu:SSLTransport",
}


def register() -> None:
    """Add :data:`SCHEMES` to kombu's transport aliases (done on import; kombu 5.7 reads no
    entry points for transports, so a URL scheme needs this)."""
    _kombu_transport.TRANSPORT_ALIASES.update(SCHEMES)


register()

# Public objects say where users import them from (repr, pickling, autodoc).
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(f"{__name__}._"):
        _obj.__module__ = __name__
del _name, _obj
