"""What every adapter logs when a connection ends, in the same words: one fault reads the same
in amqp_trio's, amqp_asyncio's and amqp_blocking's logs (recovery's own lines are the
supervisor's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

    from .._errors import ProtocolError
    from ._errors import AMQPError

__all__ = ["report_closed_by_broker", "report_lost", "report_protocol_error"]


def report_closed_by_broker(
    logger: logging.Logger, address: str, error: AMQPError, *, handshaking: bool = False
) -> None:
    """The broker sent ``connection.close``: a warning (a debug line during the handshake,
    where ``connect()`` raises it anyway)."""
    (logger.debug if handshaking else logger.warning)(
        "%s closed the connection: %s", address, error
    )


def report_protocol_error(logger: logging.Logger, address: str, error: ProtocolError) -> None:
    """The broker broke the protocol (the core's close answering it is on its way)."""
    logger.warning("protocol error from %s: %s", address, error)


def report_lost(logger: logging.Logger, address: str, error: AMQPError) -> None:
    """The transport ended without a close handshake and nothing recovers it (under a
    recovery policy the supervisor says ``lost the connection ... recovering`` instead)."""
    logger.warning("lost the connection to %s: %s", address, error)
