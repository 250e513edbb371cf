"""Field values as the model compares and shows them: typed values unwrapped, booleans never
equal to integers, tables made hashable, and RabbitMQ's way of quoting them in reply texts."""

from __future__ import annotations

import base64
import os

from amqp_sansio import FieldValue, TypedValue

__all__ = ["freeze", "generated_name", "same_value", "show", "show_arg", "typed"]


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
    """An argument value as RabbitMQ quotes it in an "inequivalent arg" text."""
    if value is None:
        return "none"
    kind = (
        "longstr"
        if isinstance(value, str)
        else "bool"
        if isinstance(value, bool)
        else ("long" if isinstance(value, int) else type(value).__name__)
    )
    return f"the value '{value}' of type '{kind}'"


def generated_name(prefix: str) -> str:
    """A server-generated name (``amq.gen-...``, ``amq.ctag-...``)."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
