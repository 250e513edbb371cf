"""What kombu's connection settings mean for amqp_blocking: :func:`connection_parameters`."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from amqp_sansio.client import ConnectionParameters

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "KOMBU_OPTIONS",
    "TRANSPORT_OPTIONS",
    "Protocol",
    "connection_parameters",
    "transport_protocol",
]

#: The AMQP versions the transport speaks (``transport_options={"protocol": ...}``).
Protocol: TypeAlias = Literal["0-9-1", "0-10"]

#: ``transport_options`` the transport reads.
TRANSPORT_OPTIONS: Final = frozenset(
    {
        "confirm_publish",  # publisher confirms on every channel (as pyamqp's)
        "protocol",  # "0-9-1" (the default) or "0-10"
        "connection_name",  # shown in RabbitMQ's management UI
        "client_properties",  # more client-properties for connection.start-ok
        "frame_max",
        "channel_max",
    }
)

#: ``transport_options`` kombu itself puts there (retry policies, pools): left alone.
KOMBU_OPTIONS: Final = frozenset(
    {
        "max_retries",
        "interval_start",
        "interval_step",
        "interval_max",
        "connect_retries_timeout",
        "errback",
        "callback",
        "retry_errors",
    }
)

_LOGIN_METHODS: Final = {"PLAIN": "PLAIN", "AMQPLAIN": "AMQPLAIN", "EXTERNAL": "EXTERNAL"}

#: The keys of kombu's ``ssl`` dict (py-amqp's, which Celery's ``broker_use_ssl`` follows).
_SSL_KEYS: Final = frozenset(
    {"ca_certs", "certfile", "keyfile", "cert_reqs", "server_hostname", "check_hostname"}
)


def transport_protocol(options: Mapping[str, object]) -> Protocol:
    """The ``protocol`` transport option: ``"0-9-1"`` unless it says ``"0-10"``."""
    protocol = options.get("protocol", "0-9-1")
    if protocol not in ("0-9-1", "0-10"):
        raise ValueError(f"transport option protocol: expected '0-9-1' or '0-10', got {protocol!r}")
    return "0-10" if protocol == "0-10" else "0-9-1"


def connection_parameters(
    *,
    hostname: str,
    port: int,
    userid: str,
    password: str | Callable[[], str],
    virtual_host: str,
    login_method: str | None,
    ssl_option: object,
    connect_timeout: float | None,
    heartbeat: float | None,
    transport_options: Mapping[str, object],
) -> tuple[ConnectionParameters, ssl.SSLContext | None]:
    """amqp_blocking's parameters (and the TLS context, when TLS is on) for a kombu
    connection's settings, which kombu parsed from the URL and its keyword arguments.

    :raises ValueError: a setting this transport does not support (an unknown transport
        option, a SASL mechanism other than PLAIN, AMQPLAIN and EXTERNAL, an unknown ``ssl``
        key), saying which.
    """
    unknown = set(transport_options) - TRANSPORT_OPTIONS - KOMBU_OPTIONS
    if unknown:
        raise ValueError(
            f"unknown transport option(s) {', '.join(sorted(unknown))} for the amqp-sansio "
            f"transport (it reads {', '.join(sorted(TRANSPORT_OPTIONS))})"
        )
    mechanism = _LOGIN_METHODS.get((login_method or "PLAIN").upper())
    if mechanism is None:
        raise ValueError(
            f"login_method {login_method!r}: the amqp-sansio transport supports PLAIN, "
            "AMQPLAIN and EXTERNAL"
        )
    context, server_hostname = _tls(ssl_option)
    if callable(password):
        password = password()  # kombu's credential refresh: asked again per connection
    name = transport_options.get("connection_name")
    properties = transport_options.get("client_properties") or {}
    if not isinstance(properties, dict):
        raise ValueError("transport option client_properties: expected a dict")
    params = ConnectionParameters(
        host="127.0.0.1" if hostname == "localhost" else hostname,
        port=port,
        tls=context is not None,
        virtual_host=virtual_host or "/",
        username=userid,
        password=password,
        auth_mechanism=mechanism,  # type: ignore[arg-type]  # one of the three checked above
        # kombu's 0 means "off" for the heartbeat, as ours does.
        heartbeat=None if heartbeat is None else int(heartbeat),
        frame_max=_optional_int(transport_options, "frame_max"),
        channel_max=_optional_int(transport_options, "channel_max"),
        connection_timeout=10.0 if connect_timeout is None else float(connect_timeout),
        connection_name=None if name is None else str(name),
        client_properties=properties,
        server_hostname=server_hostname,
        protocol=transport_protocol(transport_options),
    )
    return params, context


def _optional_int(options: Mapping[str, object], key: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"transport option {key}: expected an integer, got {value!r}")
    return value


def _tls(option: object) -> tuple[ssl.SSLContext | None, str | None]:
    """kombu's ``ssl`` setting as a context: False/None (plain TCP), True (the system's
    trust store), an :class:`ssl.SSLContext`, or py-amqp's dict of options."""
    if option is None or option is False:
        return None, None
    if option is True:
        return ssl.create_default_context(), None
    if isinstance(option, ssl.SSLContext):
        return option, None
    if not isinstance(option, dict):
        raise ValueError(f"ssl: expected a bool, an ssl.SSLContext or a dict, got {option!r}")
    unknown = set(option) - _SSL_KEYS
    if unknown:
        raise ValueError(
            f"ssl: unknown key(s) {', '.join(sorted(unknown))} (known: "
            f"{', '.join(sorted(_SSL_KEYS))})"
        )
    context = ssl.create_default_context(cafile=option.get("ca_certs"))
    certfile = option.get("certfile")
    if certfile is not None:
        context.load_cert_chain(certfile, option.get("keyfile"))
    cert_reqs = option.get("cert_reqs", ssl.CERT_REQUIRED)
    check_hostname = option.get("check_hostname", cert_reqs != ssl.CERT_NONE)
    context.check_hostname = bool(check_hostname)
    context.verify_mode = ssl.VerifyMode(cert_reqs)
    server_hostname = option.get("server_hostname")
    if server_hostname is not None and not isinstance(server_hostname, str):
        raise ValueError(f"ssl: server_hostname must be a str, got {server_hostname!r}")
    # None (pyamqp's "the host of the URL in use", for failover) is the default here anyway.
    return context, server_hostname
