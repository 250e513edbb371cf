"""What amqp-publish and amqp-consume share: connecting, and saying why something failed."""

from __future__ import annotations

import ssl
import sys
from typing import TYPE_CHECKING

from ._cli import EXIT_AMQP_ERROR, EXIT_UNREACHABLE

if TYPE_CHECKING:
    from amqp_sansio.client import ConnectionParameters

__all__ = ["failure"]


def failure(prog: str, exc: BaseException, params: ConnectionParameters, doing: str) -> int:
    import amqp_blocking  # loaded already: the tool connected with it

    """Print why *doing* failed, in one line, and return the exit status for it.

    Not an AMQP or socket error: re-raised (a bug deserves its traceback).
    """
    where = params.address
    if isinstance(exc, amqp_blocking.ConnectionTimeoutError):
        message, status = f"cannot connect to {where}: {exc}", EXIT_UNREACHABLE
    elif isinstance(exc, amqp_blocking.ConnectionClosedError) and doing == "connecting":
        message = f"{where} refused the connection: {exc}"
        status = EXIT_AMQP_ERROR
    elif isinstance(exc, amqp_blocking.ConnectionClosedError):
        message, status = f"{doing}: the broker closed the connection: {exc}", EXIT_AMQP_ERROR
    elif isinstance(exc, amqp_blocking.ChannelClosedError):
        message, status = f"{doing}: {exc}", EXIT_AMQP_ERROR
    elif isinstance(exc, amqp_blocking.ConnectionLostError):
        message, status = f"{doing}: the connection to {where} was lost: {exc}", EXIT_AMQP_ERROR
    elif isinstance(exc, amqp_blocking.AMQPError):
        message, status = f"{doing}: {exc}", EXIT_AMQP_ERROR
    elif isinstance(exc, ssl.SSLError):
        message, status = f"TLS with {where} failed: {exc.reason or exc}", EXIT_UNREACHABLE
    elif isinstance(exc, OSError):
        # the adapters' message names the address and a hint; the tool says both its own way
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        reason = cause.strerror or str(cause) or type(cause).__name__
        if doing == "connecting":
            message = f"cannot connect to {where}: {reason}"
        else:
            message = f"{doing}: {reason}"
        status = EXIT_UNREACHABLE if doing == "connecting" else EXIT_AMQP_ERROR
    else:
        raise exc
    print(f"{prog}: {message}", file=sys.stderr)
    return status
