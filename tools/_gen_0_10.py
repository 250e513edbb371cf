"""The AMQP 0-10 emitter of ``tools/gen_spec.py``.

AMQP 0-10 is its own protocol family (``amqp_sansio.v0_10``), so it has its own model and
emitter, run by ``gen_spec.py`` next to the 0-9-1 targets (``python tools/gen_spec.py`` writes
its module, ``--check`` fails when it is stale). The input is the Qpid errata of the spec
(``spec/amqp.0-10-qpid-errata.stripped.xml``, BSD), which is what qpid-python and qpidd speak;
labels and first paragraphs for the docstrings come from the full errata XML.

The output, ``src/amqp_sansio/v0_10/_generated/spec_0_10.py``, holds:

* the type table: ``TypeCode``, the width of every code, and a codec for values of any code
  (decoders by code; the width class of a code the spec reserves but does not name is derived
  from the named codes sharing its high nibble);
* the enums of the domains that have ``<enum>`` choices;
* every struct (sized or not, coded or not, packed), control and command, with straight-line
  ``encode_fields``/``decode_fields`` over precompiled ``struct.Struct``s;
* the tables ``STRUCTS``, ``CONTROLS``, ``COMMANDS`` keyed by code.

All classes of the XML are generated, ``file`` and ``stream`` included (qpid-python's ``ops``
leaves those two out; ``tools/qpid_vectors_0_10.py`` loads them into it for the vectors).
"""

from __future__ import annotations

import hashlib
import keyword
import re
import struct
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

ROOT: Final = Path(__file__).resolve().parent.parent
SPEC_DIR: Final = ROOT / "spec"
STRUCTURE: Final = "amqp.0-10-qpid-errata.stripped.xml"
DOCUMENTATION: Final = "amqp.0-10-qpid-errata.xml"
OUT_PATH: Final = ROOT / "src" / "amqp_sansio" / "v0_10" / "_generated" / "spec_0_10.py"
NS: Final = "{http://www.amqp.org/schema/amqp.xsd}"

#: Struct names that would be too generic as flat Python names.
STRUCT_NAMES: Final = {"session.header": "SessionHeader"}
#: Fields whose values are credentials: never shown by repr().
SECRET_FIELDS: Final = frozenset({"connection.start-ok.response", "connection.secure-ok.response"})

#: Python annotation by primitive type name (struct types are named by their class).
INT_TYPES: Final = {
    "int8": "b",
    "uint8": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "sequence-no": "I",
    "datetime": "Q",
}
FLOAT_TYPES: Final = {"float": "f", "double": "d"}
STR_TYPES: Final = {
    "str8": (1, "utf-8"),
    "str16": (2, "utf-8"),
    "str8-latin": (1, "iso-8859-15"),
    "str16-latin": (2, "iso-8859-15"),
    "str8-utf16": (1, "utf-16-be"),
    "str16-utf16": (2, "utf-16-be"),
}
VBIN_TYPES: Final = {"vbin8": 1, "vbin16": 2, "vbin32": 4}
SIZE_CODES: Final = {1: "B", 2: "H", 4: "I"}
#: Packing flags: octet n covers fields 8n..8n+7, so the flags word is little-endian.
FLAG_CODES: Final = {2: "<H", 4: "<I"}


# --- the model -------------------------------------------------------------------------------


@attrs.frozen
class TypeDef:
    name: str
    code: int | None
    fixed: int | None  # octets, for fixed-width types
    variable: int | None  # octets of the size prefix, for variable-width types


@attrs.frozen
class Field:
    name: str  # Python name
    spec_name: str
    type: str  # a primitive type name, or the spec name of a struct
    enum: str | None  # the Python name of the domain's enum
    required: bool
    default: bool | None  # bits: their default; others: None
    label: str
    secret: bool


@attrs.frozen
class StructDef:
    py_name: str
    spec_name: str  # "class.name", or "name" at the top level
    name: str
    code: int | None
    size: int
    pack: int
    fields: tuple[Field, ...]
    doc: str


@attrs.frozen
class OpDef:
    kind: str  # "control" or "command"
    class_name: str
    class_code: int
    name: str
    code: int
    fields: tuple[Field, ...]
    sent_by: tuple[str, ...]
    responses: tuple[str, ...]
    result: str | None  # spec name of the result struct
    segments: bool
    header_entries: tuple[str, ...]
    doc: str

    @property
    def py_name(self) -> str:
        return camel(self.class_name) + camel(self.name)

    @property
    def spec_name(self) -> str:
        return f"{self.class_name}.{self.name}"


@attrs.frozen
class EnumDef:
    py_name: str
    spec_name: str
    type: str
    choices: tuple[tuple[str, int, str], ...]
    doc: str


@attrs.frozen
class Spec:
    types: tuple[TypeDef, ...]
    constants: tuple[tuple[str, int], ...]
    enums: tuple[EnumDef, ...]
    structs: tuple[StructDef, ...]
    ops: tuple[OpDef, ...]
    port: int


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-\s.]+", name))


def py_ident(name: str) -> str:
    ident = re.sub(r"[-\s]+", "_", name)
    return ident + "_" if keyword.iskeyword(ident) else ident


def squash(text: str | None) -> str:
    return " ".join((text or "").split())


def num(text: str | None) -> int | None:
    return None if text is None else int(text, 0)


# --- loading ---------------------------------------------------------------------------------


def load_docs(path: Path) -> dict[str, str]:
    """Labels and first paragraphs keyed "class.item" and "class.item.field" (top-level items
    by their bare name)."""
    docs: dict[str, str] = {}
    root = ET.parse(path).getroot()

    def text(elem: ET.Element) -> str:
        return squash("".join(elem.itertext()))

    def visit(elem: ET.Element, prefix: str) -> None:
        for item in elem:
            tag = item.tag.removeprefix(NS)
            name = item.get("name")
            if name is None or tag not in ("control", "command", "struct", "domain", "result"):
                continue
            key = prefix + name
            first = next((d for d in item.findall(NS + "doc") if d.get("type") is None), None)
            label = squash(item.get("label"))
            docs[key] = "\n\n".join(
                p
                for p in (label[:1].upper() + label[1:], text(first) if first is not None else "")
                if p
            )
            for field in item.findall(NS + "field"):
                docs[f"{key}.{field.get('name')}"] = squash(field.get("label"))
            result = item.find(NS + "result")
            if result is not None:
                visit(result, prefix)

    visit(root, "")
    for cls in root.findall(NS + "class"):
        visit(cls, cls.get("name", "") + ".")
    return docs


def load_spec() -> Spec:
    root = ET.parse(SPEC_DIR / STRUCTURE).getroot()
    docs = load_docs(SPEC_DIR / DOCUMENTATION)
    types = tuple(
        TypeDef(
            t.get("name", ""),
            num(t.get("code")),
            num(t.get("fixed-width")),
            num(t.get("variable-width")),
        )
        for t in root.findall(NS + "type")
    )
    type_names = {t.name for t in types}
    constants = tuple(
        (py_ident(c.get("name", "")).upper(), int(c.get("value", ""), 0))
        for c in root.findall(NS + "constant")
    )

    # Domains: "class.name" for class-scoped ones, "name" at the top level; value: type name.
    domains: dict[str, str] = {}
    enum_elems: dict[str, tuple[ET.Element, ET.Element]] = {}

    def add_domains(elem: ET.Element, prefix: str) -> None:
        for d in elem.findall(NS + "domain"):
            key = prefix + d.get("name", "")
            domains[key] = d.get("type", "")
            enum = d.find(NS + "enum")
            if enum is not None:
                enum_elems[key] = (d, enum)

    add_domains(root, "")
    classes = root.findall(NS + "class")
    for cls in classes:
        add_domains(cls, cls.get("name", "") + ".")

    # Enum names: the domain's name, prefixed with its class where two classes share it.
    bare = [key.rpartition(".")[2] for key in enum_elems]
    enums: dict[str, EnumDef] = {}
    for key, (d, enum) in enum_elems.items():
        short = key.rpartition(".")[2]
        py_name = camel(short) if bare.count(short) == 1 else camel(key)
        enums[key] = EnumDef(
            py_name=py_name,
            spec_name=key,
            type=d.get("type", ""),
            choices=tuple(
                (
                    py_ident(c.get("name", "")).upper(),
                    int(c.get("value", ""), 0),
                    docs.get(f"{key}.{c.get('name')}", ""),
                )
                for c in enum.findall(NS + "choice")
            ),
            doc=docs.get(key, ""),
        )

    struct_elems: list[tuple[str | None, ET.Element]] = []
    for cls in classes:
        cname = cls.get("name", "")
        struct_elems += [(cname, s) for s in cls.findall(NS + "struct")]
        for op in cls:
            result = op.find(NS + "result")
            if result is not None:
                struct_elems += [(cname, s) for s in result.findall(NS + "struct")]
    struct_names = {s.get("name", "") for _, s in struct_elems}
    if len(struct_names) != len(struct_elems):
        raise SystemExit("two structs share a name: struct references would be ambiguous")

    def resolve(type_name: str, cname: str | None) -> tuple[str, str | None]:
        """The primitive type or struct name a field type stands for, and its enum."""
        enum = None
        for candidate in ((f"{cname}.{type_name}",) if cname else ()) + (type_name,):
            if candidate in domains:
                key = candidate
                while key in domains:
                    if key in enums and enum is None:
                        enum = enums[key].py_name
                    key = domains[key]
                return key, enum
        return type_name, None

    def fields_of(elem: ET.Element, cname: str | None, key: str) -> tuple[Field, ...]:
        out = []
        for f in elem.findall(NS + "field"):
            ftype, enum = resolve(f.get("type", ""), cname)
            if ftype not in type_names and ftype not in struct_names:
                raise SystemExit(f"{key}.{f.get('name')}: unknown type {ftype!r}")
            default: bool | None = None
            if ftype == "bit":
                default = f.get("default") == "1"
            fkey = f"{key}.{f.get('name')}"
            out.append(
                Field(
                    name=py_ident(f.get("name", "")),
                    spec_name=f.get("name", ""),
                    type=ftype,
                    enum=enum,
                    required=f.get("required") == "true",
                    default=default,
                    label=docs.get(fkey, ""),
                    secret=fkey in SECRET_FIELDS,
                )
            )
        return tuple(out)

    class_codes = {cls.get("name", ""): int(cls.get("code", ""), 0) for cls in classes}
    structs = []
    for owner, s in struct_elems:
        name = s.get("name", "")
        key = f"{owner}.{name}" if owner else name
        struct_code = num(s.get("code"))
        structs.append(
            StructDef(
                py_name=STRUCT_NAMES.get(key, camel(name)),
                spec_name=key,
                name=name,
                code=None
                if struct_code is None or owner is None
                else class_codes[owner] << 8 | struct_code,
                size=int(s.get("size", "0")),
                pack=int(s.get("pack", "0")),
                fields=fields_of(s, owner, key),
                doc=docs.get(key, ""),
            )
        )

    ops = []
    other = {"client": "server", "server": "client"}
    for cls in classes:
        cname = cls.get("name", "")
        for op in cls:
            kind = op.tag.removeprefix(NS)
            if kind not in ("control", "command"):
                continue
            name = op.get("name", "")
            key = f"{cname}.{name}"
            handlers = {i.get("role", "") for i in op.findall(NS + "implement")}
            if handlers <= {"client", "server"}:
                sent_by = tuple(sorted({other[r] for r in handlers}))
            else:  # session controls: "sender"/"receiver" of commands, both roles play both
                sent_by = ("client", "server")
            result = op.find(NS + "result")
            result_name = None
            if result is not None:
                inline = result.find(NS + "struct")
                result_name = inline.get("name") if inline is not None else result.get("type")
            segments = op.find(NS + "segments")
            header = segments.find(NS + "header") if segments is not None else None
            ops.append(
                OpDef(
                    kind=kind,
                    class_name=cname,
                    class_code=class_codes[cname],
                    name=name,
                    code=int(op.get("code", ""), 0),
                    fields=fields_of(op, cname, key),
                    sent_by=sent_by,
                    responses=tuple(r.get("name", "") for r in op.findall(NS + "response")),
                    result=result_name,
                    segments=segments is not None,
                    header_entries=tuple(
                        e.get("type", "")
                        for e in (header.findall(NS + "entry") if header is not None else ())
                    ),
                    doc=docs.get(key, ""),
                )
            )
    return Spec(
        types=types,
        constants=constants,
        enums=tuple(enums.values()),
        structs=tuple(structs),
        ops=tuple(ops),
        port=int(root.get("port", "5672")),
    )


# --- emitting --------------------------------------------------------------------------------


class Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.structs: dict[str, str] = {}

    def struct(self, code: str) -> str:
        """The name of a module-level ``struct.Struct``: big-endian unless *code* says ``<``."""
        return self.structs.setdefault(code, "_S_" + code.replace("<", "LE_"))

    def __call__(self, line: str = "", indent: int = 0) -> None:
        self.lines.append("    " * indent + line if line else "")


def wrap(text: str, indent: int, width: int = 96) -> list[str]:
    return textwrap.wrap(text, width=width - 4 * indent) or [""]


def emit_docstring(e: Emitter, text: str, indent: int) -> None:
    paragraphs = [p for p in text.split("\n\n") if p]
    if not paragraphs:
        return
    body: list[str] = []
    for i, p in enumerate(paragraphs):
        if i:
            body.append("")
        body.extend(wrap(p.replace("\\", "\\\\").replace('"""', "'''"), indent))
    if len(body) == 1 and len(body[0]) < 80:
        e(f'"""{body[0]}"""', indent)
        return
    e('"""' + body[0], indent)
    for line in body[1:]:
        e(line, indent)
    e('"""', indent)


class Model:
    """Lookups the emitters share."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.types = {t.name: t for t in spec.types}
        self.structs = {s.name: s for s in spec.structs}

    def annotation(self, f: Field) -> str:
        t = f.type
        if t == "bit" or t == "boolean":
            return "bool"
        if t in INT_TYPES:
            return "int"
        if t in FLOAT_TYPES:
            return "float"
        if t in STR_TYPES:
            return "str"
        if t in self.structs:
            return self.structs[t].py_name
        return {
            "map": "Map",
            "list": "list[Value]",
            "array": "Array",
            "struct32": "Struct",
            "sequence-set": "SequenceSet",
            "byte-ranges": "ByteRanges",
            "uuid": "UUID",
        }.get(t, "bytes")  # vbin*, bin*, char, dec*

    def fixed_bytes(self, t: str) -> int | None:
        """The width of a fixed-width type read as bytes (bin*, char, dec*, char-utf32)."""
        td = self.types.get(t)
        if td is None or td.fixed is None or td.fixed == 0:
            return None
        if t in INT_TYPES or t in FLOAT_TYPES or t in ("boolean", "uuid"):
            return None
        return td.fixed


def emit_encode_field(e: Emitter, m: Model, f: Field, bit: int | None, indent: int) -> None:
    """Encode one field; *bit* is its packing flag, None in a struct without flags."""
    t = f.type
    if t == "bit":
        if bit is None:
            raise SystemExit(f"{f.spec_name}: a bit field needs a packing flag")
        e(f"if self.{f.name}:", indent)
        e(f"flags |= {bit:#x}", indent + 1)
        return
    # One local per field: mypy types each by its field.
    v = f"v_{f.name}"
    e(f"{v} = self.{f.name}", indent)
    if bit is None:
        i = indent
    else:
        e(f"if {v} is not None:", indent)
        i = indent + 1
        e(f"flags |= {bit:#x}", i)
    if t == "uint8":
        e(f"out.append({v})", i)
    elif t in INT_TYPES:
        e(f"out += {e.struct(INT_TYPES[t])}.pack({v})", i)
    elif t in FLOAT_TYPES:
        e(f"out += {e.struct(FLOAT_TYPES[t])}.pack({v})", i)
    elif t == "boolean":
        e(f"out.append(1 if {v} else 0)", i)
    elif t == "uuid":
        e(f"out += {v}.bytes", i)
    elif t in STR_TYPES:
        width, codec = STR_TYPES[t]
        e(f"b = {v}.encode()" if codec == "utf-8" else f'b = {v}.encode("{codec}")', i)
        if width == 1:
            e("out.append(len(b))  # ValueError past 255 octets", i)
        else:
            e(f"out += {e.struct(SIZE_CODES[width])}.pack(len(b))", i)
        e("out += b", i)
    elif t in VBIN_TYPES:
        width = VBIN_TYPES[t]
        if width == 1:
            e(f"out.append(len({v}))  # ValueError past 255 octets", i)
        else:
            e(f"out += {e.struct(SIZE_CODES[width])}.pack(len({v}))", i)
        e(f"out += {v}", i)
    elif t == "map":
        e(f"encode_map(out, {v}, 0)", i)
    elif t == "list":
        e(f"encode_list(out, {v}, 0)", i)
    elif t == "array":
        e(f"encode_array(out, {v}, 0)", i)
    elif t == "struct32":
        e(f"encode_struct32(out, {v}, 0)", i)
    elif t == "sequence-set":
        e(f"encode_sequence_set(out, {v})", i)
    elif t == "byte-ranges":
        e(f"encode_byte_ranges(out, {v})", i)
    elif t in m.structs:
        e(f"{v}.encode(out)", i)
    else:
        fixed = m.fixed_bytes(t)
        if fixed is None:
            raise SystemExit(f"{f.spec_name}: no encoder for {t}")
        e(f"_check_width({v}, {fixed})", i)
        e(f"out += {v}", i)


def emit_decode_field(e: Emitter, m: Model, f: Field, bit: int | None, indent: int) -> None:
    """Decode one field; *bit* is its packing flag, None in a struct without flags."""
    t = f.type
    target = f"self.{f.name}"
    if t == "bit":
        e(f"{target} = (flags & {bit:#x}) != 0", indent)
        return
    if bit is None:
        i = indent
    else:
        e(f"if flags & {bit:#x}:", indent)
        i = indent + 1
    if t == "uint8":
        e(f"{target} = buf[offset]", i)
        e("offset += 1", i)
    elif t in INT_TYPES or t in FLOAT_TYPES:
        code = INT_TYPES.get(t) or FLOAT_TYPES[t]
        e(f"({target},) = {e.struct(code)}.unpack_from(buf, offset)", i)
        e(f"offset += {struct.calcsize('>' + code)}", i)
    elif t == "boolean":
        e(f"{target} = buf[offset] != 0", i)
        e("offset += 1", i)
    elif t == "uuid":
        e(f"{target} = uuid_from_bytes(bytes(buf[offset : offset + 16]))", i)
        e("offset += 16", i)
    elif t in STR_TYPES or t in VBIN_TYPES:
        width = STR_TYPES[t][0] if t in STR_TYPES else VBIN_TYPES[t]
        if width == 1:
            e("n = buf[offset] + 1", i)
        else:
            code = SIZE_CODES[width]
            e(f"n = {e.struct(code)}.unpack_from(buf, offset)[0] + {width}", i)
        if t in STR_TYPES:
            codec = STR_TYPES[t][1]
            arg = "" if codec == "utf-8" else f'"{codec}"'
            e(f"{target} = buf[offset + {width} : offset + n].decode({arg})", i)
        else:
            e(f"{target} = bytes(buf[offset + {width} : offset + n])", i)
        e("offset += n", i)
    elif t == "map":
        e(f"{target}, offset = decode_map(buf, offset, 0)", i)
    elif t == "list":
        e(f"{target}, offset = decode_list(buf, offset, 0)", i)
    elif t == "array":
        e(f"{target}, offset = decode_array(buf, offset, 0)", i)
    elif t == "struct32":
        e(f"{target}, offset = decode_struct32(buf, offset, 0)", i)
    elif t == "sequence-set":
        e(f"{target}, offset = decode_sequence_set(buf, offset)", i)
    elif t == "byte-ranges":
        e(f"{target}, offset = decode_byte_ranges(buf, offset)", i)
    elif t in m.structs:
        e(f"{target}, offset = {m.structs[t].py_name}.decode(buf, offset)", i)
    else:
        fixed = m.fixed_bytes(t)
        if fixed is None:
            raise SystemExit(f"{f.spec_name}: no decoder for {t}")
        e(f"{target} = bytes(buf[offset : offset + {fixed}])", i)
        e(f"offset += {fixed}", i)
    if bit is not None:
        e("else:", indent)
        e(f"{target} = None", indent + 1)


def field_doc(m: Model, f: Field) -> str:
    parts = []
    if f.label:
        parts.append(f.label[:1].upper() + f.label[1:].rstrip(".") + ".")
    if f.enum:
        parts.append(f"One of :class:`{f.enum}`.")
    if f.required:
        parts.append("Required by the spec.")
    return " ".join(parts)


def emit_compound_body(
    e: Emitter, m: Model, name: str, fields: Sequence[Field], pack: int, key: str
) -> None:
    """FIELDS, the attributes, encode_fields and decode_fields of a struct, control or command."""
    specs = ", ".join(f"({f.name!r}, {f.type!r})" for f in fields)
    e(f"FIELDS: ClassVar[tuple[FieldSpec, ...]] = ({specs}{',' if len(fields) == 1 else ''})", 1)
    for f in fields:
        e()
        doc = field_doc(m, f)
        if doc:
            for line in wrap(doc, 1, 94):
                e(f"#: {line}", 1)
        ann = m.annotation(f)
        if pack == 0:  # no packing flags: every field is always there
            e(f"{f.name}: {ann}", 1)
        elif f.type == "bit":
            e(f"{f.name}: bool = {bool(f.default)!r}", 1)
        elif f.secret:
            e(f"{f.name}: {ann} | None = attrs.field(default=None, repr=_redacted)", 1)
        else:
            e(f"{f.name}: {ann} | None = None", 1)
    if pack and len(fields) > pack * 8:
        raise SystemExit(f"{key}: {len(fields)} fields need more than {pack} flag octets")
    e()
    e("def encode_fields(self, out: bytearray) -> None:", 1)
    if pack == 0:
        for f in fields:
            emit_encode_field(e, m, f, None, 2)
        if not fields:
            e("return", 2)
    elif not fields:
        e(f"out += {bytes(pack)!r}", 2)
    else:
        e("start = len(out)", 2)
        e(f"out += {bytes(pack)!r}", 2)
        e("flags = 0", 2)
        for index, f in enumerate(fields):
            emit_encode_field(e, m, f, 1 << index, 2)
        if pack == 1:
            e("out[start] = flags", 2)
        else:
            e(f"{e.struct(FLAG_CODES[pack])}.pack_into(out, start, flags)", 2)
    e()
    e("@classmethod", 1)
    e(f"def decode_fields(cls, buf: ByteString, offset: int) -> tuple[{name}, int]:", 1)
    e("self = _new(cls)", 2)
    if pack == 0:
        for f in fields:
            emit_decode_field(e, m, f, None, 2)
        e("return self, offset", 2)
        return
    if pack == 1:
        e("flags = buf[offset]", 2)
    elif pack == 2:
        e("flags = buf[offset] | buf[offset + 1] << 8", 2)
    else:
        e(f"(flags,) = {e.struct(FLAG_CODES[pack])}.unpack_from(buf, offset)", 2)
    e(f"offset += {pack}", 2)
    unknown = ((1 << (8 * pack)) - 1) & ~((1 << len(fields)) - 1)
    if unknown:
        e(f"if flags & {unknown:#x}:", 2)
        e(f'raise _unknown_flags("{key}", flags)', 3)
    for index, f in enumerate(fields):
        emit_decode_field(e, m, f, 1 << index, 2)
    e("return self, offset", 2)


def class_header(e: Emitter, base: str, name: str, doc: str) -> None:
    e()
    e()
    e("@final")
    e("@attrs.define(slots=True, kw_only=True, weakref_slot=False)")
    e(f"class {name}({base}):")
    emit_docstring(e, doc or f"``{name}``.", 1)
    e()


def emit_struct(e: Emitter, m: Model, s: StructDef) -> None:
    doc = s.doc
    kind = "Coded struct" if s.code is not None else "Struct"
    doc += f"\n\n{kind} ``{s.spec_name}``" + (
        f", code ``{s.code:#06x}``." if s.code is not None else "."
    )
    class_header(e, "Struct", s.py_name, doc)
    e(f'NAME = "{s.spec_name}"', 1)
    e(f"SIZE = {s.size}", 1)
    code_value = f"{s.code:#06x}" if s.code is not None else "None"
    e(f"CODE: ClassVar[int | None] = {code_value}", 1)
    e(f"PACK = {s.pack}", 1)
    emit_compound_body(e, m, s.py_name, s.fields, s.pack, s.spec_name)
    code_octets = b"" if s.code is None else s.code.to_bytes(2, "big")
    e()
    e("def encode(self, out: bytearray) -> None:", 1)
    if s.size:
        e("start = len(out)", 2)
        e(f"out += {bytes(s.size) + code_octets!r}", 2)
        e("self.encode_fields(out)", 2)
        size_code = SIZE_CODES[s.size]
        if s.size == 1:
            e(f"out[start] = len(out) - start - {s.size}  # ValueError past 255 octets", 2)
        else:
            e(f"{e.struct(size_code)}.pack_into(out, start, len(out) - start - {s.size})", 2)
    else:
        if code_octets:
            e(f"out += {code_octets!r}", 2)
        e("self.encode_fields(out)", 2)
    e()
    e("@classmethod", 1)
    e(f"def decode(cls, buf: ByteString, offset: int) -> tuple[{s.py_name}, int]:", 1)
    if s.size:
        if s.size == 1:
            e("end = offset + 1 + buf[offset]", 2)
        else:
            code = SIZE_CODES[s.size]
            e(f"end = offset + {s.size} + {e.struct(code)}.unpack_from(buf, offset)[0]", 2)
        e(f"offset += {s.size}", 2)
    if s.code is not None:
        e("(code,) = _S_H.unpack_from(buf, offset)", 2)
        e(f"if code != {s.code:#06x}:", 2)
        expected = f"expected {s.code:#06x}"
        e(f'raise ValueError(f"{s.spec_name}: struct code {{code:#06x}}, {expected}")', 3)
        e("offset += 2", 2)
    e("self, offset = cls.decode_fields(buf, offset)", 2)
    if s.size:
        e("if offset != end:", 2)
        e(f'raise _size_mismatch("{s.spec_name}", end, offset)', 3)
    e("return self, offset", 2)


def roles(sent_by: Sequence[str]) -> str:
    return "_BY_" + "_".join(r.upper() for r in sent_by)


def emit_op(e: Emitter, m: Model, op: OpDef) -> None:
    base = "Control" if op.kind == "control" else "Command"
    codes = f"{op.class_code:#04x}/{op.code:#04x}"
    doc = op.doc + f"\n\n{op.kind.capitalize()} ``{op.spec_name}``, code ``{codes}``"
    doc += ", sent by " + " and ".join(f"the {r}" for r in op.sent_by) + "."
    if op.result:
        doc += f" Its ``execution.result`` carries :class:`{m.structs[op.result].py_name}`."
    class_header(e, base, op.py_name, doc)
    e(f'NAME = "{op.spec_name}"', 1)
    e(f"CLASS_CODE = {op.class_code}", 1)
    e(f"CODE = {op.code}", 1)
    e(f"INDEX = {op.class_code << 8 | op.code:#06x}", 1)
    e(f"SENT_BY = {roles(op.sent_by)}", 1)
    e("PACK = 2", 1)
    if op.kind == "command":
        result = m.structs[op.result].py_name if op.result else "None"
        e(f"RESULT: ClassVar[type[Struct] | None] = {result}", 1)
        e(f"SEGMENTS = {op.segments}", 1)
        entries = ", ".join(m.structs[h].py_name for h in op.header_entries)
        comma = "," if len(op.header_entries) == 1 else ""
        e(f"HEADER_ENTRIES: ClassVar[tuple[type[Struct], ...]] = ({entries}{comma})", 1)
    else:
        e("RESPONSES: ClassVar[tuple[type[Control], ...]] = ()", 1)
    emit_compound_body(e, m, op.py_name, op.fields, 2, op.spec_name)
    ids = bytes((op.class_code, op.code))
    e()
    if op.kind == "control":
        e("def encode(self, out: bytearray) -> None:", 1)
        e(f"out += {ids!r}", 2)
    else:
        # session.header: size 1, one flag octet whose bit 0 is sync
        synced, unsynced = ids + b"\x01\x01", ids + b"\x01\x00"
        e("def encode(self, out: bytearray, sync: bool = False) -> None:", 1)
        e(f"out += {synced!r} if sync else {unsynced!r}", 2)
    e("self.encode_fields(out)", 2)


# The value codec around the generated per-code functions: fixed text.
VALUE_CODEC: Final = '''

def _unknown_flags(what: str, flags: int) -> ValueError:
    return ValueError(f"{what}: packing flags {flags:#x} name fields the spec does not define")


def _size_mismatch(what: str, end: int, offset: int) -> ValueError:
    return ValueError(f"{what}: its size says it ends at octet {end}, its fields end at {offset}")


def _check_width(value: bytes, width: int) -> None:
    if len(value) != width:
        raise ValueError(f"a {width}-octet value, not {len(value)} octets")


def _too_deep(depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"maps, lists and arrays nest deeper than {MAX_DEPTH}")


def _count(count: int, room: int, width: int) -> None:
    if count > MAX_ENTRIES or count * width > room:
        raise ValueError(f"{count} entries can't fit {room} octets (at most {MAX_ENTRIES})")


def decode_value(buf: ByteString, offset: int, code: int, depth: int) -> tuple[Value, int]:
    """The value of type *code* at *offset* as a plain Python value, and the offset after it."""
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise ValueError(f"type code {code:#04x} is reserved: its width is unknown")
    return decoder(buf, offset, depth)


def encode_value(out: bytearray, value: Value, depth: int) -> int:
    """Append *value* (a :class:`Typed` or a plain value typed by ``code_of``) without its
    code; return the code."""
    code = code_of(value)
    encoder = _ENCODERS.get(code)
    if encoder is None:
        raise ValueError(f"type code {code:#04x} is reserved: its width is unknown")
    encoder(out, value.value if type(value) is Typed else value, depth)
    return code


def decode_map(buf: ByteString, offset: int, depth: int) -> tuple[Map, int]:
    """A ``map`` (u32 size, u32 count, entries of str8 key, type code, value): every value a
    :class:`Typed`. A map of size 0 (no count) reads as empty."""
    if depth > MAX_DEPTH:
        raise ValueError(f"maps, lists and arrays nest deeper than {MAX_DEPTH}")
    (size,) = _S_I.unpack_from(buf, offset)
    offset += 4
    end = offset + size
    if end > len(buf):
        raise ValueError(f"a map of {size} octets runs past the end")
    result: Map = {}
    if not size:
        return result, end
    (count,) = _S_I.unpack_from(buf, offset)
    offset += 4
    _count(count, end - offset, 2)
    decoders = _DECODERS
    for _ in range(count):
        n = buf[offset] + 1
        key = buf[offset + 1 : offset + n].decode()
        offset += n
        code = buf[offset]
        # qpid-python's str, int and bool inline; every other code through its decoder.
        value: Value
        if code == 0x95:
            n = offset + 3 + (buf[offset + 1] << 8 | buf[offset + 2])
            value = buf[offset + 3 : n].decode()
            offset = n
        elif code == 0x31:
            value = _S_q.unpack_from(buf, offset + 1)[0]
            offset += 9
        elif code == 0x08:
            value = buf[offset + 1] != 0
            offset += 2
        else:
            decoder = decoders.get(code)
            if decoder is None:
                raise ValueError(f"type code {code:#04x} is reserved: its width is unknown")
            value, offset = decoder(buf, offset + 1, depth + 1)
        if offset > end:
            raise ValueError("a map entry runs past the end of the map")
        result[key] = _tuple_new(Typed, (code, value))
    if offset != end:
        raise _size_mismatch("map", end, offset)
    return result, end


def encode_map(out: bytearray, value: Map, depth: int) -> None:
    """Append a ``map``; values are typed by ``code_of``."""
    _too_deep(depth)
    start = len(out)
    out += _S_II.pack(0, len(value))
    for key, item in value.items():
        b = key.encode()
        out.append(len(b))  # ValueError past 255 octets
        out += b
        # str, int and bool inline (code_of's str16, int64 and boolean); the rest by code_of.
        if type(item) is str:
            b = item.encode()
            out.append(0x95)
            out += _S_H.pack(len(b))
            out += b
        elif type(item) is int:
            out.append(0x31)
            out += _S_q.pack(item)
        elif type(item) is bool:
            out.append(0x08)
            out.append(1 if item else 0)
        else:
            at = len(out)
            out.append(0)
            out[at] = encode_value(out, item, depth + 1)
    _S_I.pack_into(out, start, len(out) - start - 4)


def decode_list(buf: ByteString, offset: int, depth: int) -> tuple[list[Value], int]:
    """A ``list`` (u32 size, u32 count, items of type code and value): every item a
    :class:`Typed`. A list of size 0 reads as empty."""
    _too_deep(depth)
    (size,) = _S_I.unpack_from(buf, offset)
    offset += 4
    end = offset + size
    if end > len(buf):
        raise ValueError(f"a list of {size} octets runs past the end")
    result: list[Value] = []
    if not size:
        return result, end
    (count,) = _S_I.unpack_from(buf, offset)
    offset += 4
    _count(count, end - offset, 1)
    for _ in range(count):
        code = buf[offset]
        value, offset = decode_value(buf, offset + 1, code, depth + 1)
        if offset > end:
            raise ValueError("a list item runs past the end of the list")
        result.append(_tuple_new(Typed, (code, value)))
    if offset != end:
        raise _size_mismatch("list", end, offset)
    return result, end


def encode_list(out: bytearray, value: list[Value] | tuple[Value, ...], depth: int) -> None:
    """Append a ``list``; items are typed by ``code_of``."""
    _too_deep(depth)
    start = len(out)
    out += _S_II.pack(0, len(value))
    for item in value:
        at = len(out)
        out.append(0)
        out[at] = encode_value(out, item, depth + 1)
    _S_I.pack_into(out, start, len(out) - start - 4)


def decode_array(buf: ByteString, offset: int, depth: int) -> tuple[Array, int]:
    """An ``array`` (u32 size, element type code, u32 count, values). An array of size 0 reads
    as an empty array of ``void``."""
    _too_deep(depth)
    (size,) = _S_I.unpack_from(buf, offset)
    offset += 4
    end = offset + size
    if end > len(buf):
        raise ValueError(f"an array of {size} octets runs past the end")
    if not size:
        return Array(TypeCode.VOID, ()), end
    code = buf[offset]
    (count,) = _S_I.unpack_from(buf, offset + 1)
    offset += 5
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise ValueError(f"type code {code:#04x} is reserved: its width is unknown")
    _count(count, end - offset, _MIN_WIDTHS[code])
    values: list[Value] = []
    for _ in range(count):
        value, offset = decoder(buf, offset, depth + 1)
        if offset > end:
            raise ValueError("an array element runs past the end of the array")
        values.append(value)
    if offset != end:
        raise _size_mismatch("array", end, offset)
    return Array(code, tuple(values)), end


def encode_array(out: bytearray, value: Array, depth: int) -> None:
    """Append an ``array`` of ``value.code`` elements."""
    _too_deep(depth)
    encoder = _ENCODERS.get(value.code)
    if encoder is None:
        raise ValueError(f"type code {value.code:#04x} is reserved: its width is unknown")
    start = len(out)
    out += _S_IBI.pack(0, value.code, len(value.values))
    for item in value.values:
        encoder(out, item, depth + 1)
    _S_I.pack_into(out, start, len(out) - start - 4)


def decode_struct32(buf: ByteString, offset: int, depth: int) -> tuple[Struct, int]:
    """A coded struct with a 4-octet size (a ``struct32`` value, a header segment entry); one
    whose code is unknown comes back as :class:`UnknownStruct`."""
    _too_deep(depth)
    (size,) = _S_I.unpack_from(buf, offset)
    end = offset + 4 + size
    if size < 2 or end > len(buf):
        raise ValueError(f"a struct32 of {size} octets is malformed or runs past the end")
    (code,) = _S_H.unpack_from(buf, offset + 4)
    cls = STRUCTS.get(code)
    if cls is None or cls.SIZE != 4:
        return UnknownStruct(code, bytes(buf[offset + 6 : end])), end
    value, offset = cls.decode_fields(buf, offset + 6)
    if offset != end:
        raise _size_mismatch(cls.NAME, end, offset)
    return value, end


def encode_struct32(out: bytearray, value: Struct, depth: int) -> None:
    """Append a coded struct with its 4-octet size (``struct32``)."""
    _too_deep(depth)
    if value.SIZE != 4 or (value.CODE is None and type(value) is not UnknownStruct):
        raise ValueError(f"{value.NAME} is not a coded struct of size 4: not a struct32")
    value.encode(out)


def decode_sequence_set(buf: ByteString, offset: int) -> tuple[SequenceSet, int]:
    """A ``sequence-set``: u16 octet count, then (low, high) pairs of u32 ids."""
    (size,) = _S_H.unpack_from(buf, offset)
    offset += 2
    end = offset + size
    if size % 8 or end > len(buf):
        raise ValueError(f"a sequence-set of {size} octets is malformed or runs past the end")
    return SequenceSet([_S_II.unpack_from(buf, at) for at in range(offset, end, 8)]), end


def encode_sequence_set(out: bytearray, value: SequenceSet) -> None:
    ranges = value.ranges
    if len(ranges) > MAX_SEQUENCE_SET_RANGES:
        raise ValueError(
            f"a sequence-set of {len(ranges)} ranges can't be encoded: its uint16 octet count "
            f"holds at most {MAX_SEQUENCE_SET_RANGES} ranges"
        )
    out += _S_H.pack(8 * len(ranges))
    for low, high in ranges:
        out += _S_II.pack(low, high)


def decode_byte_ranges(buf: ByteString, offset: int) -> tuple[ByteRanges, int]:
    """``byte-ranges``: u16 octet count, then (low, high) pairs of u64 offsets."""
    (size,) = _S_H.unpack_from(buf, offset)
    offset += 2
    end = offset + size
    if size % 16 or end > len(buf):
        raise ValueError(f"byte-ranges of {size} octets are malformed or run past the end")
    return ByteRanges(tuple(_S_QQ.unpack_from(buf, at) for at in range(offset, end, 16))), end


def encode_byte_ranges(out: bytearray, value: ByteRanges) -> None:
    out += _S_H.pack(16 * len(value.ranges))
    for low, high in value.ranges:
        out += _S_QQ.pack(low, high)


def _int(value: Value) -> int:
    if isinstance(value, int):
        return value
    raise ValueError(f"an int, not {type(value).__name__}")


def _float(value: Value) -> float:
    if isinstance(value, int | float):
        return value
    raise ValueError(f"a float, not {type(value).__name__}")


def _bytes(value: Value) -> bytes:
    if isinstance(value, bytes):
        return value
    raise ValueError(f"bytes, not {type(value).__name__}")


def _str(value: Value) -> str:
    if isinstance(value, str):
        return value
    raise ValueError(f"a str, not {type(value).__name__}")
'''


def size_read(e: Emitter, width: int) -> str:
    """An expression reading a *width*-octet size at ``offset``."""
    if width == 1:
        return "buf[offset]"
    return f"{e.struct(SIZE_CODES[width])}.unpack_from(buf, offset)[0]"


def size_write(e: Emitter, width: int) -> list[str]:
    """Lines appending ``len(b)`` as a *width*-octet size."""
    if width == 1:
        return ["out.append(len(b))  # ValueError past 255 octets"]
    return [f"out += {e.struct(SIZE_CODES[width])}.pack(len(b))"]


def emit_value_codec(e: Emitter, m: Model) -> None:
    """Decoders and encoders of values by type code, for maps, lists and arrays."""
    spec = m.spec
    named = {t.code: t for t in spec.types if t.code is not None}
    # The width class of every high nibble, from the named types in it.
    classes: dict[int, tuple[str, int]] = {}
    for td in named.values():
        assert td.code is not None
        octets = td.fixed if td.fixed is not None else td.variable
        assert octets is not None
        width_class = ("fixed" if td.fixed is not None else "variable", octets)
        known = classes.setdefault(td.code >> 4, width_class)
        if known != width_class:
            raise SystemExit(f"type {td.name}: its width differs from its nibble's {known}")
    e.lines += VALUE_CODEC.splitlines()

    def fn(kind: str, name: str) -> str:
        return f"_{kind}_{name.replace('-', '_')}"

    decoders: dict[int, str] = {}
    encoders: dict[int, str] = {}
    min_widths: dict[int, int] = {}
    emitted: set[str] = set()

    def define(name: str, decode: list[str], encode: list[str]) -> None:
        if name in emitted:
            return
        emitted.add(name)
        e()
        e()
        e(f"def {fn('d', name)}(buf: ByteString, offset: int, depth: int) -> tuple[Value, int]:")
        for line in decode:
            e(line, 1)
        e()
        e()
        e(f"def {fn('e', name)}(out: bytearray, value: Value, depth: int) -> None:")
        for line in encode:
            e(line, 1)

    for code in range(256):
        nibble = classes.get(code >> 4)
        if nibble is None:
            continue
        kind, width = nibble
        min_widths[code] = width
        named_type = named.get(code)
        name = named_type.name if named_type is not None else ""
        if name in INT_TYPES:
            s = e.struct(INT_TYPES[name])
            enc = [f"out += {s}.pack(_int(value))"]
            if name == "datetime":
                enc = [
                    "if isinstance(value, datetime):",
                    f"    out += {s}.pack(datetime_seconds(value))",
                    "else:",
                    f"    out += {s}.pack(_int(value))",
                ]
            if name == "uint8":
                define(name, ["return buf[offset], offset + 1"], ["out.append(_int(value))"])
            else:
                define(name, [f"return {s}.unpack_from(buf, offset)[0], offset + {width}"], enc)
        elif name in FLOAT_TYPES:
            s = e.struct(FLOAT_TYPES[name])
            define(
                name,
                [f"return {s}.unpack_from(buf, offset)[0], offset + {width}"],
                [f"out += {s}.pack(_float(value))"],
            )
        elif name == "boolean":
            define(
                name,
                ["return buf[offset] != 0, offset + 1"],
                [
                    "if not isinstance(value, bool):",
                    '    raise ValueError(f"a bool, not {type(value).__name__}")',
                    "out.append(1 if value else 0)",
                ],
            )
        elif name == "uuid":
            define(
                name,
                ["return uuid_from_bytes(bytes(buf[offset : offset + 16])), offset + 16"],
                [
                    "if not isinstance(value, UUID):",
                    '    raise ValueError(f"a UUID, not {type(value).__name__}")',
                    "out += value.bytes",
                ],
            )
        elif name == "void":
            define(
                name,
                ["return None, offset"],
                ["if value is not None:", '    raise ValueError("void holds only None")'],
            )
        elif name == "bit":
            define(
                name,
                ["return True, offset"],
                ["if value is not True:", '    raise ValueError("bit holds only True")'],
            )
        elif name in STR_TYPES:
            w, codec = STR_TYPES[name]
            arg = "" if codec == "utf-8" else f'"{codec}"'
            size = size_read(e, w)
            define(
                name,
                [
                    f"end = offset + {w} + {size}",
                    f"return buf[offset + {w} : end].decode({arg}), end",
                ],
                [f"b = _str(value).encode({arg})", *size_write(e, w), "out += b"],
            )
        elif name in ("map", "list", "array", "struct32"):
            decode, encode, check = {
                "map": ("decode_map", "encode_map(out, value, depth)", "dict"),
                "list": ("decode_list", "encode_list(out, value, depth)", "list | tuple"),
                "array": ("decode_array", "encode_array(out, value, depth)", "Array"),
                "struct32": ("decode_struct32", "encode_struct32(out, value, depth)", "Struct"),
            }[name]
            define(
                name,
                [f"return {decode}(buf, offset, depth)"],
                [
                    f"if not isinstance(value, {check}):",
                    f'    raise ValueError(f"a {name}, not {{type(value).__name__}}")',
                    encode,
                ],
            )
        elif kind == "variable":  # vbin* and the unnamed variable-width codes: bytes
            name = f"vbin{width * 8}"
            define(
                name,
                [
                    f"end = offset + {width} + {size_read(e, width)}",
                    "if end > len(buf):",
                    '    raise ValueError("a value runs past the end")',
                    f"return bytes(buf[offset + {width} : end]), end",
                ],
                ["b = _bytes(value)", *size_write(e, width), "out += b"],
            )
        else:  # bin*, char, char-utf32, dec*, and the unnamed fixed-width codes: bytes
            name = f"fixed{width}"
            define(
                name,
                [
                    f"end = offset + {width}",
                    "if end > len(buf):",
                    f'    raise ValueError("a {width}-octet value runs past the end")',
                    "return bytes(buf[offset:end]), end",
                ],
                ["b = _bytes(value)", f"_check_width(b, {width})", "out += b"],
            )
        decoders[code] = fn("d", name)
        encoders[code] = fn("e", name)

    e()
    e()
    e("_Decoder: TypeAlias = Callable[[ByteString, int, int], tuple[Value, int]]")
    e("_Encoder: TypeAlias = Callable[[bytearray, Value, int], None]")
    e("#: Value decoders by type code; the reserved codes 0xb0-0xbf and 0xe0-0xef have none.")
    e("_DECODERS: Final[dict[int, _Decoder]] = {")
    for code, name in decoders.items():
        e(f"{code:#04x}: {name},", 1)
    e("}")
    e("_ENCODERS: Final[dict[int, _Encoder]] = {")
    for code, name in encoders.items():
        e(f"{code:#04x}: {name},", 1)
    e("}")
    e("#: The fewest octets a value of each code takes: bounds an array's count by its size.")
    e("_MIN_WIDTHS: Final[dict[int, int]] = {")
    for code, width in min_widths.items():
        e(f"{code:#04x}: {width},", 1)
    e("}")


def generate(formatter: Callable[[str, Path], str]) -> str:
    spec = load_spec()
    m = Model(spec)
    body = Emitter()
    # The codec's own structs, first so their names are stable.
    for code in ("I", "H", "II", "IBI", "QQ", "q"):
        body.struct(code)
    emit_value_codec(body, m)
    for s in spec.structs:
        emit_struct(body, m, s)
    for op in spec.ops:
        emit_op(body, m, op)

    e = Emitter()
    e("# ******* WARNING: AUTOGENERATED! ALL EDITS WILL BE LOST ******")
    e("# Generated by tools/gen_spec.py (tools/_gen_0_10.py) from:")
    for src in (STRUCTURE, DOCUMENTATION):
        digest = hashlib.sha256((SPEC_DIR / src).read_bytes()).hexdigest()
        e(f"#   spec/{src} (sha256 {digest[:16]})")
    e("# Regenerate with `python tools/gen_spec.py`; `--check` fails when this file is stale.")
    e('"""AMQP 0-10 (Qpid errata): the type table, enums, structs, controls and commands."""')
    e()
    e("from __future__ import annotations")
    e()
    e("import enum")
    e("import struct")
    e("from collections.abc import Callable")
    e("from datetime import datetime")
    e("from typing import ClassVar, Final, TypeAlias, final")
    e("from uuid import UUID")
    e()
    e("import attrs")
    e()
    e("from ..._method import Role")
    e("from .._types import (")
    for name in (
        "Array",
        "ByteRanges",
        "ByteString",
        "Command",
        "Control",
        "MAX_SEQUENCE_SET_RANGES",
        "FieldSpec",
        "Map",
        "SequenceSet",
        "Struct",
        "Typed",
        "UnknownStruct",
        "Value",
        "code_of",
        "datetime_seconds",
        "uuid_from_bytes",
    ):
        e(f"{name},", 1)
    e(")")
    e()
    names: list[str] = []
    e("PROTOCOL_VERSION: Final = (0, 10)")
    e(f"DEFAULT_PORT: Final = {spec.port}")
    names += ["PROTOCOL_VERSION", "DEFAULT_PORT"]
    for cname, value in spec.constants:
        e(f"{cname}: Final = {value}")
        names.append(cname)
    e("#: How deep maps, lists, arrays and struct32 values may nest; the outermost is depth 0.")
    e("MAX_DEPTH: Final = 32")
    e("#: How many entries one map, list or array may hold.")
    e("MAX_ENTRIES: Final = 65536")
    names += ["MAX_DEPTH", "MAX_ENTRIES"]
    e()
    e()
    e("class TypeCode(enum.IntEnum):")
    emit_docstring(e, "The type codes of the spec's type table (``<type code=...>``).", 1)
    e()
    for t in spec.types:
        if t.code is not None:
            e(f"{py_ident(t.name).upper()} = {t.code:#04x}", 1)
    names.append("TypeCode")
    e()
    e()
    e("#: Octets of each fixed-width type, by type name (``bit`` and ``void``: 0).")
    e("FIXED_WIDTHS: Final[dict[str, int]] = {")
    for t in spec.types:
        if t.fixed is not None:
            e(f'"{t.name}": {t.fixed},', 1)
    e("}")
    e("#: Octets of the size prefix of each variable-width type, by type name.")
    e("VARIABLE_WIDTHS: Final[dict[str, int]] = {")
    for t in spec.types:
        if t.variable is not None:
            e(f'"{t.name}": {t.variable},', 1)
    e("}")
    names += ["FIXED_WIDTHS", "VARIABLE_WIDTHS"]
    for enum in spec.enums:
        e()
        e()
        e(f"class {enum.py_name}(enum.IntEnum):")
        doc = enum.doc + f"\n\nThe ``{enum.spec_name}`` domain ({enum.type})."
        emit_docstring(e, doc, 1)
        e()
        for cname, value, label in enum.choices:
            if label:
                for line in wrap(label[:1].upper() + label[1:], 1, 94):
                    e(f"#: {line}", 1)
            e(f"{cname} = {value}", 1)
        names.append(enum.py_name)
    e()
    e("_BY_CLIENT: Final = frozenset((Role.CLIENT,))")
    e("_BY_SERVER: Final = frozenset((Role.SERVER,))")
    e("_BY_CLIENT_SERVER: Final = frozenset((Role.CLIENT, Role.SERVER))")
    e("# Decoders build instances without __init__ and store each field once.")
    e("_new: Final = object.__new__")
    e("_tuple_new: Final = tuple.__new__")
    for code, sname in body.structs.items():
        e(f"{sname}: Final = struct.Struct('{code if code.startswith('<') else '>' + code}')")
    e()
    e()
    e("def _redacted(value: object) -> str:")
    e('return "<redacted>"', 1)
    e.lines += body.lines
    # The value codec (decode_map, encode_value, ...) is public through v0_10.framing.
    names += [s.py_name for s in spec.structs]
    names += [op.py_name for op in spec.ops]

    controls = [op for op in spec.ops if op.kind == "control"]
    commands = [op for op in spec.ops if op.kind == "command"]
    by_name = {op.spec_name: op for op in controls}
    e()
    e()
    e("# The controls that answer each control, set here because they are defined after it.")
    for op in controls:
        if op.responses:
            replies = ", ".join(by_name[f"{op.class_name}.{r}"].py_name for r in op.responses)
            e(f"{op.py_name}.RESPONSES = ({replies},)")
    e()
    e(f"AnyControl: TypeAlias = {' | '.join(op.py_name for op in controls)}")
    e(f"AnyCommand: TypeAlias = {' | '.join(op.py_name for op in commands)}")
    e()
    e("#: Coded structs keyed by ``class_code << 8 | struct_code``.")
    e("STRUCTS: Final[dict[int, type[Struct]]] = {")
    for s in spec.structs:
        if s.code is not None:
            e(f"{s.code:#06x}: {s.py_name},", 1)
    e("}")
    e("#: Controls keyed by ``class_code << 8 | control_code``.")
    e("CONTROLS: Final[dict[int, type[Control]]] = {")
    for op in controls:
        e(f"{op.class_code << 8 | op.code:#06x}: {op.py_name},", 1)
    e("}")
    e("#: Commands keyed by ``class_code << 8 | command_code``.")
    e("COMMANDS: Final[dict[int, type[Command]]] = {")
    for op in commands:
        e(f"{op.class_code << 8 | op.code:#06x}: {op.py_name},", 1)
    e("}")
    names += ["AnyControl", "AnyCommand", "STRUCTS", "CONTROLS", "COMMANDS"]
    e()
    e("__all__ = [")
    for n in sorted(names):
        e(f"{n!r},", 1)
    e("]")
    return formatter("\n".join(e.lines) + "\n", OUT_PATH)


def outputs(formatter: Callable[[str, Path], str]) -> list[tuple[Path, str]]:
    """The files this emitter writes, with their contents (``gen_spec.main`` writes or checks
    them); *formatter* is ``gen_spec.format_source``."""
    return [(OUT_PATH, generate(formatter))]
