"""An asyncio event loop on a virtual clock that jumps, like Trio's ``MockClock`` with autojump:
when no socket is ready and a timer is pending, the clock jumps to the timer instead of
sleeping, so heartbeat tests assert exact times and take no real time.

Sockets stay real: before a jump the loop waits a short real grace for input in flight (a
loopback write is readable at once, or within microseconds when the kernel defers it), so a
jump never overtakes bytes a peer in the same loop already wrote. Run the peer in the same
loop: a peer in another thread runs on the real clock and races the jumps.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import TYPE_CHECKING, Final, TypeVar, final

if TYPE_CHECKING:
    from collections.abc import Coroutine

__all__ = ["VirtualClockLoop", "run_on_virtual_clock"]

_T = TypeVar("_T")

#: Real seconds the loop waits for input in flight before it lets virtual time jump.
GRACE: Final = 0.05


@final
class _JumpingSelector(selectors.EpollSelector):
    """A selector whose waits with a timeout advance the virtual clock instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0

    # typeshed's SelectorKey has ``data: Any``, which disallow_any_explicit sees here.
    def select(  # type: ignore[explicit-any]
        self, timeout: float | None = None
    ) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        ready = super().select(GRACE if timeout is None else min(GRACE, timeout))
        if ready:
            return ready
        if timeout is None:
            return super().select(None)  # nothing scheduled: wait for a socket, as usual
        self.now += timeout
        return []


@final
class VirtualClockLoop(asyncio.SelectorEventLoop):
    """``time()`` is virtual: it starts at 1000.0 and moves only when the loop would sleep."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return float(self._jumping.now)


def run_on_virtual_clock(main: Coroutine[object, object, _T]) -> _T:
    """``asyncio.run`` for *main*, on a :class:`VirtualClockLoop`."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
