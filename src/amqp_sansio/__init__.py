"""amqp_sansio: a sans-IO AMQP 0-9-1 protocol core."""

from __future__ import annotations

from ._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from ._method import ContentProperties, Method, Role

__all__ = [
    "ContentProperties",
    "LocalProtocolError",
    "Method",
    "ProtocolError",
    "RemoteProtocolError",
    "Role",
]
