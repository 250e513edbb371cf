"""A socket pair that wakes a thread sleeping in ``select``/``poll``: :class:`Wakeup`."""

from __future__ import annotations

import contextlib
import socket
from typing import final

__all__ = ["Wakeup"]


@final
class Wakeup:
    """Wakes the thread that polls :meth:`fileno` (the I/O thread, or an application thread
    holding the read role). :meth:`set` writes one octet unless one is ``pending`` already;
    the sleeper clears ``pending`` (under the lock its owner guards it with) before it looks
    again, and :meth:`drain`\\ s what was written."""

    __slots__ = ("_r", "_w", "pending")

    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self.pending = False

    def fileno(self) -> int:
        return self._r.fileno()

    def set(self) -> None:
        """Wake the sleeper, once until it clears ``pending``."""
        if not self.pending:
            self.pending = True
            self.nudge()

    def nudge(self) -> None:
        """Wake the sleeper without looking at ``pending`` (from a thread that does not hold
        the lock guarding it)."""
        # OSError: the pair is full (the sleeper is woken anyway) or closed.
        with contextlib.suppress(OSError):
            self._w.send(b"\0")

    def drain(self) -> None:
        """Take what :meth:`set` and :meth:`nudge` wrote."""
        with contextlib.suppress(OSError):
            self._r.recv(4096)

    def close(self) -> None:
        self._r.close()
        self._w.close()
