"""Connection parameters for the client adapters, and RabbitMQ-style AMQP URLs.

URL handling follows RabbitMQ's URI spec (https://www.rabbitmq.com/docs/uri-spec) and its query
parameters (https://www.rabbitmq.com/docs/uri-query-parameters), with one deliberate difference:
``amqp://host/`` means the virtual host ``/`` (as in pika and aio-pika), not the empty virtual
host, because that URL is what nearly everyone writes for a default broker.
"""

from __future__ import annotations

import math
import ssl
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, final
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

from .. import ConnectionConfig, MessageReceived, ProtocolVersion
from ._versions import ADAPTER_VERSIONS, ClientProtocol, client_protocol

if TYPE_CHECKING:
    from .. import FieldTable

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_URL",
    "AuthMechanism",
    "ConnectionParameters",
    "redact_url",
]

#: The largest message body accepted from the broker unless told otherwise (128 MiB, the
#: core's default): a larger one closes the connection with 506 before anything is buffered.
DEFAULT_MAX_MESSAGE_SIZE: Final = 128 * 1024 * 1024

#: The URL used when none is given: a local RabbitMQ with its default user.
DEFAULT_URL: Final = "amqp://guest:guest@127.0.0.1:5672/"

AuthMechanism: TypeAlias = Literal["PLAIN", "AMQPLAIN", "EXTERNAL"]
_MECHANISMS: Final[tuple[AuthMechanism, ...]] = ("PLAIN", "AMQPLAIN", "EXTERNAL")
_MECHANISM_NAMES: Final[dict[str, AuthMechanism]] = {name: name for name in _MECHANISMS}

_QUERY_KEYS: Final = frozenset(
    {
        "heartbeat",
        "frame_max",
        "channel_max",
        "connection_timeout",
        "auth_mechanism",
        "cacertfile",
        "certfile",
        "keyfile",
        "verify",
        "server_name_indication",
        "name",
        "protocol",
        "max_message_size",
    }
)
_TLS_KEYS: Final = ("cacertfile", "certfile", "keyfile", "verify", "server_name_indication")


def _default_port(params: ConnectionParameters) -> int:
    return 5671 if params.tls else 5672


def _check_port(
    instance: ConnectionParameters, attribute: attrs.Attribute[int], value: int
) -> None:
    if type(value) is not int or not 1 <= value <= 0xFFFF:
        raise ValueError(f"port must be in 1..65535, not {value!r}")


def _check_mechanism(
    instance: ConnectionParameters, attribute: attrs.Attribute[str], value: str
) -> None:
    if value not in _MECHANISMS:
        raise ValueError(f"auth_mechanism must be one of {', '.join(_MECHANISMS)}, not {value!r}")


def _protocol(value: str | ProtocolVersion) -> ClientProtocol:
    return client_protocol(value)


def _check_timeout(
    instance: ConnectionParameters, attribute: attrs.Attribute[float], value: float
) -> None:
    if type(value) not in (int, float) or not 0 < value < math.inf:
        raise ValueError(f"connection_timeout must be a positive number of seconds, not {value!r}")


@final
@attrs.frozen(kw_only=True)
class ConnectionParameters:
    """Where and how to connect. Build it directly or with :meth:`from_url`.

    ``heartbeat`` None accepts the broker's proposal; ``frame_max``/``channel_max`` None
    accept the broker's limits. ``connection_timeout`` (seconds) bounds the TCP connect, the
    TLS handshake and the AMQP handshake together. ``tls`` selects ``amqps``; the default
    port follows it (5671, else 5672). ``server_hostname`` is the name checked against the
    broker's certificate and sent as SNI (default: ``host``). ``protocol`` is the AMQP version
    spoken: ``"0-9-1"`` (default), ``"0-9"``, ``"0-8"``, or ``"auto"`` (0-9-1 first, then what
    the server answers, see :doc:`/versions`). ``max_message_size`` is the inbound cap: a
    delivered (or returned, or fetched) message whose content header announces a larger body
    ends the connection with 506 (resource-error) before any of it is buffered; default
    :data:`DEFAULT_MAX_MESSAGE_SIZE` (128 MiB). The password never appears in a ``repr``.
    """

    host: str = "127.0.0.1"
    tls: bool = False
    port: int = attrs.field(
        default=attrs.Factory(_default_port, takes_self=True), validator=_check_port
    )
    virtual_host: str = "/"
    username: str = "guest"
    password: str = attrs.field(default="guest", repr=False)
    auth_mechanism: AuthMechanism = attrs.field(default="PLAIN", validator=_check_mechanism)
    heartbeat: int | None = None
    frame_max: int | None = None
    channel_max: int | None = None
    connection_timeout: float = attrs.field(default=10.0, validator=_check_timeout)
    connection_name: str | None = None
    client_properties: FieldTable = attrs.field(factory=dict, hash=False)
    locale: str = "en_US"
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = True
    server_hostname: str | None = None
    protocol: ClientProtocol = attrs.field(default="0-9-1", converter=_protocol)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE

    def __attrs_post_init__(self) -> None:
        self.to_config()  # the core validates heartbeat, frame_max and channel_max

    @classmethod
    def from_url(cls, url: str) -> ConnectionParameters:
        """Parse ``amqp://user:password@host:port/vhost?query`` (or ``amqps://``).

        User, password, host and virtual host are percent-decoded (``%2F`` is ``/``); an
        absent part keeps its default (guest/guest, 127.0.0.1, 5672 or 5671, ``/``); an IPv6
        host is written in brackets (``amqp://[::1]``). Query parameters: ``heartbeat``,
        ``frame_max``, ``channel_max`` (integers), ``connection_timeout`` (milliseconds, as in
        RabbitMQ's URI query spec), ``auth_mechanism`` (plain, amqplain, external), ``name``
        (the connection name), ``protocol`` (``0-9-1``, ``0-9``, ``0-8``, ``0-10`` or
        ``auto``), ``max_message_size`` (octets, the inbound cap) and, for ``amqps`` only,
        ``cacertfile``, ``certfile``, ``keyfile``, ``verify`` (verify_peer or verify_none),
        ``server_name_indication``.

        :raises ValueError: a malformed URL, an unknown or repeated query parameter, or a
            bad value; the message names the part.
        """
        if not isinstance(url, str):
            raise TypeError(f"url must be a str, not {type(url).__name__}")
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # e.g. an unbalanced "[" in the host
            raise ValueError(f"url: {exc}") from None
        scheme = parts.scheme.lower()
        if scheme not in ("amqp", "amqps"):
            raise ValueError(f"url: the scheme must be amqp or amqps, not {parts.scheme!r}")
        if parts.fragment:
            raise ValueError("url: a fragment ('#...') has no meaning in an AMQP URL")
        tls = scheme == "amqps"
        kwargs: dict[str, str | int | float | bool | None] = {"tls": tls}
        _, at, _ = parts.netloc.rpartition("@")
        if at:
            kwargs["username"] = unquote(parts.username or "")
            if parts.password is not None:
                kwargs["password"] = unquote(parts.password)
        if parts.hostname:
            kwargs["host"] = unquote(parts.hostname)
        try:
            port = parts.port
        except ValueError:
            raise ValueError(
                f"port: not a port number in {_netloc_without_password(url)!r}"
            ) from None
        if port is not None:
            if port == 0:
                raise ValueError("port must be in 1..65535, not 0")
            kwargs["port"] = port
        kwargs["virtual_host"] = _virtual_host(parts.path)
        kwargs.update(_query(parts.query, tls=tls))
        return cls._build(kwargs)

    @classmethod
    def _build(cls, kwargs: dict[str, str | int | float | bool | None]) -> ConnectionParameters:
        # Typed per field so mypy keeps checking the constructor call.
        def text(name: str, default: str) -> str:
            value = kwargs.get(name, default)
            assert isinstance(value, str)
            return value

        def number(name: str) -> int | None:
            value = kwargs.get(name)
            assert value is None or isinstance(value, int)
            return value

        def optional_text(name: str) -> str | None:
            value = kwargs.get(name)
            assert value is None or isinstance(value, str)
            return value

        tls = kwargs["tls"] is True
        port = number("port")
        timeout = kwargs.get("connection_timeout", 10.0)
        assert isinstance(timeout, float)
        mechanism = _MECHANISM_NAMES[text("auth_mechanism", "PLAIN")]
        return cls(
            host=text("host", "127.0.0.1"),
            tls=tls,
            port=(5671 if tls else 5672) if port is None else port,
            virtual_host=text("virtual_host", "/"),
            username=text("username", "guest"),
            password=text("password", "guest"),
            auth_mechanism=mechanism,
            heartbeat=number("heartbeat"),
            frame_max=number("frame_max"),
            channel_max=number("channel_max"),
            connection_timeout=timeout,
            connection_name=optional_text("name"),
            cafile=optional_text("cacertfile"),
            certfile=optional_text("certfile"),
            keyfile=optional_text("keyfile"),
            verify=kwargs.get("verify", True) is True,
            server_hostname=optional_text("server_name_indication"),
            protocol=text("protocol", "0-9-1"),
            max_message_size=_or_default(number("max_message_size"), DEFAULT_MAX_MESSAGE_SIZE),
        )

    def to_config(self, message_class: type[MessageReceived] = MessageReceived) -> ConnectionConfig:
        """The core's :class:`~amqp_sansio.ConnectionConfig` for these parameters (``"auto"``
        is its first attempt, 0-9-1: ``connect()`` runs the rest of the loop); the adapters
        pass their message class as *message_class* (see
        :attr:`~amqp_sansio.ConnectionConfig.message_class`)."""
        # 0-10 has its own core and config (amqp_sansio.v0_10.client.config_from): the
        # common settings are still checked here, by 0-9-1's
        protocol = ADAPTER_VERSIONS[0] if self.protocol in ("auto", "0-10") else self.protocol
        return ConnectionConfig(
            protocol=protocol,
            username=self.username,
            password=self.password,
            sasl_mechanism=self.auth_mechanism,
            sasl_response=b"" if self.auth_mechanism == "EXTERNAL" else None,
            virtual_host=self.virtual_host,
            client_properties=self.client_properties,
            connection_name=self.connection_name,
            locale=self.locale,
            channel_max=self.channel_max,
            frame_max=self.frame_max,
            heartbeat=self.heartbeat,
            max_message_size=self.max_message_size,
            message_class=message_class,
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context for ``tls=True`` (None otherwise): the system's trust store or
        ``cafile``, the client certificate from ``certfile``/``keyfile`` (for EXTERNAL), and
        no peer verification when ``verify`` is False."""
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        if self.certfile is not None:
            context.load_cert_chain(self.certfile, self.keyfile)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    @property
    def tls_server_hostname(self) -> str:
        """The name to send as SNI and check the certificate against."""
        return self.host if self.server_hostname is None else self.server_hostname

    @property
    def address(self) -> str:
        """``host:port`` for messages (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _or_default(value: int | None, default: int) -> int:
    return default if value is None else value


def redact_url(url: str) -> str:
    """*url* with its password replaced by ``***``, for reprs, logs and events: no secret is
    ever shown (``amqp://guest:***@host/``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return parts._replace(netloc=f"{name}:***@{host}").geturl()


def _netloc_without_password(url: str) -> str:
    netloc = urlsplit(url).netloc
    return netloc.rpartition("@")[2]


def _virtual_host(path: str) -> str:
    if path in ("", "/"):
        return "/"
    segment = path[1:]
    if "/" in segment:
        raise ValueError(
            f"virtual_host: the path {path!r} has more than one segment; write a '/' inside "
            "the virtual host as %2F"
        )
    return unquote(segment)


def _integer(name: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value, 10)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"{name}: {number} is outside {low}..{high}")
    return number


def _query(query: str, *, tls: bool) -> dict[str, str | int | float | bool | None]:
    out: dict[str, str | int | float | bool | None] = {}
    seen: set[str] = set()
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"query: malformed query string {query!r}") from None
    for key, value in pairs:
        if key not in _QUERY_KEYS:
            known = ", ".join(sorted(_QUERY_KEYS))
            raise ValueError(f"{key}: unknown query parameter (known: {known})")
        if key in seen:
            raise ValueError(f"{key}: query parameter given more than once")
        seen.add(key)
        if key in _TLS_KEYS and not tls:
            raise ValueError(f"{key}: a TLS parameter needs an amqps:// URL")
        if key == "heartbeat":
            out[key] = _integer(key, value, 0, 0xFFFF)
        elif key == "frame_max":
            out[key] = _integer(key, value, 0, 0xFFFF_FFFF)
        elif key == "channel_max":
            out[key] = _integer(key, value, 0, 0xFFFF)
        elif key == "max_message_size":
            out[key] = _integer(key, value, 0, 2**64 - 1)
        elif key == "connection_timeout":
            millis = _integer(key, value, 1, 2**31)
            out[key] = millis / 1000.0
        elif key == "auth_mechanism":
            mechanism = value.upper()
            if mechanism not in _MECHANISMS:
                raise ValueError(
                    f"auth_mechanism: expected plain, amqplain or external, got {value!r}"
                )
            out[key] = mechanism
        elif key == "protocol":
            out[key] = client_protocol(value)
        elif key == "verify":
            if value not in ("verify_peer", "verify_none"):
                raise ValueError(f"verify: expected verify_peer or verify_none, got {value!r}")
            out[key] = value == "verify_peer"
        elif not value:
            raise ValueError(f"{key}: empty value")
        else:
            out[key] = value
    return out
