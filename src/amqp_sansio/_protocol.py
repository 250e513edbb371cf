"""Protocol versions as method tables: how each meaning is numbered and encoded in one version.

The state machines (:mod:`._state`) are written once, by meaning; a :class:`ProtocolSpec` binds
them to one version's generated classes. Methods that mean the same in two versions and have the
same arguments share their Python class; where a version numbers such a class differently (0-8's
connection.close is (10, 60)), its spec records the ids it uses on the wire.
"""

from __future__ import annotations

import struct
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, final

from ._frames import PROTOCOL_HEADER_0_9_1, ProtocolVersion
from ._generated import spec_0_9_1

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._method import ContentProperties, Method

__all__ = ["AMQP_0_9_1", "ProtocolSpec"]

_pack_ids: Final = struct.Struct(">HH").pack


@final
class ProtocolSpec:
    """One protocol version: its header, what ``connection.start`` says, and its method table.

    :param methods: the version's classes keyed by their wire index (``class_id << 16 |
        method_id``) in this version; a shared class may sit at another index than its own
        ``INDEX``, and is then sent with these ids.
    :param properties: content property classes keyed by class id.
    """

    __slots__ = (
        "by_meaning",
        "header",
        "methods",
        "properties",
        "start_version",
        "version",
        "wire_ids",
    )

    def __init__(
        self,
        version: ProtocolVersion,
        *,
        header: bytes,
        start_version: tuple[int, int],
        methods: Mapping[int, type[Method]],
        properties: Mapping[int, type[ContentProperties]],
    ) -> None:
        #: Which version this is.
        self.version: Final = version
        #: The 8 octets a client of this version sends first.
        self.header: Final = header
        #: ``(version_major, version_minor)`` as ``connection.start`` carries them.
        self.start_version: Final = start_version
        #: Decoding: wire index -> class.
        self.methods: Final[Mapping[int, type[Method]]] = MappingProxyType(dict(methods))
        self.properties: Final[Mapping[int, type[ContentProperties]]] = MappingProxyType(
            dict(properties)
        )
        by_meaning: dict[str, type[Method]] = {}
        wire_ids: dict[type[Method], bytes] = {}
        for index, cls in methods.items():
            if by_meaning.setdefault(cls.NAME, cls) is not cls:
                raise ValueError(f"{version.value}: two classes mean {cls.NAME}")
            if index != cls.INDEX:
                wire_ids[cls] = _pack_ids(index >> 16, index & 0xFFFF)
        #: Meaning (``"basic.consume"``) -> this version's class.
        self.by_meaning: Final[Mapping[str, type[Method]]] = MappingProxyType(by_meaning)
        #: Classes this version numbers differently from their own ``CLASS_ID``/``METHOD_ID``:
        #: the 4 octets it sends instead.
        self.wire_ids: Final[Mapping[type[Method], bytes]] = MappingProxyType(wire_ids)

    def __repr__(self) -> str:
        return f"<ProtocolSpec {self.version.value}>"

    def ids(self, cls: type[Method]) -> tuple[int, int]:
        """The (class id, method id) this version gives *cls* on the wire."""
        ids = self.wire_ids.get(cls)
        if ids is None:
            return cls.CLASS_ID, cls.METHOD_ID
        return ids[0] << 8 | ids[1], ids[2] << 8 | ids[3]


#: AMQP 0-9-1 with RabbitMQ's extensions.
AMQP_0_9_1: Final = ProtocolSpec(
    ProtocolVersion.AMQP_0_9_1,
    header=PROTOCOL_HEADER_0_9_1,
    start_version=(0, 9),
    methods=spec_0_9_1.METHODS,
    properties=spec_0_9_1.PROPERTIES,
)
