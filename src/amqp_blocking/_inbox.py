"""One place to wait for the deliveries of several consumers: :class:`Inbox`."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, final

from amqp_sansio.client import ConsumerCancelledError

if TYPE_CHECKING:
    from amqp_sansio.client import AMQPError

    from ._channel import Consumer, Message
    from ._connection import Connection

__all__ = ["Inbox"]


@final
class Inbox:
    """The deliveries of several consumers, on any channels of any connections, in the order
    they arrived: ``ch.basic_consume(queue, inbox=inbox)`` for each, then :meth:`get` takes
    the next message from whichever consumer it came to (its ``consumer_tag`` and ``channel``
    say which). One thread waits here instead of one per consumer; thread-safe.

    A consumer's end is reported in its place among the messages: :meth:`get` raises
    :class:`~amqp_sansio.client.ConsumerCancelledError` (its ``consumer_tag`` names the
    consumer) after that consumer's earlier messages when the broker cancelled it, and the
    channel's or connection's error at once when that closed (its messages still waiting here
    are dropped: they can no longer be acknowledged, and the broker requeues them). A consumer
    cancelled or closed by the application just stops delivering.

    Messages wait here until taken, bounded by the channels' prefetch counts (``basic_qos``).
    While every consumer of the inbox is on one connection, :meth:`get` reads that connection's
    socket in its own thread when nobody else does, as a consumer's iteration does.
    """

    __slots__ = ("__weakref__", "_cond", "_connection", "_items", "_several", "_waiters")

    def __init__(self) -> None:
        self._items: deque[Message | AMQPError] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._waiters = 0
        # The connection of the consumers, while there is one (get() may read its socket).
        self._connection: Connection | None = None
        self._several = False

    def __repr__(self) -> str:
        return f"<amqp_blocking.Inbox {len(self._items)} waiting>"

    def __len__(self) -> int:
        """Messages (and consumer ends) waiting to be taken."""
        return len(self._items)

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message of any of the inbox's consumers; None after *timeout* seconds
        without one (``None``: wait as long as it takes; 0: only look).

        :raises ConsumerCancelledError: the broker cancelled one of the consumers.
        :raises ChannelClosedError: a consumer's channel was closed.
        :raises ConnectionClosedError: a consumer's connection was closed (also
            :class:`~amqp_sansio.client.ConnectionLostError` when it was lost).
        """
        items = self._items
        deadline = None
        follows: Connection | None = None
        if not items:
            deadline = None if timeout is None else time.monotonic() + timeout
            conn = None if self._several else self._connection
            if conn is not None:  # read its socket in this thread while nobody else does
                with conn._lock:
                    if conn._lead_locked(lambda: items or self._several, deadline) is None:
                        follows = conn
                        conn._followers += 1
        try:
            return self._take(deadline)
        finally:
            if follows is not None:
                with follows._lock:
                    follows._followers -= 1

    def _take(self, deadline: float | None) -> Message | None:
        items = self._items
        with self._cond:
            if not items:
                self._waiters += 1
                try:
                    while not items:
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            return None
                        self._cond.wait(remaining)
                finally:
                    self._waiters -= 1
            item = items.popleft()
        if isinstance(item, BaseException):
            raise item
        return item

    # --- from the consumers (the reading thread, its connection's lock held: must not block) -

    def _attach(self, connection: Connection) -> None:
        """A consumer on *connection* delivers here."""
        with self._cond:
            if self._connection is None:
                self._connection = connection
            elif self._connection is not connection and not self._several:
                self._several = True
                # A get() reading the first connection's socket stops: it would not see these.
                self._connection._wake_reader()

    def _put(self, message: Message) -> None:
        # Under the lock, unlike Consumer.deliver: consumers of several connections (several
        # I/O threads) append here, and a consumer's close takes its messages out.
        with self._cond:
            self._items.append(message)
            if self._waiters:
                self._cond.notify()

    def _end(self, consumer: Consumer, error: AMQPError) -> None:
        """*consumer* ended with *error*: after its messages for a broker cancel, else first
        and instead of them."""
        with self._cond:
            if isinstance(error, ConsumerCancelledError):
                self._items.append(error)
            else:
                self._drop_locked(consumer)
                self._items.appendleft(error)
            self._cond.notify()

    def _drop(self, consumer: Consumer) -> int:
        """Forget *consumer*'s messages not taken yet; returns how many."""
        with self._cond:
            return self._drop_locked(consumer)

    def _drop_locked(self, consumer: Consumer) -> int:
        kept = [item for item in self._items if not _belongs(item, consumer)]
        dropped = len(self._items) - len(kept)
        if dropped:
            self._items.clear()
            self._items.extend(kept)
        return dropped


def _belongs(item: Message | AMQPError, consumer: Consumer) -> bool:
    if isinstance(item, BaseException):
        return False
    return item.consumer_tag == consumer.consumer_tag and item._owner is consumer._channel
