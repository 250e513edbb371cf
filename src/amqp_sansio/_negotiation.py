"""Version negotiation as the protocol header section of the spec describes it, as pure functions.

Only the client sends a protocol header (in 0-8, 0-9 and 0-9-1); a server that supports the
version it names answers with ``connection.start``, and a server that does not writes a header
it supports and closes the connection. A server may accept several protocols on one port, and
tells them apart by all eight octets. A client learns what the server speaks by trying its
highest version and reconnecting with what the server answered.

Two headers need a reading rather than a lookup:

* ``AMQP 1 1 0 9`` is the 0-9 header, but aioamqp, async_amqp and trio-amqp speak 0-9-1 under it
  and RabbitMQ serves it as 0-9-1; qpid-python speaks (Qpid's) 0-9 under it. The server role
  reads it as 0-9-1 unless told otherwise (``header_0_9``), and as the other reading when it
  serves only that one.
* ``AMQP 1 1 9 1`` is the header printed in the June 2006 0-8 PDF (py-amqplib sends it);
  RabbitMQ serves it as 0-8, and so do we. Our 0-8 client sends the XML's ``AMQP 1 1 8 0``.

A server that serves several families on one port (0-10 is a separate core,
``amqp_sansio.v0_10``) reads the first eight octets itself and calls :func:`choose_version`
with everything it serves: the answer says which core to build (and feed the eight octets to),
or that the header is refused, in which case it writes :func:`header_for` its preferred
version and closes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._frames import (
    PROTOCOL_HEADER_0_8,
    PROTOCOL_HEADER_0_9,
    PROTOCOL_HEADER_0_9_1,
    PROTOCOL_HEADER_0_10,
    PROTOCOL_HEADER_1_0,
    ProtocolHeader,
    ProtocolVersion,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._util import Buffer

__all__ = [
    "AUTO_ORDER",
    "choose_version",
    "header_for",
    "next_protocol",
    "requested_version",
    "version_of",
]

_V = ProtocolVersion

#: What ``protocol="auto"`` tries, in order, when the server's answer names nothing better.
AUTO_ORDER: Final = (_V.AMQP_0_9_1, _V.AMQP_0_9, _V.AMQP_0_8)

#: The versions :class:`~amqp_sansio.Connection` speaks (0-10 is its own core).
CORE_VERSIONS: Final = frozenset(AUTO_ORDER)

_HEADERS: Final = {
    _V.AMQP_0_8: PROTOCOL_HEADER_0_8,
    _V.AMQP_0_9: PROTOCOL_HEADER_0_9,
    _V.AMQP_0_9_1: PROTOCOL_HEADER_0_9_1,
    _V.AMQP_0_10: PROTOCOL_HEADER_0_10,
    _V.AMQP_1_0: PROTOCOL_HEADER_1_0,
}


def version_of(value: ProtocolVersion | str) -> ProtocolVersion:
    """*value* as a :class:`ProtocolVersion`: a member, or its name (``"0-9-1"``, ``"0-8"``).

    :raises ValueError: no version has that name.
    """
    if isinstance(value, ProtocolVersion):
        return value
    try:
        return ProtocolVersion(value)
    except ValueError:
        names = ", ".join(repr(v.value) for v in ProtocolVersion if v is not _V.UNKNOWN)
        raise ValueError(f"unknown protocol version {value!r} (one of {names})") from None


def header_for(version: ProtocolVersion | str) -> bytes:
    """The 8 octets a client of *version* sends, and a server that prefers *version* writes
    before closing a connection whose header it refused (0-8: ``AMQP 1 1 8 0``).

    :raises ValueError: *version* has no header of its own (``UNKNOWN``).
    """
    version = version_of(version)
    try:
        return _HEADERS[version]
    except KeyError:
        raise ValueError(f"{version.value} has no protocol header") from None


def requested_version(
    header: Buffer | ProtocolHeader,
    *,
    header_0_9: ProtocolVersion | str = _V.AMQP_0_9_1,
) -> ProtocolVersion:
    """Which version a client's 8-octet *header* asks for (``UNKNOWN`` for anything else).

    :param header_0_9: how to read ``AMQP 1 1 0 9``: as 0-9-1 (RabbitMQ's reading, for aioamqp
        and async_amqp) or as 0-9 (qpid-python).
    """
    octets = header.octets if isinstance(header, ProtocolHeader) else bytes(header)
    if octets == PROTOCOL_HEADER_0_9:
        return version_of(header_0_9)
    if len(octets) != 8 or not octets.startswith(b"AMQP"):
        return _V.UNKNOWN
    return ProtocolHeader(octets).version


def choose_version(
    header: Buffer | ProtocolHeader,
    accepted: Iterable[ProtocolVersion | str],
    *,
    header_0_9: ProtocolVersion | str = _V.AMQP_0_9_1,
) -> ProtocolVersion | None:
    """The version a server that serves *accepted* speaks to a client that sent *header*, or
    None: refuse it (write :func:`header_for` the preferred version, then close).

    The server-side decision of the protocol header section, for one port serving several
    versions or families: 0-10 is among the answers when *accepted* holds it. ``AMQP 1 1 0 9``
    is served as *header_0_9* says when both readings are accepted, else as the one that is.
    """
    version = requested_version(header, header_0_9=header_0_9)
    served = {version_of(v) for v in accepted}
    if version in served:
        return version
    octets = header.octets if isinstance(header, ProtocolHeader) else bytes(header)
    if octets == PROTOCOL_HEADER_0_9:
        other = _V.AMQP_0_9 if version is _V.AMQP_0_9_1 else _V.AMQP_0_9_1
        return other if other in served else None
    return None


def next_protocol(
    tried: Iterable[ProtocolVersion | str], offered: ProtocolHeader | None
) -> ProtocolVersion | None:
    """``protocol="auto"``: the version to connect with next, or None to give up.

    *tried* holds every version tried so far (the first attempt is ``AUTO_ORDER[0]``, 0-9-1);
    *offered* is the header the server answered the last attempt with
    (:attr:`ProtocolHeaderRefused.offered <amqp_sansio.ProtocolHeaderRefused>`), or None when
    it closed without one. The server's answer wins when it names a version not tried yet (0-10
    only this way, or when the application asks for it); otherwise the next of 0-9-1, 0-9, 0-8.
    """
    done = {version_of(v) for v in tried}
    if offered is not None:
        version = offered.version
        if version in CORE_VERSIONS or version is _V.AMQP_0_10:
            return None if version in done else version
    for version in AUTO_ORDER:
        if version not in done:
            return version
    return None
