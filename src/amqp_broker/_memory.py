"""Flow control as RabbitMQ does it: a memory high watermark over the octets the broker holds.

The monitor counts messages as they enter and leave queues (ready, unacknowledged, stream
logs) and adds the connections' output buffers, which the transport samples. Above the
watermark the alarm is on: a connection that publishes is then blocked (``connection.blocked``,
its socket no longer read) until the alarm clears, when every blocked connection is told
``connection.unblocked`` and read again (see :mod:`._session`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BLOCKED_REASON", "DISK_REASON", "MemoryMonitor"]

logger: Final = logging.getLogger("amqp_broker")

#: The reason RabbitMQ gives in ``connection.blocked`` for the memory alarm.
BLOCKED_REASON: Final = "low on memory"
#: ... and for the free-disk alarm (``disk_free_limit``).
DISK_REASON: Final = "low on disk"


@final
class MemoryMonitor:
    """The octets the broker holds against its watermark, and the alarm.

    :param watermark: octets; None means no flow control.
    """

    __slots__ = (
        "_listeners",
        "_memory_alarmed",
        "alarmed",
        "disk_low",
        "held",
        "outbound",
        "watermark",
    )

    def __init__(self, watermark: int | None) -> None:
        self.watermark = watermark
        #: Octets of the messages in queues and stream logs, ready or unacknowledged.
        self.held = 0
        #: Octets waiting in the connections' output buffers, as last sampled.
        self.outbound = 0
        #: Whether an alarm is on (memory, or free disk): publishers are blocked.
        self.alarmed = False
        self._memory_alarmed = False
        #: Whether the free-disk alarm is on (:meth:`set_disk_low`).
        self.disk_low = False
        self._listeners: dict[Callable[[], None], None] = {}

    def __repr__(self) -> str:
        return (
            f"<MemoryMonitor held={self.held} outbound={self.outbound} "
            f"watermark={self.watermark} alarmed={self.alarmed}>"
        )

    @property
    def used(self) -> int:
        """Octets counted against the watermark."""
        return self.held + self.outbound

    def hold(self, octets: int) -> None:
        """A message of *octets* entered a queue (or a channel's unacknowledged set)."""
        self.held += octets
        watermark = self.watermark
        if (
            not self._memory_alarmed
            and watermark is not None
            and self.held + self.outbound > watermark
        ):
            self._raise()

    def release(self, octets: int) -> None:
        """A message of *octets* left the broker's care."""
        self.held -= octets
        if self._memory_alarmed and self.held + self.outbound <= (self.watermark or 0):
            self._clear()

    def sample_outbound(self, octets: int) -> None:
        """The connections' output buffers hold *octets* now."""
        self.outbound = octets
        watermark = self.watermark
        if watermark is None:
            return
        if not self._memory_alarmed and self.used > watermark:
            self._raise()
        elif self._memory_alarmed and self.used <= watermark:
            self._clear()

    def set_watermark(self, octets: int | None) -> None:
        """Change the watermark (like ``rabbitmqctl set_vm_memory_high_watermark``)."""
        self.watermark = octets
        if octets is None or self.used <= octets:
            if self._memory_alarmed:
                self._clear()
        elif not self._memory_alarmed:
            self._raise()

    @property
    def reason(self) -> str:
        """What ``connection.blocked`` says: RabbitMQ's text for the alarms that are on."""
        if self._memory_alarmed and self.disk_low:
            return f"{BLOCKED_REASON} & {DISK_REASON}"
        return DISK_REASON if self.disk_low else BLOCKED_REASON

    def set_disk_low(self, low: bool, free: int = 0) -> None:
        """The free space on the data directory's disk is below ``disk_free_limit`` (or not
        any more, with *free* octets free)."""
        if low == self.disk_low:
            return
        self.disk_low = low
        if low:
            logger.warning("disk alarm: %d octets free; publishers are blocked", free)
            self.alarmed = True
            return
        logger.warning("disk alarm cleared: %d octets free; publishers resume", free)
        if not self._memory_alarmed:
            self._unblock()

    def on_clear(self, listener: Callable[[], None]) -> None:
        """Call *listener* whenever the alarm clears (a blocked session unblocks)."""
        self._listeners[listener] = None

    def forget(self, listener: Callable[[], None]) -> None:
        """Stop calling *listener*."""
        self._listeners.pop(listener, None)

    def _raise(self) -> None:
        self._memory_alarmed = True
        self.alarmed = True
        logger.warning(
            "memory alarm: %d octets held over the watermark of %d; publishers are blocked",
            self.used,
            self.watermark,
        )

    def _clear(self) -> None:
        self._memory_alarmed = False
        logger.warning("memory alarm cleared: %d octets held; publishers resume", self.used)
        if not self.disk_low:
            self._unblock()

    def _unblock(self) -> None:
        self.alarmed = False
        for listener in list(self._listeners):
            listener()
