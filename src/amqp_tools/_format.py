"""How amqp-decode writes what it decoded: method arguments, properties, tables and bodies, on
one line each (a hex dump of a body takes the lines after it)."""

from __future__ import annotations

import datetime
import decimal
import string
from typing import TYPE_CHECKING, ClassVar, Final, Protocol, final

import attrs

if TYPE_CHECKING:
    from amqp_sansio import ContentProperties, Method

__all__ = [
    "FormatOptions",
    "format_body",
    "format_compound",
    "format_method",
    "format_properties",
    "format_value",
]

#: Strings and octet strings inside arguments are cut after this many characters.
_MAX_TEXT: Final = 200
_PRINTABLE: Final = frozenset(string.printable.encode()) - frozenset(b"\t\n\r\x0b\x0c")
#: Arguments that carry a login's secret: (method name, field name).
_SECRETS: Final = {
    ("connection.start-ok", "response"),
    ("connection.secure-ok", "response"),
}


@final
@attrs.frozen
class FormatOptions:
    """What the decoder prints."""

    #: Octets of each body frame shown; None shows them all.
    max_body: int | None = 256
    #: Bodies as a hex dump (offset, hex, ASCII) instead of a Python bytes literal.
    hex_bodies: bool = False
    #: Whether heartbeat frames get a line.
    heartbeats: bool = True
    #: Show passwords in ``connection.start-ok`` and ``secure-ok`` instead of hiding them.
    show_credentials: bool = False


def format_value(value: object) -> str:
    """A field value, table or array, the way Python writes it, long strings cut."""
    if isinstance(value, dict):
        inner = ", ".join(f"{key!r}: {format_value(item)}" for key, item in value.items())
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    if isinstance(value, (str, bytes)):
        return _cut(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return f"Decimal('{value}')"
    inner_value = getattr(value, "value", None)
    if inner_value is not None and type(value).__module__.startswith("amqp_sansio"):
        return f"{type(value).__name__}({format_value(inner_value)})"  # Int8(5), Timestamp(...)
    return repr(value)


def _cut(text: str | bytes) -> str:
    if len(text) <= _MAX_TEXT:
        return repr(text)
    return f"{text[:_MAX_TEXT]!r}... ({len(text) - _MAX_TEXT} more)"


def format_method(method: Method, options: FormatOptions) -> str:
    """``queue.declare queue='jobs' passive=False ...``: the spec name and every argument (the
    reserved ``ticket`` only when it is not 0)."""
    parts = [method.NAME]
    for name, _wire_type in method.FIELDS:
        value = getattr(method, name)
        if name == "ticket" and value == 0:
            continue
        if (method.NAME, name) in _SECRETS and not options.show_credentials:
            parts.append(f"{name}={_hidden_response(method, value)}")
        else:
            parts.append(f"{name}={format_value(value)}")
    return " ".join(parts)


class _Compound(Protocol):
    """A 0-10 control, command or struct (``amqp_sansio.v0_10``): absent fields are None."""

    NAME: ClassVar[str]
    FIELDS: ClassVar[tuple[tuple[str, str], ...]]


def format_compound(compound: _Compound, options: FormatOptions) -> str:
    """``message.transfer destination='x' accept-mode=...``: the spec name and the fields that
    are present (0-10 leaves absent ones out with its packing flags)."""
    parts = [compound.NAME]
    for name, _wire_type in compound.FIELDS:
        value = getattr(compound, name, None)
        if value is None:
            continue
        hidden = compound.NAME == "connection.start-ok" and name == "response"
        if hidden and not options.show_credentials:
            size = len(value) if isinstance(value, bytes) else 0
            parts.append(f"{name}=<{size} octets hidden>")
            continue
        parts.append(f"{name}={format_value(value)}")
    return " ".join(parts)


def _hidden_response(method: Method, response: object) -> str:
    """A SASL response with the password left out: PLAIN is ``\\0user\\0password``, AMQPLAIN a
    table with LOGIN and PASSWORD."""
    mechanism = getattr(method, "mechanism", "")
    if isinstance(response, bytes) and mechanism == "PLAIN" and response.count(b"\0") == 2:
        _authzid, user, _password = response.split(b"\0")
        return f"<PLAIN login {user.decode(errors='replace')!r}, password hidden>"
    if isinstance(response, bytes) and mechanism == "AMQPLAIN" and b"LOGIN" in response:
        return f"<AMQPLAIN, {len(response)} octets, password hidden>"
    size = len(response) if isinstance(response, bytes) else 0
    return f"<{size} octets hidden>"


def format_properties(properties: ContentProperties) -> str:
    """The properties that are set, ``name=value`` each; ``(none)`` when none is."""
    parts = [
        f"{name}={format_value(getattr(properties, name))}"
        for name, _wire_type in properties.FIELDS
        if getattr(properties, name) is not None
    ]
    return " ".join(parts) if parts else "(no properties)"


def format_body(payload: bytes, options: FormatOptions) -> list[str]:
    """A body frame's octets: a bytes literal on the frame's line, or hex dump lines after it.
    Returns the text for the frame's line, then any further lines."""
    limit = len(payload) if options.max_body is None else min(options.max_body, len(payload))
    shown = payload[:limit]
    more = len(payload) - limit
    tail = f" ... ({more} more octets)" if more else ""
    if not options.hex_bodies:
        return [f"{shown!r}{tail}" if shown else f"(not shown){tail}"]
    lines = [f"hex dump{tail}:" if shown else f"(not shown){tail}"]
    for at in range(0, len(shown), 16):
        row = shown[at : at + 16]
        hex_part = " ".join(f"{octet:02x}" for octet in row)
        text = "".join(chr(octet) if octet in _PRINTABLE else "." for octet in row)
        lines.append(f"  {at:08x}  {hex_part:<47}  |{text}|")
    return lines
