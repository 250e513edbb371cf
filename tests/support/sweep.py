"""The scripted workload of issue 17 for ``amqp_sansio.testing.fault_sweep``: a durable
client-named queue and a server-named exclusive one, both bound and consumed, 200 publishes with
confirms to the durable one, every delivery acked; republishing what a cut left unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import attrs

from amqp_sansio import (
    BasicAck,
    BasicConsume,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    BasicQos,
    ConfirmSelect,
    ExchangeDeclare,
    MessageReceived,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
)
from amqp_sansio.client import StaleDeliveryError

if TYPE_CHECKING:
    from amqp_sansio import ConnectionLost, Event, Method
    from amqp_sansio.client import Recovered
    from amqp_sansio.testing import MemoryConnection

EXCHANGE: Final = "sweep.x"
DURABLE: Final = "sweep.durable"
SERVER_NAMED: Final = ""  # placeholder in the script: the declare-ok names it
PUBLISH_CHANNEL: Final = 1
CONSUME_CHANNEL: Final = 2


@final
class ConfirmedConsume:
    """The workload; its invariants are checked in :meth:`check`."""

    def __init__(self, count: int = 200, window: int = 20) -> None:
        self.count = count
        self.window = window
        self.server_queue = ""  # the server-named queue's current name
        self._setup: list[Method] = []
        self._step = 0
        self._waiting = False
        self._next_id = 0  # next message id never published
        self._outstanding: dict[int, int] = {}  # publish number -> message id
        self._retry: list[int] = []  # ids whose outcome was unknown, to publish again
        self.confirmed: set[int] = set()
        self.delivered: set[int] = set()  # ids delivered from the durable queue
        self.deliveries = 0
        self.unknown = 0
        self.nacked = 0
        self.stale_refused = 0
        self.first_numbers: dict[int, int] = {}  # epoch -> its first publish number
        self._unacked: list[tuple[int, int]] = []  # (epoch, tag) delivered and not acked yet

    # --- the script ---------------------------------------------------------------------------

    def start(self, conn: MemoryConnection) -> None:
        assert conn.open_channel() == PUBLISH_CHANNEL
        assert conn.open_channel() == CONSUME_CHANNEL
        self._setup = [
            ConfirmSelect(),
            ExchangeDeclare(exchange=EXCHANGE, type="direct", durable=True),
            QueueDeclare(queue=DURABLE, durable=True),
            QueueDeclare(queue="", exclusive=True, auto_delete=False),
            QueueBind(queue=DURABLE, exchange=EXCHANGE, routing_key="d"),
            QueueBind(queue=SERVER_NAMED, exchange=EXCHANGE, routing_key="s"),
            BasicQos(prefetch_count=50),
            BasicConsume(queue=DURABLE, consumer_tag="c.durable"),
            BasicConsume(queue=SERVER_NAMED, consumer_tag="c.server"),
        ]
        self._advance(conn)

    def _channel_for(self, method: Method) -> int:
        return CONSUME_CHANNEL if isinstance(method, BasicQos | BasicConsume) else PUBLISH_CHANNEL

    def _advance(self, conn: MemoryConnection) -> None:
        """Send the next setup step, or publish once setup is done."""
        if self._waiting or conn.is_lost:  # events from before a cut: wait for recovery
            return
        if self._step < len(self._setup):
            method = self._setup[self._step]
            if isinstance(method, QueueBind | BasicConsume) and method.queue == SERVER_NAMED:
                method = attrs.evolve(method, queue=self.server_queue)
            conn.send(self._channel_for(method), method)
            self._waiting = True
            return
        self._publish(conn)

    def _publish(self, conn: MemoryConnection) -> None:
        while (
            not conn.is_lost
            and len(self._outstanding) < self.window
            and (self._retry or self._next_id < self.count)
        ):
            if self._retry:
                ident = self._retry.pop(0)
            else:
                ident = self._next_id
                self._next_id += 1
            number = conn.publish(
                PUBLISH_CHANNEL,
                BasicPublish(exchange=EXCHANGE, routing_key="d"),
                BasicProperties(message_id=str(ident)),
                b"%d" % ident,
            )
            assert number is not None
            self.first_numbers.setdefault(conn.epoch, number)
            self._outstanding[number] = ident

    def handle(self, conn: MemoryConnection, event: Event) -> None:
        if isinstance(event, MethodReceived) and event.request is not None:
            if isinstance(event.method, QueueDeclareOk) and event.method.queue != DURABLE:
                self.server_queue = event.method.queue
            self._step += 1
            self._waiting = False
            self._advance(conn)
        elif isinstance(event, MessageReceived) and isinstance(event.method, BasicDeliver):
            self.deliveries += 1
            if event.method.consumer_tag == "c.durable":
                self.delivered.add(int(event.body))
            # Ack every other delivery at once; keep the rest for the next one, so a cut
            # leaves deliveries of an old epoch unacked.
            self._unacked.append((conn.epoch, event.method.delivery_tag))
            if len(self._unacked) >= 2:
                self._ack_all(conn)
        elif isinstance(event, PublishConfirmed):
            for number in event.publish_numbers:
                self.confirmed.add(self._outstanding.pop(number))
            self._publish(conn)
        elif isinstance(event, PublishNacked):
            self.nacked += len(event.publish_numbers)

    def _ack_all(self, conn: MemoryConnection) -> None:
        unacked, self._unacked = self._unacked, []
        for epoch, tag in unacked:
            try:
                conn.settle(CONSUME_CHANNEL, BasicAck(delivery_tag=tag), epoch)
            except StaleDeliveryError:
                self.stale_refused += 1  # redelivered by the broker: nothing to do

    def lost(self, conn: MemoryConnection, event: ConnectionLost) -> None:
        # Their outcome is unknown: publish them again (at least once).
        self.unknown += len(self._outstanding)
        self._retry = sorted(self._outstanding.values()) + self._retry
        self._outstanding.clear()
        self._waiting = False  # the step in flight is sent again

    def recovered(self, conn: MemoryConnection, recovered: Recovered) -> None:
        if self.server_queue in recovered.renamed_queues:
            self.server_queue = recovered.renamed_queues[self.server_queue]
        # Settling an old delivery now is refused locally, never sent with a stale tag.
        self._ack_all(conn)
        self._advance(conn)

    def idle(self, conn: MemoryConnection) -> bool:
        return False  # everything it does answers an event

    @property
    def finished(self) -> bool:
        return (
            self._step == len(self._setup)
            and len(self.confirmed) == self.count
            and not self._outstanding
            and self.confirmed <= self.delivered
        )

    def check(self, conn: MemoryConnection) -> None:
        assert self.nacked == 0, "the broker nacked nothing"
        assert self.confirmed == set(range(self.count))
        missing = self.confirmed - self.delivered
        assert not missing, f"confirmed, never delivered: {sorted(missing)[:10]}"
        # Each connection numbers its publishes from 1.
        assert set(self.first_numbers.values()) == {1}, self.first_numbers
        for recovery in conn.recoveries:
            assert recovery.unknown_publishes >= 0
