"""Base classes shared by every generated method table, and the two roles."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, ClassVar, Final, Self, TypeAlias, final

import attrs

from ._errors import RemoteProtocolError
from ._table import decode_table, speedups
from ._util import Buffer

if TYPE_CHECKING:
    from ._table import FieldTable

__all__ = [
    "Buffer",
    "ContentProperties",
    "FieldSpec",
    "MessageContent",
    "Method",
    "Role",
    "decode_received_table",
    "install_c_decoder",
    "malformed_table",
    "table_repr",
]


def install_c_decoder(
    cls: type[Method | ContentProperties],
    codes: bytes,
    names: tuple[str, ...],
    nones: tuple[str, ...] = (),
    *,
    properties: bool = False,
) -> None:
    """Make the C accelerator's decoder *cls*'s ``decode`` (nothing without the accelerator).

    It decodes the values of *codes* (a method's arguments, or with *properties* a flag word
    and the properties it announces; the codes are ``_speedups.c``'s) into a new instance's
    slots *names* and sets the slots *nones* to None, as the generated Python ``decode`` does
    with ``object.__new__`` and slot stores, in a third of its time, and hands that ``decode``
    (its ``fallback``) whatever it can't decode exactly: anything but well-formed ``bytes``, so
    errors and rare cases have one implementation, in Python.
    """
    if speedups is not None:
        decoder = speedups.builder(cls, codes, names, nones, properties, cls.decode)
        setattr(cls, "decode", decoder)  # noqa: B010 (mypy: a classmethod's place)


#: ``(python_name, wire_type)`` for each field, in wire order. Wire types are the spec's
#: primitive names: ``bit octet short long longlong shortstr longstr timestamp table``.
FieldSpec: TypeAlias = tuple[str, str]


class Role(enum.Enum):
    """Which end of a connection a peer plays."""

    CLIENT = "client"
    SERVER = "server"

    @property
    def peer(self) -> Role:
        """The other role."""
        return Role.SERVER if self is Role.CLIENT else Role.CLIENT


class Method:
    """One AMQP method: the same class is used to send it and to receive it.

    Subclasses are generated from the spec (``QueueDeclare``, ``BasicDeliver``, ...). Their
    ``encode`` appends class id, method id and arguments to a buffer; ``decode`` reads the
    arguments that follow the ids and returns the new offset.
    """

    __slots__ = ()

    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    #: ``CLASS_ID << 16 | METHOD_ID``, the key of the generated ``METHODS`` table.
    INDEX: ClassVar[int]
    #: Dotted spec name, e.g. ``"queue.declare"``.
    NAME: ClassVar[str]
    SYNCHRONOUS: ClassVar[bool]
    #: True when a content header and body frames follow this method.
    HAS_CONTENT: ClassVar[bool]
    #: The methods that may answer this one; empty when no reply is expected.
    RESPONSES: ClassVar[tuple[type[Method], ...]]
    #: The roles allowed to send this method (from the spec's ``<chassis>``).
    SENT_BY: ClassVar[frozenset[Role]]
    FIELDS: ClassVar[tuple[FieldSpec, ...]]

    def encode(self, out: bytearray) -> None:
        """Append class id, method id and the arguments to *out*."""
        raise NotImplementedError

    @classmethod
    def decode(cls, buf: Buffer, offset: int) -> tuple[Self, int]:
        """Read the arguments that start at *offset* (after the ids)."""
        raise NotImplementedError

    def expects_reply(self) -> bool:
        """Whether the peer must answer this method (false for ``nowait=True``)."""
        return bool(self.RESPONSES)


class ContentProperties:
    """The property list of a content header (``BasicProperties`` in 0-9-1)."""

    __slots__ = ()

    CLASS_ID: ClassVar[int]
    FIELDS: ClassVar[tuple[FieldSpec, ...]]

    def encode(self, out: bytearray) -> None:
        """Append the property flag words and the present properties to *out*."""
        raise NotImplementedError

    @classmethod
    def decode(cls, buf: Buffer, offset: int) -> tuple[Self, int]:
        """Read flag words and properties starting at *offset*."""
        raise NotImplementedError


@final
@attrs.frozen(slots=True)
class MessageContent:
    """The value of a ``content`` field (AMQP 0-9's message class, ``message.transfer``'s
    ``body``): the message's octets inline, or with ``reference`` the id of a reference opened
    with ``message.open`` and filled with ``message.append``.

    The 0-9 XML uses this domain without declaring it; on the wire it is Qpid's coding, a flag
    octet (0 inline, 1 reference) followed by a long string.
    """

    data: bytes = b""
    reference: bool = False


#: The largest value of each integer wire type, for validation and for test strategies.
INT_LIMITS: Final[dict[str, int]] = {
    "octet": 0xFF,
    "short": 0xFFFF,
    "long": 0xFFFF_FFFF,
    "longlong": 0xFFFF_FFFF_FFFF_FFFF,
    "timestamp": 0xFFFF_FFFF_FFFF_FFFF,
}


def decode_received_table(raw: bytes, what: str) -> FieldTable:
    """Decode a field table kept as received (its u32 size included), named *what* in errors.

    Content properties keep their tables in this form until first read.

    :raises RemoteProtocolError: (502) the table is malformed; offsets count from its size.
    """
    try:
        return decode_table(raw, 0)[0]
    except RemoteProtocolError as exc:
        raise malformed_table(what, exc) from None


def malformed_table(what: str, exc: RemoteProtocolError) -> RemoteProtocolError:
    """The error for a received table, named *what*, that :func:`decode_table` refused."""
    return RemoteProtocolError(
        f"{what} received from the peer is malformed: {exc.reply_text}", reply_code=exc.reply_code
    )


def table_repr(value: FieldTable | None, raw: bytes | None) -> str:
    """The repr of a lazily decoded table, without keeping the decoded value and never raising."""
    if raw is None:
        return repr(value)
    try:
        return repr(decode_table(raw, 0)[0])
    except RemoteProtocolError as exc:
        return f"<malformed field table of {len(raw)} octets: {exc.reply_text}>"
