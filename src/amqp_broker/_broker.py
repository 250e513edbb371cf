"""The broker: the root of the model, with its virtual hosts, its clocks and the expiry timer.

The model does no I/O and reads no clock. Time comes in through the two callables given to
:class:`Broker` (monotonic seconds for TTLs, wall-clock seconds for ``x-death`` timestamps).
Expiry is checked whenever a queue is read and at :meth:`Broker.handle_timer`, which the
transport calls at :meth:`Broker.next_deadline`.

Import order inside the model, one way only: ``_errors``, ``_fields``, ``_message``,
``_clock`` -> ``_routing`` -> ``_queues`` -> ``_deadletter`` -> ``_vhost`` -> ``_channel`` ->
``_broker``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, final

from ._channel import ModelConnection
from ._clock import ModelClock
from ._vhost import VirtualHost

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._channel import DeliverySink, ReplyConsumers

__all__ = ["Broker"]


@final
class Broker:
    """The root of the model: virtual hosts and the message clock.

    :param clock: monotonic seconds, for TTLs (``trio.current_time``, ``time.monotonic``,
        or a test's fake).
    :param wall_clock: seconds since the epoch, for ``x-death`` timestamps.
    """

    def __init__(
        self,
        *,
        vhosts: Iterable[str] = ("/",),
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self._clock = ModelClock(clock, wall_clock)
        self.vhosts: dict[str, VirtualHost] = {}
        for name in vhosts:
            self.add_vhost(name)
        self._connection_ids = itertools.count(1)
        #: Direct reply-to: token -> the consuming channel and its consumer tag.
        self.reply_to: ReplyConsumers = {}

    @property
    def timer_changed(self) -> Callable[[], None]:
        """Called when a message with an expiry time was queued: the transport re-reads
        :meth:`next_deadline`."""
        return self._clock.timer_changed

    @timer_changed.setter
    def timer_changed(self, callback: Callable[[], None]) -> None:
        self._clock.timer_changed = callback

    def add_vhost(self, name: str) -> VirtualHost:
        """Create the virtual host *name* (with its predeclared exchanges) if it is new."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(name, self._clock)
        return vhost

    def connect(
        self, vhost: str, sink: DeliverySink, *, cancel_notify: bool = True
    ) -> ModelConnection:
        """A client connection opened on *vhost* (which must exist)."""
        return ModelConnection(
            self.vhosts[vhost], sink, next(self._connection_ids), cancel_notify, self.reply_to
        )

    # --- expiry -------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When the earliest message at the head of a queue expires (or an unused queue with
        ``x-expires`` goes), or None."""
        deadlines = [d for v in self.vhosts.values() if (d := v.next_deadline()) is not None]
        return min(deadlines, default=None)

    def handle_timer(self) -> None:
        """Expire (and dead-letter) every message whose time has come, at queue heads, and
        delete queues unused for their ``x-expires``."""
        now = self._clock.now()
        for vhost in list(self.vhosts.values()):
            vhost.handle_timer(now)
