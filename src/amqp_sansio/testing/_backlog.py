"""A workload for :func:`~amqp_sansio.testing.fault_sweep` that recovers the way users fail: a
queue with a backlog several times the consumer's prefetch, the prefetch in flight, a few
messages in the application's hands, publishers topping the backlog up with confirms.

It consumes through the client layer (:meth:`MemoryConnection.consume`), as an adapter does, so
a cut anywhere checks what recovery promises an application: every confirmed message is acked
at least once, a delivery of the live connection is never refused as stale, the broker holds
for the consumer exactly what the client buffered or the application holds (nothing leaked
holds a prefetch slot), and the backlog is consumed to the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from .._events import MethodReceived, PublishConfirmed, PublishNacked
from .._generated.spec_0_9_1 import (
    BasicProperties,
    BasicPublish,
    BasicQos,
    ConfirmSelect,
    QueueDeclare,
)
from ..client._recovery import StaleDeliveryError
from ._sweep import QueueProbe

if TYPE_CHECKING:
    from .._events import ConnectionLost, Event
    from .._method import Method
    from ..client._recovery import Recovered
    from ._sweep import MemoryConnection, MemoryConsumer, MemoryMessage

__all__ = ["BacklogConsume"]

_TAG: Final = "backlog.consumer"


@final
class BacklogConsume:
    """The backlog workload (see the module). *count* messages in all to *queue*, the first
    ``backlog * prefetch`` before the consumer starts; the application holds *held* messages
    and acks the oldest as it takes a new one, and each ack lets one more be published.

    :ivar violations: what broke an invariant while it ran (checked by :meth:`check`).
    """

    def __init__(
        self,
        *,
        queue: str = "sweep.backlog",
        prefetch: int = 5,
        backlog: int = 3,
        count: int = 60,
        held: int = 2,
    ) -> None:
        if count < (backlog + 1) * prefetch:
            raise ValueError("count must leave a backlog past the first prefetch")
        self.queue: Final = queue
        self.prefetch: Final = prefetch
        self.count: Final = count
        self.held_limit: Final = held
        self._initial = (backlog + 1) * prefetch
        self._setup: list[tuple[int, Method]] = []
        self._step = 0
        self._waiting = False
        self._publisher = 0
        self._consumer_channel = 0
        self.consumer: MemoryConsumer | None = None
        self._next_id = 0
        self._retry: list[int] = []
        self._outstanding: dict[int, int] = {}  # publish number -> message id
        self.confirmed: set[int] = set()
        self.acked: set[int] = set()
        self.held: list[MemoryMessage] = []
        self.stale_refused = 0
        self.checked = 0
        self.violations: list[str] = []
        self._server: QueueProbe | None = None

    def __repr__(self) -> str:
        return (
            f"<BacklogConsume {len(self.confirmed)}/{self.count} confirmed, "
            f"{len(self.acked)} acked>"
        )

    # --- the script ---------------------------------------------------------------------------

    def start(self, conn: MemoryConnection) -> None:
        self._server = conn.server if isinstance(conn.server, QueueProbe) else None
        self._publisher = conn.open_channel()
        self._consumer_channel = conn.open_channel()
        self._setup = [
            (self._publisher, ConfirmSelect()),
            (self._publisher, QueueDeclare(queue=self.queue, durable=True)),
            (self._consumer_channel, BasicQos(prefetch_count=self.prefetch)),
        ]
        self._advance(conn)

    def _advance(self, conn: MemoryConnection) -> None:
        if self._waiting or conn.is_lost:
            return
        if self._step < len(self._setup):
            channel, method = self._setup[self._step]
            conn.send(channel, method)
            self._waiting = True
            return
        self._publish(conn, self._initial)
        if self.consumer is None and len(self.confirmed) >= self._initial:
            self.consumer = conn.consume(self._consumer_channel, self.queue, _TAG)

    def _publish(self, conn: MemoryConnection, up_to: int) -> None:
        """Publish (again what was unknown first) until *up_to* ids were published."""
        while not conn.is_lost and (self._retry or self._next_id < min(up_to, self.count)):
            if self._retry:
                ident = self._retry.pop(0)
            else:
                ident = self._next_id
                self._next_id += 1
            number = conn.publish(
                self._publisher,
                BasicPublish(routing_key=self.queue),
                BasicProperties(message_id=str(ident), delivery_mode=2),
                b"%d" % ident,
            )
            assert number is not None
            self._outstanding[number] = ident

    def handle(self, conn: MemoryConnection, event: Event) -> None:
        if isinstance(event, MethodReceived) and event.request is not None:
            if self._step < len(self._setup):
                self._step += 1
                self._waiting = False
            self._advance(conn)
        elif isinstance(event, PublishConfirmed):
            for number in event.publish_numbers:
                ident = self._outstanding.pop(number, None)
                if ident is not None:
                    self.confirmed.add(ident)
            self._advance(conn)
        elif isinstance(event, PublishNacked):
            self.violations.append(f"nacked {event.publish_numbers}")
        self._take_one(conn)

    def _take_one(self, conn: MemoryConnection) -> bool:
        """The application: take one delivery, and ack the oldest held past its limit."""
        consumer = self.consumer
        if consumer is None or conn.is_lost:
            return False
        message = consumer.take()
        if message is None:
            while self.held and (self._drained(consumer)):
                self._ack(conn, self.held.pop(0))
            return False
        if message.epoch != conn.epoch:
            self.violations.append(f"handed a delivery of epoch {message.epoch} in {conn.epoch}")
        self.held.append(message)
        while len(self.held) > self.held_limit:
            self._ack(conn, self.held.pop(0))
        return True

    def _drained(self, consumer: MemoryConsumer) -> bool:
        # Nothing more will come: hand back what the application held.
        return not consumer.buffered and self._next_id >= self.count and not self._outstanding

    def _ack(self, conn: MemoryConnection, message: MemoryMessage) -> None:
        try:
            message.ack()
        except StaleDeliveryError:
            self.stale_refused += 1
            if message.epoch == conn.epoch:
                self.violations.append(f"delivery {message.delivery_tag} of the live connection")
            return
        self.acked.add(int(message.body))
        self._publish(conn, len(self.acked) + self._initial)

    def idle(self, conn: MemoryConnection) -> bool:
        self._check_accounts(conn)
        if self._take_one(conn):
            return True
        consumer = self.consumer
        if self.held and consumer is not None and self._drained(consumer):
            while self.held:
                self._ack(conn, self.held.pop(0))
            return True
        return bool(conn.core.outbound_size)

    def lost(self, conn: MemoryConnection, event: ConnectionLost) -> None:
        # Their outcome is unknown: publish them again (at least once).
        self._retry = sorted(self._outstanding.values()) + self._retry
        self._outstanding.clear()
        self._waiting = False

    def recovered(self, conn: MemoryConnection, recovered: Recovered) -> None:
        self._server = conn.server if isinstance(conn.server, QueueProbe) else None
        # What the application held came on the lost connection: settling it is refused.
        held, self.held = self.held, []
        for message in held:
            self._ack(conn, message)
        if self.consumer is not None and not self.consumer.started:
            self.consumer = None  # its consume-ok never came: it was not restored; again
        self._advance(conn)

    def _check_accounts(self, conn: MemoryConnection) -> None:
        """With the link quiet: the broker holds for the consumer exactly what the client
        buffered and the application holds of the live connection."""
        server = conn.server
        consumer = self.consumer
        if not isinstance(server, QueueProbe) or consumer is None or conn.is_lost:
            return
        if conn.core.outbound_size or conn.supervisor.recovering:
            return  # acks on their way: not quiet
        _, unacked = server.queue_counts(self.queue)
        live = sum(1 for m in self.held if m.epoch == conn.epoch)
        self.checked += 1
        if unacked != consumer.buffered + live:
            self.violations.append(
                f"the broker holds {unacked} unacked, the client {consumer.buffered} buffered "
                f"and {live} in hand"
            )
        if unacked > self.prefetch + len(self.held):
            self.violations.append(f"{unacked} unacked over the prefetch {self.prefetch}")

    @property
    def finished(self) -> bool:
        consumer = self.consumer
        return (
            len(self.confirmed) == self.count
            and not self._outstanding
            and self.confirmed <= self.acked
            and not self.held
            and consumer is not None
            and not consumer.buffered
            and self._queue_empty
        )

    @property
    def _queue_empty(self) -> bool:
        # Redelivered duplicates (an ack lost in a cut) are consumed too before the end.
        server = self._server
        return server is None or server.queue_counts(self.queue) == (0, 0)

    def check(self, conn: MemoryConnection) -> None:
        assert not self.violations, self.violations
        if self._server is not None:
            assert self.checked, "the broker's accounts were never checked"
        assert self.confirmed == set(range(self.count))
        missing = self.confirmed - self.acked
        assert not missing, f"confirmed, never acked: {sorted(missing)[:10]}"
        server = conn.server
        if isinstance(server, QueueProbe):
            counts = server.queue_counts(self.queue)
            assert counts == (0, 0), f"left in the queue (ready, unacked): {counts}"
