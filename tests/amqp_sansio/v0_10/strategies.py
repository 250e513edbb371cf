"""Hypothesis strategies for AMQP 0-10 values, structs, controls and commands.

Every strategy draws values in the form the decoder returns them (map and list entries as
:class:`Typed`, arrays as :class:`Array`, sequence sets normalised), so ``decode(encode(x))``
must equal ``x``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final, TypeVar, cast

from hypothesis import strategies as st

from amqp_sansio.v0_10 import (
    COMMANDS,
    CONTROLS,
    STRUCTS,
    Array,
    ByteRanges,
    Compound,
    SequenceSet,
    Struct,
    TypeCode,
    Typed,
    UnknownStruct,
)
from amqp_sansio.v0_10._generated import spec_0_10

if TYPE_CHECKING:
    from amqp_sansio.v0_10 import Value

C = TypeVar("C", bound=Compound)

INTS: Final = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
    "sequence-no": (0, 2**32 - 1),
    "datetime": (0, 2**64 - 1),
}
#: The type name of every code the decoder knows a width for (unnamed codes: by nibble).
NAMES: Final = {int(c): c.name.lower().replace("_", "-") for c in TypeCode}
WIDTH_CLASSES: Final = {
    0x0: 1,
    0x1: 2,
    0x2: 4,
    0x3: 8,
    0x4: 16,
    0x5: 32,
    0x6: 64,
    0x7: 128,
    0xC: 5,
    0xD: 9,
    0xF: 0,
}
VARIABLE_CLASSES: Final = {0x8: 1, 0x9: 2, 0xA: 4}
#: Codes a value may have: every code outside the reserved 0xb_ and 0xe_ nibbles.
CODES: Final = [c for c in range(256) if (c >> 4) in WIDTH_CLASSES or (c >> 4) in VARIABLE_CLASSES]

short_text = st.text(max_size=12)
str8_text = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
keys = str8_text


@functools.cache
def text_for(name: str) -> st.SearchStrategy[str]:
    if name.endswith("latin"):
        return st.text(alphabet=st.characters(codec="iso-8859-15"), max_size=20)
    if name.endswith("utf16"):
        return st.text(
            alphabet=st.characters(codec="utf-16", exclude_categories=["Cs"]), max_size=20
        )
    return str8_text


def sequence_sets() -> st.SearchStrategy[SequenceSet]:
    # Ids of one set lie within half the serial space (anywhere on the circle, wrapping
    # included): RFC 1982 orders nothing wider.
    def window(base: int) -> st.SearchStrategy[SequenceSet]:
        ranges = st.lists(
            st.tuples(st.integers(0, 2**30), st.integers(0, 1000)).map(
                lambda p: ((base + p[0]) & 0xFFFF_FFFF, (base + p[0] + p[1]) & 0xFFFF_FFFF)
            ),
            max_size=4,
        )
        return ranges.map(SequenceSet)

    return st.integers(0, 2**32 - 1).flatmap(window)


byte_ranges = st.lists(
    st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=3
).map(lambda pairs: ByteRanges(tuple(pairs)))


@functools.cache
def plain_value(code: int, depth: int) -> st.SearchStrategy[Value]:
    """A value of type *code* as the decoder returns it (inside an array: no Typed)."""
    name = NAMES.get(code, "")
    nibble = code >> 4
    if name in INTS:
        low, high = INTS[name]
        return st.integers(low, high)
    if name == "boolean":
        return st.booleans()
    if name == "float":
        return st.floats(width=32, allow_nan=False)
    if name == "double":
        return st.floats(allow_nan=False)
    if name == "uuid":
        return st.uuids()
    if name.startswith("str") and name != "struct32":
        return text_for(name)
    if name == "void":
        return st.none()
    if name == "bit":
        return st.just(True)
    if name in ("map", "list", "array", "struct32") and depth >= 2:
        return st.nothing()
    if name == "map":
        return st.dictionaries(keys, typed_values(depth + 1), max_size=3)
    if name == "list":
        return st.lists(typed_values(depth + 1), max_size=3)
    if name == "array":
        return arrays(depth + 1)
    if name == "struct32":
        return st.one_of(coded_structs(depth + 1), unknown_structs)
    if nibble in VARIABLE_CLASSES:
        return st.binary(max_size=20)
    width = WIDTH_CLASSES[nibble]
    return st.binary(min_size=width, max_size=width)


@functools.cache
def typed_values(depth: int = 0) -> st.SearchStrategy[Value]:
    """A :class:`Typed` value of any code."""
    return st.sampled_from(CODES).flatmap(
        lambda code: plain_value(code, depth).map(lambda v: Typed(code, v))
    )


@functools.cache
def arrays(depth: int = 0) -> st.SearchStrategy[Value]:
    # Deep down, nested codes have no values to draw: an array of them would be a list of
    # nothing(), which hypothesis refuses. Draw only codes that have values at this depth.
    codes = [code for code in CODES if not plain_value(code, depth).is_empty]
    return st.sampled_from(codes).flatmap(
        lambda code: st.lists(plain_value(code, depth), max_size=3).map(
            lambda values: Array(code, tuple(values))
        )
    )


unknown_structs = st.builds(
    UnknownStruct,
    code=st.integers(0, 0xFFFF).filter(lambda c: c not in STRUCTS),
    data=st.binary(max_size=10),
)


@functools.cache
def field_value(type_name: str, depth: int) -> st.SearchStrategy[object]:
    """A value for a field of spec type *type_name*."""
    if type_name == "bit":
        return st.booleans()
    if type_name in INTS:
        low, high = INTS[type_name]
        return st.integers(low, high)
    if type_name == "sequence-set":
        return sequence_sets()
    if type_name == "byte-ranges":
        return byte_ranges
    if type_name == "map":
        return st.dictionaries(keys, typed_values(depth + 1), max_size=3)
    if type_name == "list":
        return st.lists(typed_values(depth + 1), max_size=3)
    if type_name == "array":
        return arrays(depth + 1)
    if type_name == "struct32":
        return st.one_of(coded_structs(depth + 1), unknown_structs)
    if type_name in ("vbin8", "vbin16", "vbin32"):
        return st.binary(max_size=40)
    if type_name.startswith("str"):
        return text_for(type_name)
    struct_cls = next((s for s in _ALL_STRUCTS if s.NAME.endswith("." + type_name)), None)
    if struct_cls is not None:
        return instances(struct_cls, depth + 1)
    code = next(c for c, n in NAMES.items() if n == type_name)
    return plain_value(code, depth)


_ALL_STRUCTS: Final = [
    obj
    for obj in vars(spec_0_10).values()
    if isinstance(obj, type) and issubclass(obj, Struct) and obj not in (Struct, UnknownStruct)
]


_INSTANCES: dict[tuple[str, int], st.SearchStrategy[object]] = {}


def instances(cls: type[C], depth: int = 0) -> st.SearchStrategy[C]:
    """Instances of a generated class with each field absent (None) or drawn."""
    key = (cls.NAME, depth)
    cached = _INSTANCES.get(key)
    if cached is not None:
        return cast("st.SearchStrategy[C]", cached)
    fields: dict[str, st.SearchStrategy[object]] = {}
    for name, type_name in cls.FIELDS:
        value = field_value(type_name, depth)
        if cls.PACK and type_name != "bit":
            value = st.none() | value
        fields[name] = value
    built = _INSTANCES[key] = st.builds(cls, **fields)
    return cast("st.SearchStrategy[C]", built)


@functools.cache
def coded_structs(depth: int) -> st.SearchStrategy[Value]:
    if depth > 2:
        return st.nothing()
    return st.sampled_from(sorted(STRUCTS.values(), key=lambda c: c.NAME)).flatmap(
        lambda cls: instances(cls, depth)
    )


ALL_STRUCTS: Final = sorted(_ALL_STRUCTS, key=lambda c: c.NAME)
ALL_CONTROLS: Final = sorted(CONTROLS.values(), key=lambda c: c.NAME)
ALL_COMMANDS: Final = sorted(COMMANDS.values(), key=lambda c: c.NAME)
