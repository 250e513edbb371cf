"""What a broker can be told: limits, timeouts and flow control, with RabbitMQ's defaults."""

from __future__ import annotations

import os
from importlib import metadata
from typing import TYPE_CHECKING, Final, final

import attrs

from amqp_sansio import ProtocolVersion

from ._versions import SERVED_VERSIONS

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_sansio import FieldTable

__all__ = ["BrokerOptions", "total_memory"]

_MIB: Final = 1024 * 1024


def total_memory() -> int:
    """This machine's RAM in octets (what a relative watermark is a fraction of)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # pragma: no cover - every supported platform has both
        return 1024 * _MIB


def _package_version() -> str:
    try:
        return metadata.version("amqp-sansio")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0.0.0"


def _version(value: object, what: str) -> ProtocolVersion:
    if isinstance(value, ProtocolVersion):
        return value
    try:
        return ProtocolVersion(value)
    except ValueError:
        names = ", ".join(
            repr(v.value) for v in ProtocolVersion if v is not ProtocolVersion.UNKNOWN
        )
        raise ValueError(f"{what}: unknown protocol version {value!r} (one of {names})") from None


def _versions(value: object) -> tuple[ProtocolVersion, ...]:
    names = (value,) if isinstance(value, str | ProtocolVersion) else value
    if not isinstance(names, tuple | list):
        raise TypeError(f"protocols must be a sequence of version names, not {value!r}")
    versions = tuple(_version(name, "protocols") for name in names)
    if not versions:
        raise ValueError("protocols must name at least one version")
    if len(set(versions)) != len(versions):
        raise ValueError(f"protocols names a version twice: {[v.value for v in versions]}")
    for version in versions:
        if version not in SERVED_VERSIONS:
            served = ", ".join(repr(v.value) for v in SERVED_VERSIONS)
            raise ValueError(f"protocols: the broker serves {served}, not {version.value!r}")
    return versions


def _header_0_9(value: object) -> ProtocolVersion:
    version = _version(value, "header_0_9")
    if version not in (ProtocolVersion.AMQP_0_9_1, ProtocolVersion.AMQP_0_9):
        raise ValueError(f"header_0_9 is '0-9-1' or '0-9', not {value!r}")
    return version


def _text(name: str) -> Callable[[object, object, object], None]:
    def check(instance: object, attribute: object, value: object) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, not {value!r}")

    return check


@final
@attrs.frozen(kw_only=True)
class BrokerOptions:
    """Limits, timeouts and flow control of one broker; every field has RabbitMQ 3.10's
    default where RabbitMQ has the setting.

    Times are in seconds, sizes in octets.
    """

    #: Seconds a client has, from the TCP accept to ``connection.open-ok``, before the socket
    #: is closed without a word (RabbitMQ's ``handshake_timeout``, 10 s). None: no limit.
    handshake_timeout: float | None = 10.0
    #: Open connections the broker accepts at once (RabbitMQ's ``connection_max``): beyond it
    #: the listener stops accepting until one closes, as RabbitMQ's does. None: no limit.
    max_connections: int | None = None
    #: Open connections per virtual host (RabbitMQ's ``max-connections`` vhost limit); one more
    #: is refused at ``connection.open`` with 530. A vhost not named here has no limit.
    vhost_max_connections: dict[str, int] = attrs.field(factory=dict)
    #: Channels one connection may have open (proposed in ``connection.tune``); one more is a
    #: 530. RabbitMQ's default is 2047.
    channel_max: int = 2047
    #: The memory high watermark as a fraction of this machine's RAM (RabbitMQ's
    #: ``vm_memory_high_watermark.relative``, 0.4), over the octets the broker holds: messages
    #: in queues (ready and unacknowledged) and the connections' output buffers.
    memory_high_watermark: float = 0.4
    #: The watermark in octets (RabbitMQ's ``vm_memory_high_watermark.absolute``); wins over
    #: the relative one when set.
    memory_high_watermark_bytes: int | None = None
    #: Octets of output one connection may have waiting to be written: a consumer whose socket
    #: is not read is sent nothing more; its messages stay in their queues.
    outbound_limit: int = _MIB
    #: Octets of unfinished 0-10 segments (bodies whose last frame has not come) one
    #: connection may hold on all its sessions together; past it the connection is closed
    #: with 320. A 0-10 body announces no size, so this, not a header, bounds it; the octets
    #: also count against the memory watermark while they arrive.
    unfinished_limit: int = 128 * _MIB
    #: Seconds a delivery may stay unacknowledged before its channel is closed with 406
    #: (RabbitMQ's ``consumer_timeout``, 30 minutes). None: no limit.
    consumer_timeout: float | None = 1800.0
    #: The delivery limit of a quorum queue declared without ``x-delivery-limit``: a message
    #: returned (rejected, nacked with requeue, left unacknowledged by a closed channel) more
    #: often is dead-lettered or dropped. None, RabbitMQ 3.10's default: no limit (RabbitMQ
    #: 4.0's is 20).
    quorum_delivery_limit: int | None = None
    #: Seconds the broker waits for ``close-ok`` after it sent ``connection.close`` (a refusal,
    #: or shutdown), and for the client to close its socket after the broker answered its
    #: ``connection.close`` (RabbitMQ waits 30 s; the client's input is read and discarded).
    close_timeout: float = 5.0
    #: Seconds between two looks at the output buffers' size for the watermark (queued
    #: messages are counted as they come and go).
    memory_check_interval: float = 0.25
    #: With a data directory (``--data-dir``): octets that must stay free on its disk
    #: (RabbitMQ's ``disk_free_limit``, 50 MB); below it publishers are blocked as by the
    #: memory alarm (``connection.blocked``, "low on disk") instead of writes failing. Checked
    #: every ``memory_check_interval``. None: no disk alarm.
    disk_free_limit: int | None = 50_000_000
    #: The heartbeat interval proposed in ``connection.tune``, in seconds (RabbitMQ's
    #: ``heartbeat``, 60); 0 proposes none (qpid-python's 0-8 client can't read heartbeat
    #: frames).
    heartbeat: int = 60
    #: The protocol versions served on the broker's ports, most preferred first: a client's
    #: header picks one; any other header is answered with the first one's header and the
    #: connection closed (see :doc:`/versions`). Names or :class:`~amqp_sansio.ProtocolVersion`.
    protocols: tuple[ProtocolVersion, ...] = attrs.field(
        default=(
            ProtocolVersion.AMQP_0_9_1,
            ProtocolVersion.AMQP_0_9,
            ProtocolVersion.AMQP_0_8,
            ProtocolVersion.AMQP_0_10,
        ),
        converter=_versions,
    )
    #: How ``AMQP 1 1 0 9`` is read when both 0-9-1 and 0-9 are served: as 0-9-1 (RabbitMQ's
    #: reading; aioamqp and async_amqp speak 0-9-1 under it) or as 0-9 (qpid-python's 0-9).
    header_0_9: ProtocolVersion = attrs.field(
        default=ProtocolVersion.AMQP_0_9_1, converter=_header_0_9
    )

    #: What ``connection.start``'s server properties call the broker: ``product`` and
    #: ``version``. RabbitMQ's by default, and the version whose behaviour the broker follows,
    #: because clients read them: amqplib's tests expect RabbitMQ's product, aioamqp parses
    #: the version to choose its behaviour (``0.1.0.dev0`` fails it). The broker's own name
    #: and version are in ``information``, Python's in ``platform``. (0-10 connections say
    #: ``amqp_broker``.)
    server_product: str = attrs.field(default="RabbitMQ", validator=_text("server_product"))
    #: See :attr:`server_product`.
    server_version: str = attrs.field(default="3.10.8", validator=_text("server_version"))

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(BrokerOptions):
            value = getattr(self, field.name)
            if field.name != "heartbeat" and isinstance(value, int | float) and value <= 0:
                raise ValueError(f"{field.name} must be positive, not {value!r}")
        if type(self.heartbeat) is not int or not 0 <= self.heartbeat <= 0xFFFF:
            raise ValueError(f"heartbeat must be 0..65535, not {self.heartbeat!r}")
        if not 1 <= self.channel_max <= 0xFFFF:
            raise ValueError(f"channel_max must be 1..65535, not {self.channel_max!r}")

    @property
    def server_properties(self) -> FieldTable:
        """What ``connection.start`` says about the broker, over the core's own properties
        (``platform``, ``capabilities``): :attr:`server_product` and :attr:`server_version`,
        and the broker's own identity in ``information``."""
        return {
            "product": self.server_product,
            "version": self.server_version,
            "information": f"amqp_broker {_package_version()}, the in-memory broker of "
            f"amqp-sansio, behaving as {self.server_product} {self.server_version}",
        }

    @property
    def watermark(self) -> int:
        """The memory high watermark in octets."""
        if self.memory_high_watermark_bytes is not None:
            return self.memory_high_watermark_bytes
        return int(total_memory() * self.memory_high_watermark)
