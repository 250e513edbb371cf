"""Field values as the model compares and shows them: typed values unwrapped, booleans never
equal to integers, tables made hashable, and RabbitMQ's way of quoting them in reply texts."""

from __future__ import annotations

import base64
import os
from datetime import datetime

from amqp_sansio import FieldValue, Int8, Int16, Int32, Int64, Timestamp, TypedValue

__all__ = [
    "freeze",
    "generated_name",
    "same_value",
    "show",
    "show_arg",
    "typed",
    "wire_type",
]


def typed(value: FieldValue) -> FieldValue:
    """Unwrap typed values (``Int64(5)`` -> 5) for comparisons."""
    if isinstance(value, TypedValue):
        return value.value
    return value


def same_value(a: FieldValue, b: FieldValue) -> bool:
    """Equality of two field values where ``True`` is not ``1``."""
    if isinstance(a, bool) is not isinstance(b, bool):
        return False
    return a == b


def freeze(value: object) -> object:
    """A hashable stand-in for a field value (tables and arrays nest)."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return (type(value).__name__, value)


def show(value: object) -> str:
    """A property value as RabbitMQ quotes it in an "inequivalent arg" text."""
    if isinstance(value, bool):
        return "'true'" if value else "'false'"
    return f"'{value}'"


def show_arg(value: object) -> str:
    """An argument value as RabbitMQ quotes it in an "inequivalent arg" text when the other
    side has none: with its type."""
    if value is None:
        return "none"
    shown = typed(value) if isinstance(value, TypedValue) else value
    if isinstance(shown, bool):
        shown = "true" if shown else "false"
    return f"the value '{shown}' of type '{wire_type(value)}'"


def wire_type(value: object) -> str:
    """The name RabbitMQ gives a field value's type (the smallest type a client would have
    encoded an integer with, as ``amqp_sansio`` does)."""
    if isinstance(value, TypedValue):
        return {
            Int8: "byte",
            Int16: "short",
            Int32: "signedint",
            Int64: "long",
            Timestamp: "timestamp",
        }.get(type(value), "long")
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        for bits, name in ((8, "byte"), (16, "short"), (32, "signedint")):
            if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                return name
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, datetime):
        return "timestamp"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "void"


def generated_name(prefix: str) -> str:
    """A server-generated name (``amq.gen-...``, ``amq.ctag-...``)."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
