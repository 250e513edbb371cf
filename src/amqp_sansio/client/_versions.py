"""Which protocol version an adapter's ``connect()`` speaks: the check of ``protocol=`` (and
of the URL's ``protocol`` query parameter), and the decision of ``protocol="auto"``'s loop.

``"auto"`` is the client's side of the spec's negotiation: try 0-9-1, and when the server answers
our header with its own (:class:`ProtocolVersionRefused`), reconnect with the version it named,
else the next of 0-9-1, 0-9, 0-8 (:func:`amqp_sansio.next_protocol`). The adapters own the
sockets; :class:`ProtocolFallback` tells them what to connect with next.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, final

import attrs

from .. import AUTO_ORDER, ProtocolVersion, next_protocol

if TYPE_CHECKING:
    from ._errors import ProtocolVersionRefused
    from ._params import ConnectionParameters

__all__ = [
    "ADAPTER_VERSIONS",
    "USE_0_10",
    "ClientProtocol",
    "ProtocolFallback",
    "client_protocol",
    "wants_0_10",
]

logger: Final = logging.getLogger("amqp_sansio.client")

#: What ``protocol=`` accepts: a version the adapters speak, or ``"auto"``.
ClientProtocol: TypeAlias = Literal["0-9-1", "0-9", "0-8", "0-10", "auto"]

#: The versions the adapters speak over the one core (``amqp_sansio.Connection``), in
#: ``"auto"``'s order. 0-10 has a core and a client of its own (``amqp_sansio.v0_10``, the
#: adapters' ``connect_0_10`` or ``connect(protocol="0-10")``): a different connection type,
#: so ``"auto"`` never lands on it.
ADAPTER_VERSIONS: Final = AUTO_ORDER

#: What to do instead, when 0-10 reaches the 0-9 family's ``connect()``.
USE_0_10: Final = (
    "AMQP 0-10 connections are a type of their own (sessions instead of channels): "
    "call connect(url, protocol='0-10') or connect_0_10(url)"
)

_NAMES: Final[dict[str, ClientProtocol]] = {
    "0-9-1": "0-9-1",
    "0-9": "0-9",
    "0-8": "0-8",
    "0-10": "0-10",
    "auto": "auto",
}


def client_protocol(value: object, what: str = "protocol") -> ClientProtocol:
    """*value* (a name or a :class:`~amqp_sansio.ProtocolVersion`) as a ``protocol=`` the
    adapters accept; *what* names the argument in the error.

    :raises ValueError: not a version the adapters speak.
    """
    name = value.value if isinstance(value, ProtocolVersion) else value
    if isinstance(name, str) and name in _NAMES:
        return _NAMES[name]
    raise ValueError(f"{what}: expected '0-9-1', '0-9', '0-8', '0-10' or 'auto', got {value!r}")


@final
class ProtocolFallback:
    """The attempts of one ``connect()``: :attr:`params` is what to connect with now (its
    ``protocol`` a version, never ``"auto"``); after an attempt failed, :meth:`retry` says
    whether to connect again, with :attr:`params` updated.

    An adapter's loop::

        fallback = ProtocolFallback(params)
        while True:
            try:
                return open_connection(fallback.params)
            except ProtocolVersionRefused as exc:
                if not fallback.retry(exc):
                    raise
    """

    def __init__(self, params: ConnectionParameters) -> None:
        if params.protocol == "0-10":
            raise ValueError(f"protocol 0-10 (from the URL): {USE_0_10}")
        self.auto: Final = params.protocol == "auto"
        first = ADAPTER_VERSIONS[0] if self.auto else ProtocolVersion(params.protocol)
        #: The versions tried so far, the current one last.
        self.tried: Final[list[ProtocolVersion]] = [first]
        #: What to connect with now.
        self.params = attrs.evolve(params, protocol=client_protocol(first))

    def retry(self, error: ProtocolVersionRefused) -> bool:
        """The server refused the current attempt's header with *error*: True when ``auto``
        has another version to try (now in :attr:`params`), False when the caller should
        raise *error*.

        :raises ValueError: the server offers 0-10 only (a connection of another type); the
            refusal is its ``__cause__``.
        """
        if not self.auto:
            return False
        version = next_protocol(self.tried, error.offered)
        if version is None:
            return False
        if version is ProtocolVersion.AMQP_0_10:
            raise ValueError(f"the server speaks AMQP 0-10 only: {USE_0_10}") from error
        protocol = client_protocol(version, "the server's answer")
        logger.info(
            "%s refused AMQP %s and offers %s: trying %s",
            self.params.address,
            self.tried[-1].value,
            error.offered.version.value,
            protocol,
        )
        self.tried.append(version)
        self.params = attrs.evolve(self.params, protocol=protocol)
        return True


def wants_0_10(
    protocol: str | ProtocolVersion | None,
    *,
    recovery: object = None,
    tracer_provider: object = None,
    meter_provider: object = None,
) -> bool:
    """Whether a ``connect(protocol=...)`` argument asks for 0-10 (checked like any other).

    :raises ValueError: it does, with an option of ``connect()`` that only the 0-9 family has
        (OpenTelemetry). Recovery is for both families.
    """
    if protocol is None or client_protocol(protocol) != "0-10":
        return False
    if tracer_provider is not None or meter_provider is not None:
        raise ValueError("OpenTelemetry instruments AMQP 0-9-1, 0-9 and 0-8 connections only")
    return True
