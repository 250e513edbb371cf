"""The waiter a Trio call sleeps on while the reader task routes its reply (the router's
:class:`~amqp_sansio.client.Waiter`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from amqp_sansio.client import Reply

__all__ = ["Waiter"]


@final
class Waiter:
    """One request's outcome, set by the router in the reader task.

    A caller that leaves :meth:`wait` early (cancelled, or the flush failed) abandons it: the
    router then drops the late reply (the core still matches it to its request) and undoes what
    it would have started.
    """

    __slots__ = ("_abandoned", "_done", "_error", "_event", "_result")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._done = False
        self._abandoned = False
        self._result: Reply = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """Set, or abandoned by its caller."""
        return self._done or self._abandoned

    def set_result(self, result: Reply, /) -> None:
        self._result = result
        self._done = True
        self._event.set()

    def set_exception(self, exception: BaseException, /) -> None:
        self._error = exception
        self._done = True
        self._event.set()

    async def wait(self, flush: Callable[[], Awaitable[None]]) -> Reply:
        """Flush the request out, then wait for the reply (raised when it is an error)."""
        try:
            await flush()
            await self._event.wait()
        except BaseException:
            self._abandoned = True
            raise
        if self._error is not None:
            raise self._error
        return self._result
