"""What a :class:`~amqp_sansio.Connection` proposes and accepts, and the limits on it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import attrs

from ._events import MessageReceived
from ._frames import ProtocolVersion
from ._generated.spec_0_9_1 import FRAME_MIN_SIZE
from ._negotiation import version_of
from ._protocol import AMQP_0_8, AMQP_0_9, AMQP_0_9_1, ProtocolSpec, spec_for

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._table import FieldTable

__all__ = [
    "CHANNEL_MAX_LIMIT",
    "FRAME_MAX_LIMIT",
    "SERVER_CHANNEL_MAX",
    "SERVER_FRAME_MAX",
    "SERVER_HEARTBEAT",
    "ConnectionConfig",
]

#: The highest channel id the wire can carry (a short).
CHANNEL_MAX_LIMIT: Final = 0xFFFF
#: The largest frame the wire can describe (a long).
FRAME_MAX_LIMIT: Final = 0xFFFF_FFFF
# What the server role proposes when its config leaves a limit at None: RabbitMQ's defaults.
SERVER_CHANNEL_MAX: Final = 2047
SERVER_FRAME_MAX: Final = 131072
SERVER_HEARTBEAT: Final = 60


def _check(name: str, value: int | None, low: int, high: int, *, zero: bool = False) -> None:
    if value is None or (zero and value == 0):
        return
    if type(value) is not int or not low <= value <= high:
        allowed = f"{low}..{high}" + (" or 0" if zero else "")
        raise ValueError(f"{name} must be in {allowed}, not {value!r}")


def _protocols(
    value: Iterable[ProtocolSpec | ProtocolVersion | str] | str,
) -> tuple[ProtocolSpec, ...]:
    if isinstance(value, str):  # one name, not its characters
        value = (value,)
    specs = tuple(spec_for(p) for p in value)
    if not specs:
        raise ValueError("protocols must name at least one version")
    versions = [spec.version for spec in specs]
    if len(set(versions)) != len(versions):
        raise ValueError(f"protocols names a version twice: {[v.value for v in versions]}")
    return specs


def _header_0_9(value: ProtocolVersion | str) -> ProtocolVersion:
    version = version_of(value)
    if version not in (ProtocolVersion.AMQP_0_9_1, ProtocolVersion.AMQP_0_9):
        raise ValueError(f"header_0_9 is '0-9-1' or '0-9', not {version.value!r}")
    return version


@final
@attrs.frozen(kw_only=True)
class ConnectionConfig:
    """What a :class:`Connection` proposes and accepts. Never shows a credential in its repr.

    Client role: ``username``/``password`` (PLAIN or AMQPLAIN), or ``sasl_mechanism`` with a
    ready ``sasl_response`` (EXTERNAL: usually ``b""``); ``virtual_host``; extra
    ``client_properties`` (merged over product, version, platform, the capabilities table and
    ``connection_name``); ``locale``.

    Both roles: ``channel_max``, ``frame_max``, ``heartbeat`` (None: the role's default; the
    client's default accepts the server's proposal, the server proposes 2047, 131072, 60 like
    RabbitMQ). A client ``heartbeat`` of 0 turns heartbeats off, as in pika and RabbitMQ's
    clients; any other value negotiates down to the lower non-zero one.

    ``max_message_size``: a content header announcing more is a 506 before anything is
    buffered. ``chunk_threshold`` (None: bodies always arrive whole; otherwise bodies larger
    than it arrive as chunk events). ``body_view_threshold`` (None, the default: every body is
    ``bytes``): a body (or chunk) of at least this many octets that arrived in one body frame
    within one read is handed out as a read-only ``memoryview`` of the received octets instead
    of a copy; each such view keeps its whole read (up to what the adapter asks per ``recv``)
    alive until it is released. For large bodies written on or parsed in place; see
    :doc:`/codec`. ``message_class`` (default :class:`MessageReceived`): the subclass of
    :class:`MessageReceived` every whole message is built as, with only the event's fields set;
    the client layer's adapters pass their message class, so a delivery is one object from the
    core to the application.

    Server role: extra ``server_properties`` (merged over product, version, platform and the
    capabilities table, as ``client_properties`` are), ``mechanisms``, ``locales``.

    The protocol version: ``protocol`` is what the client role speaks, ``"0-9-1"`` (default),
    ``"0-9"`` or ``"0-8"`` (or a :class:`ProtocolVersion`, or a :class:`ProtocolSpec` for a
    method table of one's own); it chooses the header the client sends and the tables it speaks.
    ``protocols`` is what the server role serves, most preferred first (default 0-9-1, 0-9,
    0-8): it binds itself to the version the client's header asks for, and answers any other
    header with the first one's header before closing. ``header_0_9`` says how the server reads
    ``AMQP 1 1 0 9`` when ``protocols`` holds both readings: as ``"0-9-1"`` (default, RabbitMQ's
    reading: aioamqp and async_amqp speak 0-9-1 under it) or as ``"0-9"`` (qpid-python speaks
    0-9 under it); a server of only one of them serves that one. See :doc:`/versions`.
    """

    username: str = "guest"
    password: str = attrs.field(default="guest", repr=False)
    sasl_mechanism: str = "PLAIN"
    sasl_response: bytes | None = attrs.field(default=None, repr=False)
    virtual_host: str = "/"
    client_properties: FieldTable = attrs.field(factory=dict)
    connection_name: str | None = None
    locale: str = "en_US"
    channel_max: int | None = None
    frame_max: int | None = None
    heartbeat: int | None = None
    max_message_size: int = 128 * 1024 * 1024
    chunk_threshold: int | None = None
    body_view_threshold: int | None = None
    server_properties: FieldTable | None = None
    mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN")
    locales: tuple[str, ...] = ("en_US",)
    protocol: ProtocolSpec = attrs.field(default=AMQP_0_9_1, converter=spec_for)
    protocols: tuple[ProtocolSpec, ...] = attrs.field(
        default=(AMQP_0_9_1, AMQP_0_9, AMQP_0_8), converter=_protocols
    )
    header_0_9: ProtocolVersion = attrs.field(
        default=ProtocolVersion.AMQP_0_9_1, converter=_header_0_9
    )
    message_class: type[MessageReceived] = MessageReceived

    def __attrs_post_init__(self) -> None:
        _check("channel_max", self.channel_max, 1, CHANNEL_MAX_LIMIT, zero=True)
        _check("frame_max", self.frame_max, FRAME_MIN_SIZE, FRAME_MAX_LIMIT, zero=True)
        _check("heartbeat", self.heartbeat, 0, 0xFFFF)
        _check("max_message_size", self.max_message_size, 0, 2**64 - 1)
        _check("chunk_threshold", self.chunk_threshold, 0, 2**64 - 1)
        _check("body_view_threshold", self.body_view_threshold, 0, 2**64 - 1)
        if not issubclass(self.message_class, MessageReceived):
            raise TypeError(
                f"message_class must be a subclass of MessageReceived, not {self.message_class!r}"
            )
