"""Time as the model receives it: two clocks, a sequence counter and the expiry-timer hook,
shared by the broker and its virtual hosts."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ModelClock"]


def _nothing() -> None:
    return None


@final
class ModelClock:
    """The model's clocks (given by the transport, or a test's fakes) and the order of
    arrival of messages.

    :param now: monotonic seconds, for TTLs.
    :param wall: seconds since the epoch, for ``x-death`` timestamps.
    """

    __slots__ = ("_seq", "now", "timer_changed", "wall")

    def __init__(self, now: Callable[[], float], wall: Callable[[], float]) -> None:
        self.now = now
        self.wall = wall
        self._seq = itertools.count(1)
        #: Called when something got an expiry time: the transport re-reads the broker's
        #: ``next_deadline()``.
        self.timer_changed: Callable[[], None] = _nothing

    def next_seq(self) -> int:
        """A number greater than every one handed out before (message arrival order)."""
        return next(self._seq)

    def skip_to(self, seq: int) -> None:
        """Hand out numbers above *seq* from now on (messages recovered from the store)."""
        self._seq = itertools.count(max(seq + 1, next(self._seq)))
