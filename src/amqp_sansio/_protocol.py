"""Protocol versions as method tables: how each meaning is numbered and encoded in one version.

The state machines (:mod:`._state`) are written once, by meaning; a :class:`ProtocolSpec` binds
them to one version's generated classes. Methods that mean the same in two versions and have the
same arguments share their Python class; where a version numbers such a class differently (0-8's
connection.close is (10, 60)), its spec records the ids it uses on the wire.

A version older than 0-9-1 also defines fewer field-table types: its spec narrows the tables of
what we send to them (:meth:`ProtocolSpec.narrow`) before anything is encoded. 0-9-1 does not
narrow, so its sends pay for none of this.
"""

from __future__ import annotations

import copy
import struct
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, TypeVar, cast, final

import attrs

from ._errors import LocalProtocolError
from ._frames import (
    LENIENT_DECODERS,
    PROTOCOL_HEADER_0_8,
    PROTOCOL_HEADER_0_9,
    PROTOCOL_HEADER_0_9_1,
    ProtocolVersion,
)
from ._generated import spec_0_9_1
from ._negotiation import version_of
from ._table import TYPES_0_8, TYPES_0_9, decode_table, narrow_table

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._method import Buffer, ContentProperties, Method
    from ._table import FieldTable

__all__ = [
    "AMQP_0_8",
    "AMQP_0_8_QPID",
    "AMQP_0_9",
    "AMQP_0_9_1",
    "SPECS",
    "ProtocolSpec",
    "spec_for",
]

_pack_ids: Final = struct.Struct(">HH").pack

_T = TypeVar("_T", "Method", "ContentProperties")

# Fields that mean the same under another name in another version: 0-9's basic.consume calls
# 0-9-1's ``arguments`` table ``filter`` (same slot, same type; RabbitMQ reads it as arguments).
_RENAMED: Final = {
    ("basic.consume", "filter"): "arguments",
    ("basic.consume", "arguments"): "filter",
}


class _Make(Protocol):
    """A method class of some version, called with its fields by name."""

    def __call__(self, **fields: object) -> Method: ...


def _table_fields(cls: type[Method | ContentProperties]) -> tuple[str, ...]:
    return tuple(name for name, kind in cls.FIELDS if kind == "table")


@final
class ProtocolSpec:
    """One protocol version: its header, what ``connection.start`` says, and its method table.

    :param methods: the version's classes keyed by their wire index (``class_id << 16 |
        method_id``) in this version; a shared class may sit at another index than its own
        ``INDEX``, and is then sent with these ids.
    :param properties: content property classes keyed by class id.
    :param table_types: the field-value type codes this version defines, when it defines fewer
        than RabbitMQ's 0-9-1 dialect: the tables of what we send are narrowed to them
        (:meth:`narrow`). None (0-9-1): tables are sent as they are.
    :param load: instead of *methods* and *properties*: a function returning both, called the
        first time the tables are used (0-8's and 0-9's generated modules are only imported by
        a connection that speaks them).
    """

    # Filled from the tables (at once, or on first use when they load lazily).
    _TABLES: Final = frozenset(
        ("by_meaning", "classes", "methods", "properties", "table_fields", "wire_ids")
    )

    by_meaning: Mapping[str, type[Method]]
    classes: frozenset[type[Method]]
    methods: Mapping[int, type[Method]]
    properties: Mapping[int, type[ContentProperties]]
    table_fields: Mapping[type[Method | ContentProperties], tuple[str, ...]]
    wire_ids: Mapping[type[Method], bytes]

    __slots__ = (
        "_load",
        "by_meaning",
        "classes",
        "header",
        "methods",
        "properties",
        "start_version",
        "table_fields",
        "table_types",
        "version",
        "wire_ids",
    )

    def __init__(
        self,
        version: ProtocolVersion,
        *,
        header: bytes,
        start_version: tuple[int, int],
        methods: Mapping[int, type[Method]] | None = None,
        properties: Mapping[int, type[ContentProperties]] | None = None,
        table_types: frozenset[str] | None = None,
        load: Callable[[], _Tables] | None = None,
    ) -> None:
        #: Which version this is.
        self.version: Final = version
        #: The 8 octets a client of this version sends first.
        self.header: Final = header
        #: ``(version_major, version_minor)`` as ``connection.start`` carries them.
        self.start_version: Final = start_version
        self.table_types: Final = table_types
        self._load = load
        if load is None:
            assert methods is not None
            assert properties is not None
            self._build(methods, properties)

    def __getattr__(self, name: str) -> object:
        # Only reached for a table slot not filled yet: load the tables, then read it.
        load = self._load
        if load is None or name not in ProtocolSpec._TABLES:
            raise AttributeError(name)
        self._load = None
        self._build(*load())
        return object.__getattribute__(self, name)

    def _build(
        self,
        methods: Mapping[int, type[Method]],
        properties: Mapping[int, type[ContentProperties]],
    ) -> None:
        version = self.version
        table_types = self.table_types
        #: Decoding: wire index -> class.
        self.methods = MappingProxyType(dict(methods))
        #: Content property classes by class id.
        self.properties = MappingProxyType(dict(properties))
        by_meaning: dict[str, type[Method]] = {}
        wire_ids: dict[type[Method], bytes] = {}
        for index, cls in methods.items():
            if by_meaning.setdefault(cls.NAME, cls) is not cls:
                raise ValueError(f"{version.value}: two classes mean {cls.NAME}")
            if index != cls.INDEX:
                wire_ids[cls] = _pack_ids(index >> 16, index & 0xFFFF)
        classes = set(methods.values())
        for cls in classes:
            for reply in cls.RESPONSES:
                if reply not in classes:
                    # A shared class answered by another version's reply: the request FIFO
                    # would never match what this version decodes.
                    raise ValueError(
                        f"{version.value}: {cls.NAME}'s reply {reply.__qualname__} is not in the "
                        "method table"
                    )
        #: Every method class of this version.
        self.classes = frozenset(classes)
        #: Meaning (``"basic.consume"``) -> this version's class.
        self.by_meaning = MappingProxyType(by_meaning)
        #: Classes this version numbers differently from their own ``CLASS_ID``/``METHOD_ID``:
        #: the 4 octets it sends instead.
        self.wire_ids = MappingProxyType(wire_ids)
        fields: dict[type[Method | ContentProperties], tuple[str, ...]] = {}
        if table_types is not None:
            owners: list[type[Method | ContentProperties]] = [*methods.values()]
            owners += properties.values()
            for owner in owners:
                names = _table_fields(owner)
                if names:
                    fields[owner] = names
        #: Where :meth:`narrow` looks: the table fields of each class that has any.
        self.table_fields = MappingProxyType(fields)

    def __repr__(self) -> str:
        return f"<ProtocolSpec {self.version.value}>"

    def ids(self, cls: type[Method]) -> tuple[int, int]:
        """The (class id, method id) this version gives *cls* on the wire."""
        ids = self.wire_ids.get(cls)
        if ids is None:
            return cls.CLASS_ID, cls.METHOD_ID
        return ids[0] << 8 | ids[1], ids[2] << 8 | ids[3]

    def make(self, meaning: str, **fields: object) -> Method:
        """This version's method of *meaning* (``"basic.consume"``), built from *fields*.

        :raises KeyError: the version has no such method.
        """
        return cast("_Make", self.by_meaning[meaning])(**fields)

    def has_reply(self, meaning: str) -> bool:
        """Whether this version's method of *meaning* (``"basic.recover"``) is answered: 0-9-1's
        and RabbitMQ's 0-8 basic.recover have recover-ok, 0-9's has none. False when the version
        has no such method."""
        cls = self.by_meaning.get(meaning)
        return cls is not None and bool(cls.RESPONSES)

    def adapt(self, method: Method) -> Method:
        """*method* as this version's class of the same meaning: *method* itself when it is
        one of this version's classes, else a new method built from the fields both have (0-8's
        ``basic.consume`` from 0-9-1's, a received 0-8 ``basic.cancel-ok`` as 0-9-1's).

        Lets code written against 0-9-1's classes (the adapters' channel API, the broker) speak
        another version. A field the target lacks is dropped when it holds its default (an empty
        ``arguments`` table) and refused otherwise: 0-8 has nowhere to put a consumer priority.

        :raises LocalProtocolError: (540) this version has no such method, or no place for a
            field that is set.
        """
        if type(method) in self.classes:
            return method
        return _convert(self, method)

    def narrow_table(self, table: FieldTable, what: str) -> FieldTable:
        """*table* narrowed to this version's field types (itself in 0-9-1); *what* names it in
        the error.

        :raises LocalProtocolError: (502) a value this version can't carry.
        """
        if self.table_types is None:
            return table
        return narrow_table(table, self.table_types, self.version.value, what)

    def narrow(self, value: _T) -> _T:
        """*value* (a method or content properties we send) with its field tables narrowed to
        the field types this version defines: *value* itself when there is nothing to do, else a
        copy.

        :raises LocalProtocolError: (502) a table holds a value this version can't carry; the
            error names the method or property, the key and the value's type.
        """
        names = self.table_fields.get(type(value))
        if names is None or self.table_types is None:
            return value
        narrowed = copy.copy(value)  # a decoded table is decoded in the copy only
        what = getattr(type(value), "NAME", None) or f"{type(value).__name__}"
        for name in names:
            table: FieldTable | None = getattr(narrowed, name)
            if table:
                setattr(narrowed, name, self.narrow_table(table, f"{what} {name}"))
        return narrowed


_DEFAULTS: Final[dict[type[Method], dict[str, object]]] = {}


def _defaults(cls: type[Method]) -> dict[str, object]:
    out = _DEFAULTS.get(cls)
    if out is None:
        out = {}
        for field in attrs.fields(cast("type[attrs.AttrsInstance]", cls)):
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]  # attrs' stubs
                default = default.factory()
            out[field.name] = default
        _DEFAULTS[cls] = out
    return out


def _convert(spec: ProtocolSpec, method: Method) -> Method:
    source = type(method)
    target = spec.by_meaning.get(source.NAME)
    version = spec.version.value
    if target is None:
        raise LocalProtocolError(
            f"AMQP {version} has no method {source.NAME}",
            reply_code=540,
            class_id=source.CLASS_ID,
            method_id=source.METHOD_ID,
        )
    names = {name for name, _ in target.FIELDS}
    fields: dict[str, object] = {}
    for name, value in ((name, getattr(method, name)) for name, _ in source.FIELDS):
        into = name if name in names else _RENAMED.get((source.NAME, name))
        if into is not None and into in names:
            fields[into] = value
        elif value != _defaults(source)[name]:
            raise LocalProtocolError(
                f"{source.NAME} {name}={value!r}: AMQP {version}'s {source.NAME} has no such field",
                reply_code=540,
                class_id=source.CLASS_ID,
                method_id=source.METHOD_ID,
            )
    return cast("_Make", target)(**fields)


#: A version's method and content property tables, as its generated module has them.
_Tables: TypeAlias = "tuple[Mapping[int, type[Method]], Mapping[int, type[ContentProperties]]]"


def _tables_0_9() -> _Tables:
    from ._generated import spec_0_9

    return spec_0_9.METHODS, spec_0_9.PROPERTIES


def _tables_0_8() -> _Tables:
    from ._generated import spec_0_8

    LENIENT_DECODERS[spec_0_8.BasicConsume] = _decode_consume_0_8
    return spec_0_8.METHODS, spec_0_8.PROPERTIES


def _decode_consume_0_8(buf: Buffer, offset: int) -> tuple[Method, int]:
    """0-8's basic.consume, and qpid-python's 0-8 dialect of it (amqp-0-8-qpid), which adds
    0-9-1's ``arguments`` table after ``nowait``: an empty one is read and dropped (RabbitMQ
    refuses the frame). Where the 0-8 fields end, a frame-end octet means there is no table
    (a table's length never starts with 0xCE within any frame_max)."""
    from ._generated import spec_0_8  # loaded already: only 0-8's table decodes with this

    method, end = spec_0_8.BasicConsume.decode(buf, offset)
    if end < len(buf) and buf[end] != spec_0_8.FRAME_END:
        arguments, end = decode_table(buf, end)
        if arguments:
            raise ValueError(
                f"basic.consume arguments {sorted(arguments)}: AMQP 0-8's basic.consume has no "
                "arguments"
            )
    return method, end


#: AMQP 0-9-1 with RabbitMQ's extensions.
AMQP_0_9_1: Final = ProtocolSpec(
    ProtocolVersion.AMQP_0_9_1,
    header=PROTOCOL_HEADER_0_9_1,
    start_version=(0, 9),
    methods=spec_0_9_1.METHODS,
    properties=spec_0_9_1.PROPERTIES,
)

#: AMQP 0-9 (``connection.start`` says 0-9, as RabbitMQ's does for 0-9 and 0-9-1 alike).
AMQP_0_9: Final = ProtocolSpec(
    ProtocolVersion.AMQP_0_9,
    header=PROTOCOL_HEADER_0_9,
    start_version=(0, 9),
    table_types=TYPES_0_9,
    load=_tables_0_9,
)

#: AMQP 0-8 as RabbitMQ 3.10 reads it (basic.recover 110, queue.unbind); ``connection.start``
#: says 8-0.
AMQP_0_8: Final = ProtocolSpec(
    ProtocolVersion.AMQP_0_8,
    header=PROTOCOL_HEADER_0_8,
    start_version=(8, 0),
    table_types=TYPES_0_8,
    load=_tables_0_8,
)


def _tables_0_8_qpid() -> _Tables:
    # RabbitMQ's 0-8 table with qpid's basic.recover: (60, 100) answered by recover-ok
    # (60, 101), where RabbitMQ reads recover-async (100), and recover (110) / recover-ok (111)
    rabbit, properties = _tables_0_8()
    methods = dict(rabbit)
    for method_id in (100, 110, 111):
        del methods[60 << 16 | method_id]
    methods[60 << 16 | 100] = spec_0_9_1.BasicRecover
    methods[60 << 16 | 101] = spec_0_9_1.BasicRecoverOk
    return methods, properties


#: AMQP 0-8 as qpid-python's 0-8 client speaks it (its ``amqp-0-8-qpid-stripped`` spec): as
#: :data:`AMQP_0_8`, but basic.recover (60, 100) is synchronous, answered by a recover-ok
#: (60, 101) that neither the 0-8 XML nor RabbitMQ defines. A server switches a client to it
#: with :meth:`Connection.use_dialect`; the embedded broker does for qpid-python's client.
AMQP_0_8_QPID: Final = ProtocolSpec(
    ProtocolVersion.AMQP_0_8,
    header=PROTOCOL_HEADER_0_8,
    start_version=(8, 0),
    table_types=TYPES_0_8,
    load=_tables_0_8_qpid,
)

#: The built-in versions by :class:`ProtocolVersion`.
SPECS: Final[Mapping[ProtocolVersion, ProtocolSpec]] = MappingProxyType(
    {spec.version: spec for spec in (AMQP_0_9_1, AMQP_0_9, AMQP_0_8)}
)


def spec_for(protocol: ProtocolSpec | ProtocolVersion | str) -> ProtocolSpec:
    """The :class:`ProtocolSpec` of *protocol*: a spec itself, a version, or its name
    (``"0-9-1"``, ``"0-9"``, ``"0-8"``).

    :raises ValueError: not a version :class:`~amqp_sansio.Connection` speaks (0-10 has its own
        core, ``amqp_sansio.v0_10``).
    """
    if isinstance(protocol, ProtocolSpec):
        return protocol
    version = version_of(protocol)
    spec = SPECS.get(version)
    if spec is None:
        speaks = ", ".join(repr(v.value) for v in SPECS)
        raise ValueError(
            f"the connection speaks {speaks}, not {version.value!r}"
            + (" (0-10 is amqp_sansio.v0_10)" if version is ProtocolVersion.AMQP_0_10 else "")
        )
    return spec
