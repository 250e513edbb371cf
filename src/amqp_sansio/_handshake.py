"""The handshake as pure functions: what each role says in start/start-ok, tune/tune-ok and
open, what it accepts, and why it refuses. No state: the connection shell calls these and moves
its machine; they raise :class:`RemoteProtocolError` with the reply code of a refusal."""

from __future__ import annotations

import functools
import hmac
import platform
from typing import TYPE_CHECKING, Final

from ._config import (
    CHANNEL_MAX_LIMIT,
    FRAME_MAX_LIMIT,
    SERVER_CHANNEL_MAX,
    SERVER_FRAME_MAX,
    SERVER_HEARTBEAT,
)
from ._errors import RemoteProtocolError
from ._generated.reply_codes import ReplyCode
from ._generated.spec_0_9_1 import (
    FRAME_MIN_SIZE,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
)
from ._negotiation import choose_version, requested_version
from ._table import decode_table_entries, encode_table_entries

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._config import ConnectionConfig
    from ._events import AuthenticationRequested
    from ._frames import ProtocolHeader
    from ._method import Method
    from ._protocol import ProtocolSpec
    from ._table import FieldTable, FieldValue

__all__ = [
    "Limits",
    "check_credentials",
    "check_start",
    "check_start_ok",
    "check_tune_ok",
    "client_properties",
    "client_tune",
    "limits",
    "parse_credentials",
    "sasl_response",
    "server_properties",
    "server_spec",
    "server_tune",
    "shortstr",
    "username",
    "wants_refusal_close",
]


@functools.cache
def _version() -> str:
    # At the first handshake, not at import: importlib.metadata costs a tenth of the import.
    from importlib import metadata

    try:
        return metadata.version("amqp-sansio")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0.0.0"


_CAPABILITIES: Final[FieldTable] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}

#: ``(channel_max, frame_max, heartbeat)`` as tune/tune-ok carry them (0: no limit / off).
Limits = tuple[int, int, int]


def _refused(text: str, code: int, method: type[Method] | None = None) -> RemoteProtocolError:
    return RemoteProtocolError(
        text,
        reply_code=code,
        class_id=0 if method is None else method.CLASS_ID,
        method_id=0 if method is None else method.METHOD_ID,
    )


def shortstr(text: str) -> str:
    """*text* cut to 255 UTF-8 octets without splitting a character."""
    data = text.encode()
    if len(data) <= 0xFF:
        return text
    return data[:0xFF].decode(errors="ignore")


def _lower_nonzero(ours: int, theirs: int) -> int:
    """Tune negotiation: the lower value wins, and 0 ("no limit") loses to any limit."""
    if ours and theirs:
        return min(ours, theirs)
    return ours or theirs


def _our_properties(spec: ProtocolSpec) -> FieldTable:
    return {
        "product": "amqp-sansio",
        "version": _version(),
        "platform": f"Python {platform.python_version()}",
        "capabilities": dict(_CAPABILITIES) if spec.table_types is None else {},
    }


# --- Client role ------------------------------------------------------------------------------


def check_start(config: ConnectionConfig, start: ConnectionStart, spec: ProtocolSpec) -> str:
    """The SASL mechanism to answer *start* with.

    :raises RemoteProtocolError: the server speaks another version (540) or does not offer the
        configured mechanism (530).
    """
    major, minor = spec.start_version
    if (start.version_major, start.version_minor) != (major, minor):
        raise _refused(
            f"the server speaks {start.version_major}-{start.version_minor}, not "
            f"{spec.version.value}",
            ReplyCode.NOT_IMPLEMENTED,
            ConnectionStart,
        )
    mechanism = config.sasl_mechanism
    if mechanism.encode() not in start.mechanisms.split():
        raise _refused(
            f"the server offers SASL mechanisms {start.mechanisms.decode(errors='replace')!r},"
            f" not {mechanism}",
            ReplyCode.NOT_ALLOWED,
            ConnectionStart,
        )
    return mechanism


def client_properties(config: ConnectionConfig, spec: ProtocolSpec) -> FieldTable:
    """What start-ok says about us: product, version, platform, capabilities, the connection
    name, then the config's own ``client_properties`` over them.

    The capabilities are RabbitMQ's 0-9-1 extensions, in booleans: a version with fewer field
    types (0-8, 0-9) says nothing about them, as RabbitMQ's own 0-8 server does.
    """
    props = _our_properties(spec)
    if config.connection_name is not None:
        props["connection_name"] = config.connection_name
    props.update(config.client_properties)
    return props


def sasl_response(config: ConnectionConfig, mechanism: str) -> bytes:
    """The SASL response for *mechanism* from the config's credentials."""
    if config.sasl_response is not None:
        return config.sasl_response
    if mechanism == "PLAIN":
        return b"\0" + config.username.encode() + b"\0" + config.password.encode()
    if mechanism == "AMQPLAIN":
        # A field table without its size prefix: RabbitMQ parses the raw response.
        out = bytearray()
        encode_table_entries(out, {"LOGIN": config.username, "PASSWORD": config.password})
        return bytes(out)
    return b""  # EXTERNAL: the identity comes from the TLS certificate


def client_tune(config: ConnectionConfig, tune: ConnectionTune) -> Limits:
    """The limits to answer *tune* with: the lower non-zero of ours and the server's, and
    heartbeat 0 when the config asks for none.

    :raises RemoteProtocolError: (530) the server proposes a frame_max below the minimum.
    """
    if 0 < tune.frame_max < FRAME_MIN_SIZE:
        # 530 like RabbitMQ's fail_negotiation: a limit outside what the spec allows is a
        # refused negotiation, not a malformed frame (the frame itself decoded fine).
        raise _refused(
            f"the server proposes frame_max {tune.frame_max}, below the minimum {FRAME_MIN_SIZE}",
            ReplyCode.NOT_ALLOWED,
            ConnectionTune,
        )
    channel_max = _lower_nonzero(config.channel_max or 0, tune.channel_max)
    frame_max = _lower_nonzero(config.frame_max or 0, tune.frame_max)
    if config.heartbeat is None:
        heartbeat = tune.heartbeat
    else:  # 0 asks for no heartbeats; the server accepts the client's tune-ok value
        heartbeat = config.heartbeat and _lower_nonzero(config.heartbeat, tune.heartbeat)
    return channel_max, frame_max, heartbeat


# --- Server role ------------------------------------------------------------------------------


def server_spec(config: ConnectionConfig, header: ProtocolHeader) -> ProtocolSpec:
    """The version the server serves a client whose protocol header is *header*: one of the
    config's ``protocols``, as :func:`~._negotiation.choose_version` decides.

    :raises RemoteProtocolError: (540) the header asks for a version we do not serve.
    """
    served = {spec.version: spec for spec in config.protocols}
    version = choose_version(header, served, header_0_9=config.header_0_9)
    if version is None:
        requested = requested_version(header, header_0_9=config.header_0_9)
        raise RemoteProtocolError(
            f"unsupported protocol header {header.octets!r} ({requested.value}); we serve "
            + ", ".join(version.value for version in served),
            reply_code=ReplyCode.NOT_IMPLEMENTED,
        )
    return served[version]


def server_properties(config: ConnectionConfig, spec: ProtocolSpec) -> FieldTable:
    """What connection.start says about us: product, version, platform, capabilities (as in
    :func:`client_properties`, an empty table in 0-8 and 0-9, as RabbitMQ's), then the
    config's own ``server_properties`` over them."""
    props = _our_properties(spec)
    if config.server_properties is not None:
        props.update(config.server_properties)
    return props


def wants_refusal_close(client_properties: FieldTable) -> bool:
    """Whether a client is told why its login was refused: it advertised
    ``authentication_failure_close`` as true in its capabilities (RabbitMQ's test: a boolean
    true, nothing else)."""
    capabilities = client_properties.get("capabilities")
    return (
        isinstance(capabilities, dict) and capabilities.get("authentication_failure_close") is True
    )


def check_start_ok(config: ConnectionConfig, start_ok: ConnectionStartOk) -> None:
    """:raises RemoteProtocolError: (503) the client chose a mechanism we did not offer."""
    if start_ok.mechanism not in config.mechanisms:
        raise _refused(
            f"unsupported authentication mechanism {start_ok.mechanism!r}",
            ReplyCode.COMMAND_INVALID,
            ConnectionStartOk,
        )


def server_tune(config: ConnectionConfig) -> Limits:
    """What the server proposes in connection.tune (RabbitMQ's defaults where the config has
    none)."""
    return (
        SERVER_CHANNEL_MAX if config.channel_max is None else config.channel_max,
        SERVER_FRAME_MAX if config.frame_max is None else config.frame_max,
        SERVER_HEARTBEAT if config.heartbeat is None else config.heartbeat,
    )


def check_tune_ok(config: ConnectionConfig, tune_ok: ConnectionTuneOk) -> None:
    """:raises RemoteProtocolError: (530) the client's limits exceed what we proposed."""
    channel_max, frame_max, _ = server_tune(config)
    for name, value, low, high in (
        ("channel_max", tune_ok.channel_max, 1, channel_max),
        ("frame_max", tune_ok.frame_max, FRAME_MIN_SIZE, frame_max),
    ):
        # RabbitMQ's validate_negotiated_integer_value: 0 means "no limit", which is above
        # any limit we proposed.
        if (value and value < low) or (high and (value == 0 or value > high)):
            raise _refused(
                f"negotiated {name} = {value} is outside {low}..{high or 'unlimited'}",
                ReplyCode.NOT_ALLOWED,
                ConnectionTuneOk,
            )


def limits(channel_max: int, frame_max: int, heartbeat: int) -> Limits:
    """Negotiated limits as the connection applies them: 0 means the wire's own maximum."""
    return channel_max or CHANNEL_MAX_LIMIT, frame_max or FRAME_MAX_LIMIT, heartbeat


def username(mechanism: str, response: bytes) -> str | None:
    """The user a PLAIN or AMQPLAIN response names, or None."""
    try:
        if mechanism == "PLAIN":
            parts = response.split(b"\0")
            return parts[1].decode() if len(parts) == 3 else None
        if mechanism == "AMQPLAIN":
            login: FieldValue = decode_table_entries(response, 0, len(response)).get("LOGIN")
            if isinstance(login, bytes):
                return login.decode()
            return login if isinstance(login, str) else None
    except (UnicodeDecodeError, RemoteProtocolError):
        return None
    return None


def parse_credentials(mechanism: str, response: bytes) -> tuple[str, str] | None:
    """Server role: ``(username, password)`` from a SASL response, as
    :class:`~amqp_sansio.AuthenticationRequested` carries it (``event.mechanism``,
    ``event.response``): PLAIN (``authzid\\0user\\0password``) or AMQPLAIN (a field table
    without its length prefix, ``LOGIN`` and ``PASSWORD``). None for another mechanism or a
    response that does not parse."""
    try:
        if mechanism == "PLAIN":
            parts = response.split(b"\0")
            if len(parts) != 3:
                return None
            return parts[1].decode(), parts[2].decode()
        if mechanism == "AMQPLAIN":
            table = decode_table_entries(response, 0, len(response))
            login, password = table.get("LOGIN"), table.get("PASSWORD")
            if isinstance(login, bytes):
                login = login.decode()
            if isinstance(password, bytes):
                password = password.decode()
            if isinstance(login, str) and isinstance(password, str):
                return login, password
    except (UnicodeDecodeError, RemoteProtocolError):
        return None
    return None


def check_credentials(event: AuthenticationRequested, users: Mapping[str, str]) -> str | None:
    """Server role: the username when *event*'s PLAIN or AMQPLAIN response names a user of
    *users* (username -> password) with the right password, else None (unknown user, wrong
    password, another mechanism, a response that does not parse). Passwords are compared in
    constant time.

    Answer with :meth:`~amqp_sansio.Connection.accept_authentication` or
    :meth:`~amqp_sansio.Connection.refuse_authentication`::

        if check_credentials(event, {"guest": "guest"}) is None:
            conn.refuse_authentication("Login was refused")
        else:
            conn.accept_authentication()
    """
    credentials = parse_credentials(event.mechanism, event.response)
    if credentials is None:
        return None
    username, password = credentials
    expected = users.get(username)
    if expected is None:
        return None
    if not hmac.compare_digest(password.encode(), expected.encode()):
        return None
    return username
