"""The error hierarchy: who broke the protocol, and which AMQP reply code says so.

Every error carries the wire data a ``Connection.Close`` or ``Channel.Close`` needs
(``reply_code``, ``reply_text``, ``class_id``, ``method_id``), so whoever catches one can
answer the peer without translating anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._frames import ProtocolHeader, ProtocolVersion

__all__ = [
    "LocalProtocolError",
    "ProtocolError",
    "ProtocolHeaderRefused",
    "RemoteProtocolError",
]


class ProtocolError(Exception):
    """Base class for protocol violations; never raised itself.

    :ivar reply_code: the AMQP reply code (e.g. 501 frame error, 502 syntax error).
    :ivar reply_text: a message naming what was wrong and where.
    :ivar class_id: class of the method that caused it, or 0.
    :ivar method_id: method id of that method, or 0.
    """

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int

    def __init__(
        self, reply_text: str, *, reply_code: int, class_id: int = 0, method_id: int = 0
    ) -> None:
        if type(self) is ProtocolError:
            raise TypeError(
                "ProtocolError is abstract: raise LocalProtocolError or RemoteProtocolError"
            )
        super().__init__(reply_text)
        # A plain int, whether given as a literal or a ReplyCode member: what users print
        # and compare is the wire's number.
        self.reply_code = int(reply_code)
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.reply_text!r}, reply_code={self.reply_code}, "
            f"class_id={self.class_id}, method_id={self.method_id})"
        )


class LocalProtocolError(ProtocolError):
    """We were asked to do something the protocol forbids; nothing was written."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol (malformed bytes, an illegal method, a limit exceeded)."""


class ProtocolHeaderRefused(RemoteProtocolError):
    """Client role: the server answered our protocol header with its own (reply code 540): it
    does not speak ``requested`` and offers ``offered``.

    A client that speaks several versions reconnects with the offered one
    (:func:`~amqp_sansio.next_protocol` says which to try next).

    :ivar requested: the version we asked for.
    :ivar offered: the header the server wrote; ``offered.version`` is what it speaks.
    """

    requested: ProtocolVersion
    offered: ProtocolHeader

    def __init__(
        self,
        reply_text: str,
        *,
        reply_code: int,
        requested: ProtocolVersion,
        offered: ProtocolHeader,
    ) -> None:
        super().__init__(reply_text, reply_code=reply_code)
        self.requested = requested
        self.offered = offered
