"""Hypothesis strategies for wire values, shared by the codec and core tests."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from hypothesis import strategies as st

from amqp_sansio._method import INT_LIMITS, MessageContent

if TYPE_CHECKING:
    from amqp_sansio._method import ContentProperties, Method
    from amqp_sansio._table import FieldTable, FieldValue

# Short strings: anything up to 255 UTF-8 bytes, with the maximal case drawn explicitly.
short_strings = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="abcxyz-_.:", min_size=255, max_size=255),
    st.text(max_size=63).filter(lambda s: len(s.encode()) <= 255),
).filter(lambda s: len(s.encode()) <= 255)

keys = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)

scalars: st.SearchStrategy[FieldValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.decimals(
        allow_nan=False, allow_infinity=False, places=2, min_value=-(10**6), max_value=10**6
    ),
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 1),
        max_value=datetime.datetime(2200, 1, 1),
        timezones=st.just(datetime.UTC),
    ).map(lambda d: d.replace(microsecond=0)),
)


def _nest(children: st.SearchStrategy[FieldValue]) -> st.SearchStrategy[FieldValue]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    )


field_values: st.SearchStrategy[FieldValue] = st.recursive(scalars, _nest, max_leaves=12)
field_tables: st.SearchStrategy[FieldTable] = st.dictionaries(keys, field_values, max_size=6)


def wire_value(wire_type: str) -> st.SearchStrategy[object]:
    """Values over the full range of a spec primitive type."""
    if wire_type == "bit":
        return st.booleans()
    if wire_type in INT_LIMITS:
        return st.integers(min_value=0, max_value=INT_LIMITS[wire_type])
    if wire_type == "shortstr":
        return short_strings
    if wire_type == "longstr":
        return st.one_of(st.binary(max_size=64), st.binary(min_size=4096, max_size=5000))
    if wire_type == "table":
        return field_tables
    if wire_type == "content":  # 0-9's message.transfer body: inline octets or a reference
        return st.builds(MessageContent, data=st.binary(max_size=64), reference=st.booleans())
    raise AssertionError(f"no strategy for {wire_type}")


def methods(cls: type[Method]) -> st.SearchStrategy[Method]:
    return st.builds(cls, **{name: wire_value(kind) for name, kind in cls.FIELDS})


def properties(cls: type[ContentProperties]) -> st.SearchStrategy[ContentProperties]:
    return st.builds(cls, **{name: st.none() | wire_value(kind) for name, kind in cls.FIELDS})
