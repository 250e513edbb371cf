"""The thread-safe waiter a blocking call sleeps on while the I/O thread gets its reply."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from amqp_sansio.client import AMQPError, Reply

__all__ = ["Waiter"]


@final
class Waiter:
    """Set once (by the I/O thread), waited for by one caller with a timeout.

    A plain lock acquired at birth and released on completion: the cheapest primitive CPython
    has for "sleep until another thread says so". A caller that timed out simply stops
    waiting; the late result is stored and dropped with the waiter.
    """

    __slots__ = ("_abandoned", "_done", "_error", "_lock", "_result")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._done = False
        self._abandoned = False
        self._result: Reply = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """Set, or abandoned by a caller that timed out (the result would be dropped)."""
        return self._done or self._abandoned

    def abandon(self) -> None:
        """The caller stopped waiting (call with the connection lock held, after checking
        :meth:`done`): whoever routes replies now drops this one."""
        self._abandoned = True

    def set_result(self, result: Reply, /) -> None:
        self._result = result
        self._done = True
        self._lock.release()

    def set_exception(self, exception: BaseException, /) -> None:
        self._error = exception
        self._done = True
        self._lock.release()

    def settle(self, publish_number: int, error: AMQPError | None, /) -> None:
        """A publish in confirm mode ended (the confirm-sink form of a result)."""
        if self.done():
            return
        if error is None:
            self.set_result(None)
        else:
            self.set_exception(error)

    def wait(self, timeout: float | None, guard: threading.Lock) -> Reply:
        """The result; raises the exception it was given, or :class:`TimeoutError`.

        *guard* is the connection lock under which results are set: taken on a timeout, so a
        result that arrived at that very moment is returned rather than lost.
        """
        if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            with guard:
                if not self._done:
                    self._abandoned = True
                    raise TimeoutError(f"no reply within {timeout} s")
            self._lock.acquire()
        self._lock.release()  # a second wait() returns at once
        if self._error is not None:
            raise self._error
        return self._result
