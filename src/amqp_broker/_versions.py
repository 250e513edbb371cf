"""The protocol versions a broker can serve on its ports (:attr:`BrokerOptions.protocols`
chooses among them); ``_server`` holds the runner of each, keyed the same way."""

from __future__ import annotations

from typing import Final

from amqp_sansio import ProtocolVersion

__all__ = ["SERVED_VERSIONS"]

#: Most preferred first. 0-10 has a server of its own (``_server_0_10``) over the same model.
SERVED_VERSIONS: Final = (
    ProtocolVersion.AMQP_0_9_1,
    ProtocolVersion.AMQP_0_9,
    ProtocolVersion.AMQP_0_8,
    ProtocolVersion.AMQP_0_10,
)
