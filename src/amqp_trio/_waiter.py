"""The waiter a Trio call sleeps on while the reader task routes its reply (the router's
:class:`~amqp_sansio.client.Waiter`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import outcome
import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from amqp_sansio.client import Reply

__all__ = ["Waiter"]


@final
class Waiter:
    """One request's outcome, set by the router in the reader task.

    The caller parks on its own task, and the router reschedules that task with the outcome:
    one wake-up that carries the reply, with no event to allocate and nothing to check again
    once awake.

    A caller that leaves :meth:`wait` early (cancelled, or the flush failed) abandons it: the
    router then drops the late reply (the core still matches it to its request) and undoes what
    it would have started.
    """

    __slots__ = ("_abandoned", "_done", "_outcome", "_task")

    def __init__(self) -> None:
        self._done = False
        self._abandoned = False
        # The parked caller; None until it parks and again once rescheduled or cancelled.
        self._task: trio.lowlevel.Task | None = None
        # The outcome set before the caller parked (while its flush waited).
        self._outcome: outcome.Outcome[Reply] | None = None

    def done(self) -> bool:
        """Set, or abandoned by its caller."""
        return self._done or self._abandoned

    def set_result(self, result: Reply, /) -> None:
        self._settle(outcome.Value(result))

    def set_exception(self, exception: BaseException, /) -> None:
        self._settle(outcome.Error(exception))

    def _settle(self, result: outcome.Outcome[Reply]) -> None:
        self._done = True
        task = self._task
        if task is None:
            self._outcome = result
        else:
            self._task = None
            trio.lowlevel.reschedule(task, result)

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        # Cancelled while parked: the router sees done() and drops the late reply.
        self._task = None
        self._abandoned = True
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait(self, flush: Callable[[], Awaitable[None]]) -> Reply:
        """Flush the request out, then wait for the reply (raised when it is an error)."""
        try:
            await flush()
            if self._outcome is None:
                self._task = trio.lowlevel.current_task()
                reply: Reply = await trio.lowlevel.wait_task_rescheduled(self._abort)
                return reply
            await trio.lowlevel.checkpoint()
        except BaseException:
            if not self._done:
                self._abandoned = True
            raise
        return self._outcome.unwrap()
