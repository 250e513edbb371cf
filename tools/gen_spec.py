#!/usr/bin/env python3
"""Generate the method tables of ``amqp_sansio`` from the spec files in ``spec/``.

One run writes one module per target in ``TARGETS`` (``src/amqp_sansio/_generated/``). A target
names a structure file (XML: methods, ``<chassis>`` directions, ``<response>`` pairs), an
optional RabbitMQ JSON (default values, the names RabbitMQ gives reserved fields, classes and
methods the XML lacks such as ``access``, and the ids RabbitMQ gives methods where its reading
of the version differs) and an optional documentation XML (labels and first paragraphs for the
docstrings).

Names follow one convention in every version: 0-8 spells them with spaces (``routing key``,
``soft error``), which the loader turns into hyphens (``routing-key``) and Python underscores.

A target with a ``base`` (0-8 and 0-9 over 0-9-1) reuses the base's class for every method that
means the same (its spec name) and is identical on the wire and in Python: field names, types and
defaults, synchronous, content, replies and senders, the replies being shared too. Fields the
base also has take the base's defaults, so one meaning has one Python signature in every version.
The version's ``METHODS`` maps its own wire index to such a class (0-8 sends the shared
``connection.close`` as (10, 60)); everything else gets a class of its own in the version's module.

``python tools/gen_spec.py`` rewrites the modules; ``--check`` exits 1 when one is stale.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import keyword
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

import _gen_0_10

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

ROOT: Final = Path(__file__).resolve().parent.parent
SPEC_DIR: Final = ROOT / "spec"
OUT_DIR: Final = ROOT / "src" / "amqp_sansio" / "_generated"


@attrs.frozen
class Target:
    module: str
    structure: str
    rabbitmq_json: str | None = None
    documentation: str | None = None
    #: The module docstring's name for the version.
    title: str = ""
    #: The module whose classes this one reuses where a method is identical (see above).
    base: str | None = None


TARGETS: Final = (
    Target(
        module="spec_0_9_1",
        structure="amqp0-9-1.stripped.extended.xml",
        rabbitmq_json="amqp-rabbitmq-0.9.1.json",
        documentation="amqp0-9-1.extended.xml",
        title="AMQP 0-9-1 with RabbitMQ's extensions",
    ),
    Target(
        module="spec_0_9",
        structure="amqp0-9.stripped.xml",
        documentation="amqp0-9.xml",
        title="AMQP 0-9",
        base="spec_0_9_1",
    ),
    # RabbitMQ 3.10 is the 0-8 server users meet: its JSON numbers basic.recover 110 (recover-ok
    # 111, the XML's async recover at 100 becoming recover-async) and adds queue.unbind 50/51.
    Target(
        module="spec_0_8",
        structure="amqp0-8.stripped.xml",
        rabbitmq_json="amqp-rabbitmq-0.8.json",
        documentation="amqp0-8.xml",
        title="AMQP 0-8 as RabbitMQ reads it",
        base="spec_0_9_1",
    ),
)

# The JSON carries no <chassis> or <response>: directions, replies and whether a reply is
# synchronous, for the methods only the JSON has. The XMLs that know these methods mark their
# replies synchronous (0-8/0-9 access.request-ok, 0-9/0-9-1 queue.unbind-ok, 0-9-1
# basic.recover-ok); RabbitMQ's JSON marks no reply synchronous.
JSON_ONLY_METHODS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...], bool]]] = {
    # "class.method": (roles that receive it, its replies, synchronous)
    # RabbitMQ still accepts access.request in every protocol mode.
    "access.request": (("server",), ("request-ok",), True),
    "access.request-ok": (("client",), (), True),
    # RabbitMQ's 0-8 additions
    "queue.unbind": (("server",), ("unbind-ok",), True),
    "queue.unbind-ok": (("client",), (), True),
    "basic.recover-async": (("server",), (), False),
    "basic.recover-ok": (("client",), (), True),
}

# Domains a structure XML uses without declaring them, and the primitive each stands for.
UNDECLARED_DOMAINS: Final = {
    # 0-9's message class (message.transfer's body) uses a domain "content" that amqp0-9.xml
    # never declares. Qpid, the one implementation of that class, codes it as a flag octet
    # (0: the octets inline, 1: a reference id) followed by a longstr (qpid/codec.py,
    # encode_content); it is the primitive "content" here, MessageContent in Python.
    "content": "content",
}


# Where the structure XML is wrong about the wire, "class.method": corrected attributes. An
# erratum with ``ids`` applies only to a version that numbers the method so.
@attrs.frozen
class Erratum:
    sent_by: tuple[str, ...] | None = None
    synchronous: bool | None = None
    responses: tuple[str, ...] | None = None
    ids: tuple[int, int] | None = None


ERRATA: Final[dict[str, Erratum]] = {
    # RabbitMQ's XML puts <chassis name="client"> on update-secret, but the client sends it
    # (to refresh an OAuth token) and the server answers with update-secret-ok.
    "connection.update-secret": Erratum(sent_by=("client",)),
    "connection.update-secret-ok": Erratum(sent_by=("server",)),
    # 0-9-1 gives basic.recover neither synchronous="1" nor <response>, yet recover-ok answers it
    # (the spec's prose; RabbitMQ sends it). RabbitMQ's 0-8 moves it to the same ids; 0-8's and
    # 0-9's own basic.recover (60, 100) is asynchronous and has no reply.
    "basic.recover": Erratum(synchronous=True, responses=("recover-ok",), ids=(60, 110)),
}


def corrected(m: MethodDef) -> MethodDef:
    fix = ERRATA.get(m.spec_name)
    if fix is None or (fix.ids is not None and fix.ids != (m.class_id, m.method_id)):
        return m
    return attrs.evolve(
        m,
        sent_by=m.sent_by if fix.sent_by is None else fix.sent_by,
        synchronous=m.synchronous if fix.synchronous is None else fix.synchronous,
        responses=m.responses if fix.responses is None else fix.responses,
    )


# Fields whose values are credentials: never shown by repr().
SECRET_FIELDS: Final = frozenset(
    {
        "connection.start-ok.response",
        "connection.secure-ok.response",
        "connection.update-secret.new-secret",
    }
)

PY_TYPES: Final = {
    "bit": "bool",
    "octet": "int",
    "short": "int",
    "long": "int",
    "longlong": "int",
    "timestamp": "int",
    "shortstr": "str",
    "longstr": "bytes",
    "table": "FieldTable",
    "content": "MessageContent",
}
STRUCT_CODES: Final = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}
TYPE_DEFAULTS: Final[dict[str, object]] = {
    "bit": False,
    "octet": 0,
    "short": 0,
    "long": 0,
    "longlong": 0,
    "timestamp": 0,
    "shortstr": "",
    "longstr": b"",
    "table": {},
}


# --- the model -------------------------------------------------------------------------------


@attrs.frozen
class Field:
    name: str  # Python name
    spec_name: str
    type: str  # a primitive: bit octet short long longlong timestamp shortstr longstr table
    default: object  # a Python value, or NO_DEFAULT
    label: str = ""
    secret: bool = False


NO_DEFAULT: Final = object()


@attrs.frozen
class MethodDef:
    class_name: str
    name: str
    class_id: int
    method_id: int
    synchronous: bool
    content: bool
    responses: tuple[str, ...]
    sent_by: tuple[str, ...]  # sorted roles
    fields: tuple[Field, ...]
    doc: str = ""

    @property
    def py_name(self) -> str:
        return camel(self.class_name) + camel(self.name)

    @property
    def spec_name(self) -> str:
        return f"{self.class_name}.{self.name}"


@attrs.frozen
class ClassDef:
    name: str
    index: int
    methods: tuple[MethodDef, ...]
    properties: tuple[Field, ...]


@attrs.frozen
class Constant:
    name: str
    value: int
    error_class: str  # "soft-error", "hard-error" or ""


@attrs.frozen
class SpecDef:
    version: tuple[int, int, int]
    port: int
    constants: tuple[Constant, ...]
    classes: tuple[ClassDef, ...]


# --- loading ---------------------------------------------------------------------------------


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-\s]+", name))


def py_ident(name: str) -> str:
    ident = re.sub(r"[-\s]+", "_", name)
    return ident + "_" if keyword.iskeyword(ident) else ident


def squash(text: str | None) -> str:
    return " ".join((text or "").split())


def norm(name: str | None) -> str:
    """A spec name in the one convention: 0-8's spaces (``routing key``) become hyphens."""
    return "-".join((name or "").split())


def load_docs(path: Path) -> dict[str, str]:
    """Labels and first paragraphs, keyed "class.method" and "class.method.field"."""
    docs: dict[str, str] = {}
    root = ET.parse(path).getroot()
    for cls in root.iter("class"):
        cname = norm(cls.get("name"))
        for meth in cls.iter("method"):
            key = f"{cname}.{norm(meth.get('name'))}"
            first = next((d for d in meth.findall("doc") if d.get("type") is None), None)
            label = squash(meth.get("label") or _inline_label(meth))
            docs[key] = "\n\n".join(
                p
                for p in (
                    label[:1].upper() + label[1:],
                    squash(first.text if first is not None else ""),
                )
                if p
            )
            for field in meth.findall("field"):
                docs[f"{key}.{norm(field.get('name'))}"] = squash(
                    field.get("label") or _inline_label(field)
                )
        for field in cls.findall("field"):
            docs[f"{cname}.{norm(field.get('name'))}"] = squash(
                field.get("label") or _inline_label(field)
            )
    return docs


def _inline_label(elem: ET.Element) -> str:
    # 0-8 and 0-9 put the label in the element's own text rather than a label attribute.
    return (elem.text or "").strip()


@attrs.frozen
class JsonArgument:
    name: str
    type: str | None
    domain: str | None
    default: object  # NO_DEFAULT when the JSON gives none


@attrs.frozen
class JsonMethod:
    name: str
    id: int
    synchronous: bool
    content: bool
    arguments: tuple[JsonArgument, ...]


@attrs.frozen
class JsonClass:
    name: str
    id: int
    methods: tuple[JsonMethod, ...]
    properties: tuple[str, ...]


def load_json(path: Path) -> tuple[dict[str, JsonClass], dict[str, str]]:
    """RabbitMQ's JSON as records: its classes by name, and its domains."""
    raw = json.loads(path.read_text())
    classes = {
        str(c["name"]): JsonClass(
            name=str(c["name"]),
            id=int(c["id"]),
            methods=tuple(
                JsonMethod(
                    name=str(m["name"]),
                    id=int(m["id"]),
                    synchronous=bool(m.get("synchronous")),
                    content=bool(m.get("content")),
                    arguments=tuple(
                        JsonArgument(
                            name=str(a["name"]),
                            type=a.get("type"),
                            domain=a.get("domain"),
                            default=a.get("default-value", NO_DEFAULT),
                        )
                        for a in m["arguments"]
                    ),
                )
                for m in c["methods"]
            ),
            properties=tuple(str(p["name"]) for p in c.get("properties", ())),
        )
        for c in raw["classes"]
    }
    return classes, {str(name): str(kind) for name, kind in raw["domains"]}


@functools.cache
def load_spec(target: Target) -> SpecDef:
    root = ET.parse(SPEC_DIR / target.structure).getroot()
    domains = {norm(d.get("name")): d.get("type", "") for d in root.iter("domain")}
    docs = load_docs(SPEC_DIR / target.documentation) if target.documentation else {}
    json_classes, json_domains = (
        load_json(SPEC_DIR / target.rabbitmq_json) if target.rabbitmq_json else ({}, {})
    )

    def primitive(elem_type: str | None, domain: str | None, table: dict[str, str]) -> str:
        kind = norm(elem_type) or norm(domain)
        if kind not in table and kind in UNDECLARED_DOMAINS:
            return UNDECLARED_DOMAINS[kind]
        kind = table.get(kind, kind)
        while kind in table and table[kind] != kind:  # domains may alias domains
            kind = table[kind]
        if kind not in PY_TYPES:
            raise SystemExit(f"unknown field type {kind!r}")
        return kind

    def json_method(jcls: JsonClass, jm: JsonMethod) -> MethodDef:
        """A method only the JSON has: directions and replies from JSON_ONLY_METHODS."""
        receivers, responses, synchronous = JSON_ONLY_METHODS[f"{jcls.name}.{jm.name}"]
        return MethodDef(
            class_name=jcls.name,
            name=jm.name,
            class_id=jcls.id,
            method_id=jm.id,
            synchronous=synchronous,
            content=jm.content,
            responses=responses,
            sent_by=senders(receivers),
            fields=tuple(
                make_field(
                    jcls.name,
                    jm.name,
                    ja.name,
                    primitive(ja.type, ja.domain, json_domains),
                    ja.default,
                    docs,
                )
                for ja in jm.arguments
            ),
        )

    classes: list[ClassDef] = []
    seen: set[str] = set()
    for cls in root.iter("class"):
        cname = norm(cls.get("name"))
        seen.add(cname)
        jcls = json_classes.get(cname)
        jmethods = {m.name: m for m in jcls.methods} if jcls else {}
        methods = []
        for meth in cls.findall("method"):
            mname = norm(meth.get("name"))
            jm = jmethods.get(mname)
            jargs = jm.arguments if jm is not None else None
            xfields = meth.findall("field")
            if jargs is not None and len(jargs) != len(xfields):
                raise SystemExit(f"{cname}.{mname}: XML and JSON disagree on the argument count")
            fields = []
            for pos, xf in enumerate(xfields):
                kind = primitive(xf.get("type"), xf.get("domain"), domains)
                spec_name = norm(xf.get("name"))
                default: object = NO_DEFAULT
                if jargs is not None:
                    ja = jargs[pos]
                    jkind = primitive(ja.type, ja.domain, json_domains)
                    if jkind != kind:
                        raise SystemExit(
                            f"{cname}.{mname}.{spec_name}: {kind} in XML, {jkind} in JSON"
                        )
                    # The XML says "reserved-1" where RabbitMQ says "ticket", and "no-wait" where it
                    # says "nowait": RabbitMQ's names are the ones users know from pika.
                    if xf.get("reserved") or ja.name == spec_name.replace("-", ""):
                        spec_name = ja.name
                    elif ja.name != spec_name:
                        raise SystemExit(
                            f"{cname}.{mname}: field {spec_name!r} is {ja.name!r} in JSON"
                        )
                    default = ja.default
                if xf.get("reserved") and default is NO_DEFAULT:
                    default = TYPE_DEFAULTS[kind]
                fields.append(make_field(cname, mname, spec_name, kind, default, docs))
            method = MethodDef(
                class_name=cname,
                name=mname,
                class_id=int(cls.get("index", "")),
                method_id=int(meth.get("index", "")),
                synchronous=meth.get("synchronous") == "1",
                content=meth.get("content") == "1",
                responses=tuple(norm(r.get("name")) for r in meth.findall("response")),
                sent_by=senders(norm(c.get("name")) for c in meth.findall("chassis")),
                fields=tuple(fields),
                doc=docs.get(f"{cname}.{mname}", ""),
            )
            ids = (method.class_id, method.method_id)
            if jm is not None and jcls is not None and (jcls.id, jm.id) != ids:
                # RabbitMQ's reading numbers the method differently (0-8 basic.recover): its
                # ids and synchronous flag win; the arguments and the chassis are the XML's.
                method = attrs.evolve(
                    method,
                    class_id=jcls.id,
                    method_id=jm.id,
                    synchronous=jm.synchronous,
                    responses=(),
                )
            methods.append(method)
        # Methods RabbitMQ's reading adds to a class of the XML (0-8 queue.unbind).
        known = {m.name for m in methods}
        if jcls is not None:
            methods += [json_method(jcls, jm) for jm in jcls.methods if jm.name not in known]
        props = tuple(
            make_field(
                cname,
                None,
                norm(f.get("name")),
                primitive(f.get("type"), f.get("domain"), domains),
                None,
                docs,
            )
            for f in cls.findall("field")
        )
        if jcls and jcls.properties:  # RabbitMQ names the 14th basic property cluster-id
            props = tuple(
                attrs.evolve(p, name=py_ident(jp), spec_name=jp)
                for p, jp in zip(props, jcls.properties, strict=True)
            )
        classes.append(ClassDef(cname, int(cls.get("index", "")), tuple(methods), props))

    for cname, jcls in json_classes.items():
        if cname in seen:
            continue
        methods = [json_method(jcls, jm) for jm in jcls.methods]
        classes.append(ClassDef(cname, jcls.id, tuple(methods), ()))

    classes = [attrs.evolve(c, methods=tuple(corrected(m) for m in c.methods)) for c in classes]
    constants = tuple(
        Constant(py_ident(c.get("name", "")).upper(), int(c.get("value", "")), norm(c.get("class")))
        for c in root.iter("constant")
    )
    version = (
        int(root.get("major", "")),
        int(root.get("minor", "")),
        int(root.get("revision", "0")),
    )
    return SpecDef(
        version,
        int(root.get("port", "5672")),
        constants,
        tuple(sorted(classes, key=lambda c: c.index)),
    )


def make_field(
    cname: str, mname: str | None, spec_name: str, kind: str, default: object, docs: dict[str, str]
) -> Field:
    key = f"{cname}.{mname}.{spec_name}" if mname else f"{cname}.{spec_name}"
    if kind == "longstr" and isinstance(default, str):
        default = default.encode()
    return Field(
        name=py_ident(spec_name),
        spec_name=spec_name,
        type=kind,
        default=default,
        label=docs.get(key, ""),
        secret=key in SECRET_FIELDS,
    )


def senders(receivers: Iterable[str]) -> tuple[str, ...]:
    # <chassis name="client"> means the client implements (receives) the method.
    other = {"client": "server", "server": "client"}
    return tuple(sorted({other[r] for r in receivers}))


# --- versions over a base ---------------------------------------------------------------------


@attrs.frozen
class Plan:
    """One version's classes: its own, and those it reuses from its base module."""

    spec: SpecDef
    #: The version's methods in wire order, with the base's defaults where the base has the field.
    methods: tuple[MethodDef, ...]
    #: Spec names of the methods whose class is the base's.
    shared: frozenset[str]
    #: Class names of the property classes that are the base's.
    shared_properties: frozenset[str]


def _signature(m: MethodDef) -> object:
    """What must agree for two versions to share a method's class (not its ids or docs)."""
    return (
        m.spec_name,
        m.synchronous,
        m.content,
        m.responses,
        m.sent_by,
        tuple((f.name, f.type, f.default, f.secret) for f in m.fields),
    )


def _with_base_defaults(m: MethodDef, base: MethodDef | None) -> MethodDef:
    if base is None:
        return m
    theirs = {f.name: f for f in base.fields}
    fields = tuple(
        attrs.evolve(f, default=theirs[f.name].default)
        if f.name in theirs and theirs[f.name].type == f.type
        else f
        for f in m.fields
    )
    return attrs.evolve(m, fields=fields)


def plan(target: Target) -> Plan:
    """Which of *target*'s methods reuse the base's classes (none without a base)."""
    spec = load_spec(target)
    methods = [m for c in spec.classes for m in c.methods]
    if target.base is None:
        return Plan(spec, tuple(methods), frozenset(), frozenset())
    base_spec = load_spec(next(t for t in TARGETS if t.module == target.base))
    base = {m.spec_name: m for c in base_spec.classes for m in c.methods}
    methods = [_with_base_defaults(m, base.get(m.spec_name)) for m in methods]
    same = {
        m.spec_name
        for m in methods
        if m.spec_name in base and _signature(m) == _signature(base[m.spec_name])
    }
    # A shared class answers with its base's replies: share only where those are shared too.
    while True:
        unshared = {
            name
            for name in same
            if any(f"{base[name].class_name}.{r}" not in same for r in base[name].responses)
        }
        if not unshared:
            break
        same -= unshared
    base_props = {c.name: c.properties for c in base_spec.classes if c.properties}
    shared_props = frozenset(
        c.name
        for c in spec.classes
        if c.properties
        and c.name in base_props
        and [(p.name, p.type) for p in c.properties]
        == [(p.name, p.type) for p in base_props[c.name]]
    )
    return Plan(spec, tuple(methods), frozenset(same), shared_props)


# --- emitting --------------------------------------------------------------------------------


@attrs.frozen
class Run:
    """Consecutive fixed-width fields read or written with one precompiled struct."""

    fields: tuple[tuple[Field, ...], ...]  # a bit group is one entry of several bit fields
    code: str


def runs(fields: Sequence[Field]) -> Iterator[Run | Field]:
    """Group fields: fixed-width runs (bits packed low bit first) and variable-width singles."""
    pending: list[tuple[Field, ...]] = []
    codes = ""
    bits: list[Field] = []

    def close_bits() -> None:
        nonlocal codes
        if bits:
            pending.append(tuple(bits))
            codes += "B"
            bits.clear()

    for f in fields:
        if f.type == "bit":
            if len(bits) == 8:
                close_bits()
            bits.append(f)
            continue
        close_bits()
        if f.type in STRUCT_CODES:
            pending.append((f,))
            codes += STRUCT_CODES[f.type]
            continue
        if pending:
            yield Run(tuple(pending), codes)
            pending, codes = [], ""
        yield f
    close_bits()
    if pending:
        yield Run(tuple(pending), codes)


class Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.structs: dict[str, str] = {}
        #: Module-level definitions of the C decoders (see emit_c_decoder), after every class.
        self.builders: list[str] = []

    def struct(self, code: str) -> str:
        return self.structs.setdefault(code, f"_S_{code}")

    def __call__(self, line: str = "", indent: int = 0) -> None:
        self.lines.append("    " * indent + line if line else "")


def literal(field: Field) -> str:
    value = field.default
    if field.type == "table":
        return "attrs.field(factory=dict)"
    if field.type == "bit":
        return repr(bool(value))
    return repr(value)


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


def emit_encode_fields(e: Emitter, fields: Sequence[Field], indent: int) -> None:
    for item in runs(fields):
        if isinstance(item, Run):
            values = []
            for group in item.fields:
                if group[0].type == "bit":
                    values.append(
                        " | ".join(
                            f"({1 << i} if self.{f.name} else 0)" for i, f in enumerate(group)
                        )
                    )
                else:
                    values.append(f"self.{group[0].name}")
            if item.code == "B":  # one octet: append is cheaper than a struct
                e(f"out.append({values[0]})", indent)
            else:
                e(f"out += {e.struct(item.code)}.pack({', '.join(values)})", indent)
        elif item.type == "shortstr":
            e(f"b = self.{item.name}.encode()", indent)
            e("out.append(len(b))  # ValueError past 255 bytes", indent)
            e("out += b", indent)
        elif item.type == "longstr":
            e(f"out += _S_I.pack(len(self.{item.name}))", indent)
            e(f"out += self.{item.name}", indent)
        elif item.type == "table":
            e(f"encode_table(out, self.{item.name})", indent)
        elif item.type == "content":  # see UNDECLARED_DOMAINS
            e(f"content = self.{item.name}", indent)
            e("out.append(1 if content.reference else 0)", indent)
            e("out += _S_I.pack(len(content.data))", indent)
            e("out += content.data", indent)


def emit_decode_field(e: Emitter, item: Run | Field, indent: int) -> None:
    if isinstance(item, Run):
        size = struct.calcsize(">" + item.code)
        targets = [g[0].name if g[0].type != "bit" else "bits" for g in item.fields]
        nbits = sum(1 for g in item.fields if g[0].type == "bit")
        if nbits > 1:  # several bit groups in one run: name them apart
            counter = iter(range(nbits))
            targets = [t if t != "bits" else f"bits{next(counter)}" for t in targets]
        lhs = ", ".join(f"self.{t}" if not t.startswith("bits") else t for t in targets)
        if item.code == "B":
            e(f"{lhs} = buf[offset]", indent)
        else:
            lhs = lhs if len(targets) > 1 else f"({lhs},)"
            e(f"{lhs} = {e.struct(item.code)}.unpack_from(buf, offset)", indent)
        e(f"offset += {size}", indent)
        for target, group in zip(targets, item.fields, strict=True):
            if group[0].type == "bit":
                for i, f in enumerate(group):
                    e(f"self.{f.name} = ({target} & {1 << i}) != 0", indent)
    elif item.type == "shortstr":
        # bytes.decode() beats str(slice, "utf-8") by about 40 ns a string (CPython 3.11); the
        # decoder turned a memoryview into bytes first (see needs_bytes).
        e("n = buf[offset]", indent)
        e(f"self.{item.name} = buf[offset + 1 : offset + 1 + n].decode()", indent)
        e("offset += 1 + n", indent)
    elif item.type == "longstr":
        e("(n,) = _S_I.unpack_from(buf, offset)", indent)
        e(f"self.{item.name} = bytes(buf[offset + 4 : offset + 4 + n])", indent)
        e("offset += 4 + n", indent)
    elif item.type == "table":
        e(f"self.{item.name}, offset = decode_table(buf, offset)", indent)
    elif item.type == "content":  # see UNDECLARED_DOMAINS
        e("flag = buf[offset]", indent)
        e("if flag > 1:", indent)
        e(
            'raise ValueError(f"content flag {flag}: neither 0 (inline) nor 1 (a reference)")',
            indent + 1,
        )
        e("(n,) = _S_I.unpack_from(buf, offset + 1)", indent)
        e(
            f"self.{item.name} = MessageContent("
            "data=bytes(buf[offset + 5 : offset + 5 + n]), reference=flag == 1)",
            indent,
        )
        e("offset += 5 + n", indent)


#: Codes of ``amqp_sansio._speedups.Builder`` by wire type; properties read a table as its raw
#: octets ("R", decoded lazily) and have no bits.
C_FIELD_CODES: Final = {
    "bit": "b",
    "octet": "o",
    "short": "h",
    "long": "l",
    "longlong": "q",
    "timestamp": "q",
    "shortstr": "s",
    "longstr": "S",
    "table": "F",
}
C_PROPERTY_CODES: Final = {**{k: v for k, v in C_FIELD_CODES.items() if k != "bit"}, "table": "R"}


def emit_c_decoder(
    e: Emitter,
    cls_name: str,
    codes: str,
    slots: Sequence[str],
    nones: Sequence[str] = (),
    *,
    properties: bool = False,
) -> None:
    """Have the C decoder (``_method.install_c_decoder``) become the class's ``decode``, once
    every class is defined: it builds the instance with each value stored into its slot, and
    hands what it can't decode exactly (memoryview or bytearray input, truncation, bad UTF-8,
    ...) to the generated Python ``decode``, so errors have one source.

    *slots* are the slots the values of *codes* go to, in wire order; *nones* are set to None.
    """
    names = "".join(f"{slot!r}, " for slot in slots)
    reset = "".join(f"{slot!r}, " for slot in nones)
    e.builders.append(
        f'install_c_decoder({cls_name}, b"{codes}", ({names}), ({reset})'
        + (", properties=True)" if properties else ")")
    )


def needs_bytes(fields: Sequence[Field]) -> bool:
    """Whether a decoder of *fields* calls ``.decode()`` on slices, which memoryview lacks."""
    return any(f.type == "shortstr" for f in fields)


def emit_bytes_guard(e: Emitter, fields: Sequence[Field], indent: int) -> None:
    if needs_bytes(fields):
        # One copy for a memoryview caller; FrameReader hands bytes or bytearray.
        e("if type(buf) is memoryview:", indent)
        e("buf = buf.tobytes()", indent + 1)


def field_specs(fields: Sequence[Field]) -> str:
    return "".join(f"({f.name!r}, {f.type!r}), " for f in fields)


def emit_method(e: Emitter, m: MethodDef) -> None:
    e()
    e()
    e("@final")
    e("@attrs.define(slots=True, kw_only=True, weakref_slot=False)")
    e(f"class {m.py_name}(Method):")
    emit_docstring(e, m.doc or f"``{m.spec_name}``", 1)
    e()
    if m.py_name.startswith("Test"):  # 0-8's test class, not a pytest test class
        e("__test__: ClassVar[bool] = False", 1)
    e(f"CLASS_ID = {m.class_id}", 1)
    e(f"METHOD_ID = {m.method_id}", 1)
    e(f"INDEX = {m.class_id << 16 | m.method_id}", 1)
    e(f"NAME = {m.spec_name!r}", 1)
    e(f"SYNCHRONOUS = {m.synchronous}", 1)
    e(f"HAS_CONTENT = {m.content}", 1)
    e(f"SENT_BY = {'_BY_' + '_'.join(r.upper() for r in m.sent_by)}", 1)
    e(
        f"FIELDS: ClassVar[tuple[FieldSpec, ...]] = ({field_specs(m.fields)})",
        1,
    )
    e("RESPONSES: ClassVar[tuple[type[Method], ...]] = ()", 1)
    # required fields first keeps attrs happy without defaults ordering concerns (kw_only anyway)
    for f in m.fields:
        e()
        if f.label:
            for line in wrap(f.label[:1].upper() + f.label[1:], 1, 94):
                e(f"#: {line}", 1)
        ann = PY_TYPES[f.type]
        if f.secret:
            default = "" if f.default is NO_DEFAULT else f", default={literal(f)}"
            e(f"{f.name}: {ann} = attrs.field(repr=_redacted{default})", 1)
        elif f.default is NO_DEFAULT:
            e(f"{f.name}: {ann}" + (" = attrs.field()" if f.type == "table" else ""), 1)
        else:
            e(f"{f.name}: {ann} = {literal(f)}", 1)
    if any(f.name == "nowait" for f in m.fields) and m.responses:
        e()
        e("def expects_reply(self) -> bool:", 1)
        e("return not self.nowait", 2)
    e()
    e("def encode(self, out: bytearray) -> None:", 1)
    ids = "".join(f"\\x{b:02x}" for b in struct.pack(">HH", m.class_id, m.method_id))
    e(f'out += b"{ids}"  # class {m.class_id}, method {m.method_id}', 2)
    emit_encode_fields(e, m.fields, 2)
    e()
    e("@classmethod", 1)
    e(f"def decode(cls, buf: Buffer, offset: int) -> tuple[{m.py_name}, int]:", 1)
    emit_bytes_guard(e, m.fields, 2)
    # Only where there is a string or a table: fixed-width arguments are one struct call already.
    if any(f.type in ("shortstr", "longstr", "table") for f in m.fields) and all(
        f.type in C_FIELD_CODES for f in m.fields
    ):
        codes = "".join(C_FIELD_CODES[f.type] for f in m.fields)
        emit_c_decoder(e, m.py_name, codes, [f.name for f in m.fields])
    e("self = _new(cls)", 2)
    for item in runs(m.fields):
        emit_decode_field(e, item, 2)
    e("return self, offset", 2)


def emit_properties(e: Emitter, cls: ClassDef) -> str:
    """A content properties class. Its field tables (``headers`` in 0-9-1) are decoded lazily.

    A decoded table stays in its wire form until the property is first read: many consumers
    never look at most headers, and decoding a small table costs as much as the rest of the
    properties together. Such a property is a private slot pair (``_headers`` with the value,
    ``_headers_raw`` with the octets as received, u32 size included) behind a ``headers``
    property, so ``__eq__`` and ``__repr__`` are generated here rather than by attrs.
    """
    name = camel(cls.name) + "Properties"
    props = cls.properties
    if len(props) > 15:
        raise SystemExit(f"{cls.name}: more than 15 properties need a second flag word")
    lazy = [p for p in props if p.type == "table"]

    def slot(p: Field) -> str:
        return f"_{p.name}" if p.type == "table" else p.name

    e()
    e()
    e("@final")
    if lazy:
        e("@attrs.define(slots=True, kw_only=True, weakref_slot=False, eq=False, repr=False)")
    else:
        e("@attrs.define(slots=True, kw_only=True, weakref_slot=False)")
    e(f"class {name}(ContentProperties):")
    doc = f"The properties of a ``{cls.name}`` content header; ``None`` means absent."
    if not props:
        doc = f"The properties of a ``{cls.name}`` content header: the class defines none."
    if lazy:
        names = ", ".join(f"``{p.name}``" for p in lazy)
        doc += (
            f"\n\nA decoded instance keeps {names} as the received octets until first read; "
            "a malformed table raises :class:`RemoteProtocolError` (502) on that read, and on "
            "every read, comparison or encode after it."
        )
    emit_docstring(e, doc, 1)
    e()
    if name.startswith("Test"):  # 0-8's test class, not a pytest test class
        e("__test__: ClassVar[bool] = False", 1)
    e(f"CLASS_ID = {cls.index}", 1)
    e(
        f"FIELDS: ClassVar[tuple[FieldSpec, ...]] = ({field_specs(props)})",
        1,
    )
    for p in props:
        e()
        if p.label and p.type != "table":
            for line in wrap(p.label[:1].upper() + p.label[1:], 1, 94):
                e(f"#: {line}", 1)
        e(f"{slot(p)}: {PY_TYPES[p.type]} | None = None", 1)
    for p in lazy:
        e()
        e(f"# The {p.name} table as received, size included, until the first read.", 1)
        e(f"_{p.name}_raw: bytes | None = attrs.field(default=None, init=False)", 1)
    for p in lazy:
        label = p.label[:1].upper() + p.label[1:] if p.label else f"The {p.name} table"
        e()
        e("@property", 1)
        e(f"def {p.name}(self) -> {PY_TYPES[p.type]} | None:", 1)
        emit_docstring(
            e,
            f"{label}.\n\nDecoded from the received octets on first read.\n\n:raises "
            "RemoteProtocolError: (502) the received table is malformed.",
            2,
        )
        e(f"raw = self._{p.name}_raw", 2)
        e("if raw is not None:", 2)
        # decode_table inline: a helper's call costs a tenth of decoding a small table.
        e("try:", 3)
        e(f"self._{p.name} = decode_table(raw, 0)[0]", 4)
        e("except RemoteProtocolError as exc:", 3)
        e(f'raise malformed_table("{cls.name} property {p.name}", exc) from None', 4)
        e(f"self._{p.name}_raw = None", 3)
        e(f"return self._{p.name}", 2)
        e()
        e(f"@{p.name}.setter", 1)
        e(f"def {p.name}(self, value: {PY_TYPES[p.type]} | None) -> None:", 1)
        e(f"self._{p.name} = value", 2)
        e(f"self._{p.name}_raw = None", 2)
    if lazy:
        e()
        e("def __eq__(self, other: object) -> bool:", 1)
        e(f"if type(other) is not {name}:", 2)
        e("return NotImplemented", 3)
        # Tables last: comparing them may decode them.
        order = [p for p in props if p.type != "table"] + lazy
        e("return (", 2)
        for i, p in enumerate(order):
            e(f"{'and ' if i else ''}self.{p.name} == other.{p.name}", 3)
        e(")", 2)
        e()
        e("def __repr__(self) -> str:", 1)
        e("return (", 2)
        for i, p in enumerate(props):
            prefix = f"{name}(" if i == 0 else ""
            suffix = ")" if i == len(props) - 1 else ", "
            if p.type == "table":
                value = f"{{table_repr(self._{p.name}, self._{p.name}_raw)}}"
            else:
                value = f"{{self.{p.name}!r}}"
            e(f'f"{prefix}{p.name}={value}{suffix}"', 3)
        e(")", 2)
    e()
    e("def encode(self, out: bytearray) -> None:", 1)
    e("start = len(out)", 2)
    e('out += b"\\x00\\x00"', 2)
    e("flags = 0", 2)
    for i, p in enumerate(props):
        bit = 1 << (15 - i)
        if p.type == "table":
            # Forwarded as received once it is known to decode, so its value types survive.
            e(f"raw = self._{p.name}_raw", 2)
            e("if raw is not None:", 2)
            e(f'self._{p.name} = decode_received_table(raw, "{cls.name} property {p.name}")', 3)
            e(f"self._{p.name}_raw = None", 3)
            e(f"flags |= {bit:#06x}", 3)
            e("out += raw", 3)
            e(f"elif self._{p.name} is not None:", 2)
            e(f"flags |= {bit:#06x}", 3)
            e(f"encode_table(out, self._{p.name})", 3)
            continue
        e(f"if self.{p.name} is not None:", 2)
        e(f"flags |= {bit:#06x}", 3)
        if p.type == "octet":
            e(f"out.append(self.{p.name})", 3)
        elif p.type in STRUCT_CODES:
            e(f"out += {e.struct(STRUCT_CODES[p.type])}.pack(self.{p.name})", 3)
        elif p.type == "bit":  # bits have no value in a property list: the flag is the value
            pass
        else:
            emit_encode_fields(e, (p,), 3)
    e("_S_H.pack_into(out, start, flags)", 2)
    e()
    e("@classmethod", 1)
    e(f"def decode(cls, buf: Buffer, offset: int) -> tuple[{name}, int]:", 1)
    emit_bytes_guard(e, props, 2)
    if props and len(props) <= 15 and all(p.type in C_PROPERTY_CODES for p in props):
        codes = "".join(C_PROPERTY_CODES[p.type] for p in props)
        slots = [f"_{p.name}_raw" if p.type == "table" else p.name for p in props]
        nones = [f"_{p.name}" for p in props if p.type == "table"]
        emit_c_decoder(e, name, codes, slots, nones, properties=True)
    e("self = _new(cls)", 2)
    e("(flags,) = _S_H.unpack_from(buf, offset)", 2)
    e("offset += 2", 2)
    e("word = flags", 2)
    e("while word & 1:  # continuation words may follow, but no property lives there", 2)
    e("(word,) = _S_H.unpack_from(buf, offset)", 3)
    e("offset += 2", 3)
    e("if word & 0xFFFE:", 3)
    e(f'raise ValueError(f"{cls.name} properties: unknown property flags {{word:#06x}}")', 4)
    e(f"if flags & {(1 << (16 - len(props))) - 2:#06x}:", 2)
    e(f'raise ValueError(f"{cls.name} properties: unknown property flags {{flags:#06x}}")', 3)
    # Properties in groups of four flag bits: a group that is all absent (most of them, in
    # most messages) costs one test, not four.
    for first in range(0, len(props), 4):
        group = props[first : first + 4]
        mask = sum(1 << (15 - i) for i in range(first, first + len(group)))
        plain = len(group) > 1 and all(p.type not in ("table", "bit") for p in group)
        if plain:
            e(f"if flags & {mask:#06x}:", 2)
        for i, p in enumerate(group, start=first):
            emit_decode_property(e, cls, p, 1 << (15 - i), 3 if plain else 2)
        if plain:
            e("else:", 2)
            e(" = ".join(f"self.{p.name}" for p in group) + " = None", 3)
    e("return self, offset", 2)
    return name


def emit_decode_property(e: Emitter, cls: ClassDef, p: Field, bit: int, indent: int) -> None:
    """Decode one property whose flag is *bit*, or store None when it is absent."""
    if p.type == "table":
        # Only the size is read now; the octets are checked when first decoded.
        e(f"self._{p.name} = None", indent)
        e(f"if flags & {bit:#06x}:", indent)
        e("(n,) = _S_I.unpack_from(buf, offset)", indent + 1)
        e("n += offset + 4", indent + 1)
        e("if n > len(buf):", indent + 1)
        e(
            f'raise ValueError(f"{cls.name} properties: the {p.name} table runs '
            f'{{n - len(buf)}} octets past the end")',
            indent + 2,
        )
        e("raw = buf[offset:n]", indent + 1)
        e(f"self._{p.name}_raw = raw if type(raw) is bytes else bytes(raw)", indent + 1)
        e("offset = n", indent + 1)
        e("else:", indent)
        e(f"self._{p.name}_raw = None", indent + 1)
        return
    e(f"if flags & {bit:#06x}:", indent)
    if p.type == "octet":
        e(f"self.{p.name} = buf[offset]", indent + 1)
        e("offset += 1", indent + 1)
    elif p.type in STRUCT_CODES:
        code = STRUCT_CODES[p.type]
        e(f"(self.{p.name},) = {e.struct(code)}.unpack_from(buf, offset)", indent + 1)
        e(f"offset += {struct.calcsize('>' + code)}", indent + 1)
    else:
        emit_decode_field(e, p, indent + 1)
    e("else:", indent)
    e(f"self.{p.name} = None", indent + 1)


def generate(target: Target) -> str:
    layout = plan(target)
    spec = layout.spec
    body = Emitter()
    methods = layout.methods
    own = [m for m in methods if m.spec_name not in layout.shared]
    prop_classes = [
        (
            c.index,
            camel(c.name) + "Properties"
            if c.name in layout.shared_properties
            else emit_properties(body, c),
        )
        for c in spec.classes
        if c.properties or any(m.content for m in c.methods)
    ]
    for m in own:
        emit_method(body, m)

    e = Emitter()
    major, minor, revision = spec.version
    sources = [target.structure, target.rabbitmq_json, target.documentation]
    e("# ******* WARNING: AUTOGENERATED! ALL EDITS WILL BE LOST ******")
    e("# Generated by tools/gen_spec.py from:")
    for src in sources:
        if src:
            digest = hashlib.sha256((SPEC_DIR / src).read_bytes()).hexdigest()
            e(f"#   spec/{src} (sha256 {digest[:16]})")
    e("# Regenerate with `python tools/gen_spec.py`; `--check` fails when this file is stale.")
    doc = f"{target.title}: methods, content properties and constants."
    if target.base is not None:
        doc += (
            f"\n\n{len(layout.shared)} of the {len(methods)} methods mean the same as in "
            f"``{target.base}`` and are identical on the wire and in Python: they are its classes, "
            "imported from there (``METHODS`` maps this version's ids to them). The others are "
            "this version's own."
        )
    emit_docstring(e, doc, 0)
    e()
    e("from __future__ import annotations")
    e()
    e("import enum")
    e("import struct")
    e("from typing import ClassVar, Final, TypeAlias, cast, final")
    e()
    e("import attrs")
    e()
    e("from .._errors import RemoteProtocolError")
    e("from .._method import (")
    e("Buffer,", 1)
    e("ContentProperties,", 1)
    e("FieldSpec,", 1)
    e("MessageContent,", 1)
    e("Method,", 1)
    e("Role,", 1)
    e("decode_received_table,", 1)
    e("install_c_decoder,", 1)
    e("malformed_table,", 1)
    e("table_repr,", 1)
    e(")")
    e("from .._table import FieldTable, decode_table, encode_table")
    imported = sorted(
        {m.py_name for m in methods if m.spec_name in layout.shared}
        | {camel(name) + "Properties" for name in layout.shared_properties}
    )
    if imported:
        e(f"from .{target.base} import (")
        for name in imported:
            e(f"{name},", 1)
        e(")")
    e("from .reply_codes import ReplyCode")
    e()

    names: list[str] = []
    e(f"PROTOCOL_VERSION: Final = ({major}, {minor}, {revision})")
    e(f"DEFAULT_PORT: Final = {spec.port}")
    names += ["PROTOCOL_VERSION", "DEFAULT_PORT"]
    for c in spec.constants:
        if not is_reply_code(c):
            e(f"{c.name}: Final = {c.value}")
            names.append(c.name)
    names.append("ReplyCode")  # one table for every version: reply_codes.py
    e("_BY_CLIENT: Final = frozenset((Role.CLIENT,))")
    e("_BY_SERVER: Final = frozenset((Role.SERVER,))")
    e("_BY_CLIENT_SERVER: Final = frozenset((Role.CLIENT, Role.SERVER))")
    e("# Decoders build instances without __init__ and store each field once.")
    e("_new: Final = object.__new__")
    e("_S_I: Final = struct.Struct('>I')")
    e("_S_H: Final = struct.Struct('>H')")
    for code, sname in sorted(body.structs.items()):
        if sname not in ("_S_I", "_S_H"):
            e(f"{sname}: Final = struct.Struct('>{code}')")
    e()
    e()
    e("def _redacted(value: object) -> str:")
    e('return "<redacted>"', 1)
    e.lines += body.lines
    names += [name for _, name in prop_classes]
    names += [m.py_name for m in methods]
    e()
    e()
    e("# The replies each request expects; set here because replies are defined after requests.")
    by_name = {m.spec_name: m for m in methods}
    for m in own:
        if m.responses:
            replies = ", ".join(by_name[f"{m.class_name}.{r}"].py_name for r in m.responses)
            e(f"{m.py_name}.RESPONSES = ({replies},)")
    if body.builders:
        e()
        e("# The C accelerator's decoders become these classes' decode (the Python one is their")
        e("# fallback); nothing changes without the accelerator.")
        for line in body.builders:
            e(line)
    e()
    e(f"AnyMethod: TypeAlias = {' | '.join(m.py_name for m in methods)}")
    e()
    e("#: Method classes keyed by ``class_id << 16 | method_id`` as this version sends them.")
    e("METHODS: Final[dict[int, type[Method]]] = {")
    base_ids = _base_ids(target)
    for m in methods:
        index = m.class_id << 16 | m.method_id
        if m.spec_name in layout.shared and base_ids[m.spec_name] != index:
            e(f"{index}: {m.py_name},  # ({m.class_id}, {m.method_id}) in this version", 1)
        else:
            e(f"{m.py_name}.INDEX: {m.py_name},", 1)
    e("}")
    e("#: Content property classes keyed by class id.")
    e("PROPERTIES: Final[dict[int, type[ContentProperties]]] = {")
    for index, name in prop_classes:
        e(f"{index}: {name},", 1)
    e("}")
    names += ["AnyMethod", "METHODS", "PROPERTIES"]
    e()
    e("__all__ = [")
    for n in sorted(names):
        e(f"{n!r},", 1)
    e("]")
    return format_source("\n".join(e.lines) + "\n", OUT_DIR / f"{target.module}.py")


def _base_ids(target: Target) -> dict[str, int]:
    """The wire index each method has in *target*'s base (empty without a base)."""
    if target.base is None:
        return {}
    base = load_spec(next(t for t in TARGETS if t.module == target.base))
    return {m.spec_name: m.class_id << 16 | m.method_id for c in base.classes for m in c.methods}


def is_reply_code(constant: Constant) -> bool:
    return bool(constant.error_class) or constant.name.startswith("REPLY_")


def generate_reply_codes(targets: Sequence[Target]) -> str:
    """One ``ReplyCode`` table for every version: the union of their reply codes. A code that
    two versions name differently, or class differently (soft/hard), stops the generator."""
    codes: dict[int, Constant] = {}
    for target in targets:
        for c in load_spec(target).constants:
            if not is_reply_code(c):
                continue
            seen = codes.setdefault(c.value, c)
            if (seen.name, seen.error_class) != (c.name, c.error_class):
                raise SystemExit(f"reply code {c.value}: {seen} in one version, {c} in another")
    e = Emitter()
    e("# ******* WARNING: AUTOGENERATED! ALL EDITS WILL BE LOST ******")
    e("# Generated by tools/gen_spec.py from the reply codes of:")
    for target in targets:
        digest = hashlib.sha256((SPEC_DIR / target.structure).read_bytes()).hexdigest()
        e(f"#   spec/{target.structure} (sha256 {digest[:16]})")
    e("# Regenerate with `python tools/gen_spec.py`; `--check` fails when this file is stale.")
    e('"""The reply codes of every protocol version, in one table."""')
    e()
    e("from __future__ import annotations")
    e()
    e("import enum")
    e("from typing import Final")
    e()
    e()
    e("class ReplyCode(enum.IntEnum):")
    emit_docstring(
        e,
        "Reply codes of ``connection.close`` and ``channel.close``, in every version.\n\n"
        "Soft errors close the channel; hard errors close the connection.",
        1,
    )
    e()
    for value in sorted(codes):
        e(f"{codes[value].name} = {value}", 1)
    e()
    e("@property", 1)
    e("def is_hard(self) -> bool:", 1)
    e('"""A connection exception: the whole connection must close."""', 2)
    e("return self.value in HARD_ERRORS", 2)
    e()
    e("@property", 1)
    e("def is_soft(self) -> bool:", 1)
    e('"""A channel exception: only the channel closes."""', 2)
    e("return self.value in SOFT_ERRORS", 2)
    e()
    e()
    for kind, name in (("hard-error", "HARD_ERRORS"), ("soft-error", "SOFT_ERRORS")):
        values = ", ".join(str(v) for v in sorted(codes) if codes[v].error_class == kind)
        e(f"{name}: Final = frozenset(({values}))")
    e()
    e('__all__ = ["HARD_ERRORS", "SOFT_ERRORS", "ReplyCode"]')
    return format_source("\n".join(e.lines) + "\n", OUT_DIR / "reply_codes.py")


def outputs() -> Iterator[tuple[Path, str]]:
    """Every generated module, with its source."""
    for target in TARGETS:
        yield OUT_DIR / f"{target.module}.py", generate(target)
    yield OUT_DIR / "reply_codes.py", generate_reply_codes(TARGETS)
    # AMQP 0-10, its own protocol family: emitted by tools/_gen_0_10.py, checked the same way.
    yield from _gen_0_10.outputs(format_source)


def format_source(source: str, path: Path) -> str:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        raise SystemExit("ruff is needed to format the generated code (make test installs it)")
    for args in (["check", "--fix-only", "--exit-zero", "--quiet"], ["format", "--quiet"]):
        source = subprocess.run(
            [ruff, *args, "--stdin-filename", str(path), "-"],
            input=source,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return source


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a generated module is stale"
    )
    args = parser.parse_args(argv)
    stale = []
    for path, source in outputs():
        if args.check:
            if not path.exists() or path.read_text() != source:
                stale.append(path.relative_to(ROOT))
        else:
            path.write_text(source)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("Generated sources are stale; run `python tools/gen_spec.py`:", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
