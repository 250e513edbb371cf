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

__all__ = ["ADAPTER_VERSIONS", "ClientProtocol", "ProtocolFallback", "client_protocol"]

logger: Final = logging.getLogger("amqp_sansio.client")

#: What ``protocol=`` accepts: a version the adapters speak, or ``"auto"``.
ClientProtocol: TypeAlias = Literal["0-9-1", "0-9", "0-8", "auto"]

#: The versions the adapters speak, each over the one core (``amqp_sansio.Connection``).
#: 0-10 has a core of its own (``amqp_sansio.v0_10``): it joins here, and in
#: :func:`client_protocol`, once the adapters run it.
ADAPTER_VERSIONS: Final = AUTO_ORDER

_NAMES: Final[dict[str, ClientProtocol]] = {
    "0-9-1": "0-9-1",
    "0-9": "0-9",
    "0-8": "0-8",
    "auto": "auto",
}


def client_protocol(value: object, what: str = "protocol") -> ClientProtocol:
    """*value* (a name or a :class:`~amqp_sansio.ProtocolVersion`) as a ``protocol=`` the
    adapters accept; *what* names the argument in the error.

    :raises ValueError: not a version the adapters speak; for 0-10 the message says so.
    """
    name = value.value if isinstance(value, ProtocolVersion) else value
    if isinstance(name, str) and name in _NAMES:
        return _NAMES[name]
    if name == ProtocolVersion.AMQP_0_10.value:
        # The seam for 0-10: its client replaces this refusal.
        raise ValueError(
            f"{what}: the adapters do not speak AMQP 0-10 yet (its sans-IO core is "
            "amqp_sansio.v0_10); use '0-9-1', '0-9', '0-8' or 'auto'"
        )
    raise ValueError(f"{what}: expected '0-9-1', '0-9', '0-8' or 'auto', got {value!r}")


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

        :raises ValueError: the server offers a version the adapters do not speak yet (0-10);
            the refusal is its ``__cause__``.
        """
        if not self.auto:
            return False
        version = next_protocol(self.tried, error.offered)
        if version is None:
            return False
        try:
            protocol = client_protocol(version, "the server's answer")
        except ValueError as exc:
            raise exc from error
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
