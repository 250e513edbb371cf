"""A virtual host: its exchanges and queues, and how a message moves among them: routing,
enqueueing with limits and TTLs, dispatch to consumers (stream consumers read from their own
offsets), expiry and dead-lettering."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ._counters import MessageCounters
from ._deadletter import dead_lettered, may_reach
from ._errors import BrokerError
from ._message import expiry
from ._policies import matching, matching_exchange
from ._queues import Consumer, Entry, Queue
from ._routing import PREDECLARED, Exchange
from ._store import is_persistent

if TYPE_CHECKING:
    from collections.abc import Iterable

    from amqp_sansio import FieldTable

    from ._clock import ModelClock
    from ._memory import MemoryMonitor
    from ._message import Message
    from ._policies import Policy
    from ._store import DurableStore
    from ._streams import StreamLog

__all__ = ["VirtualHost"]


def _unused_deadline(queue: Queue) -> float | None:
    if queue.expires is None or queue.consumers:
        return None
    return queue.idle_since + queue.expires / 1000


@final
class VirtualHost:
    """An isolated namespace of exchanges and queues."""

    def __init__(
        self,
        name: str,
        clock: ModelClock,
        memory: MemoryMonitor,
        store: DurableStore | None = None,
        counters: MessageCounters | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.memory = memory
        #: The broker's message counters (shared by its virtual hosts).
        self.counters = MessageCounters() if counters is None else counters
        #: Where durable definitions and persistent messages are kept (None: in memory only).
        self.store = store
        #: Open connections on this virtual host, and how many it admits (None: no limit).
        self.connections = 0
        self.max_connections: int | None = None
        #: The delivery limit of quorum queues declared without ``x-delivery-limit``.
        self.quorum_delivery_limit: int | None = None
        #: Policies by name (``rabbitmqctl set_policy``), and operator policies
        #: (``set_operator_policy``).
        self.policies: dict[str, Policy] = {}
        self.operator_policies: dict[str, Policy] = {}
        self.exchanges: dict[str, Exchange[Queue]] = {"": Exchange("", "direct", durable=True)}
        for exchange_name, kind in PREDECLARED:
            self.exchanges[exchange_name] = Exchange(exchange_name, kind, durable=True)
        self.queues: dict[str, Queue] = {}
        #: Queues that may hold messages with an expiry time.
        self.timed: set[Queue] = set()
        #: Queues with x-expires.
        self.expiring: set[Queue] = set()

    def __repr__(self) -> str:
        return f"<VirtualHost {self.name!r}>"

    # --- policies -----------------------------------------------------------------------------

    def follow_policy(self, queue: Queue) -> None:
        """Apply the policy that matches *queue* now (or none) and enforce what it changed:
        a lower length limit drops (dead-letters) heads at once, ``expires`` starts counting;
        message TTLs apply to messages enqueued from now on, as in RabbitMQ's classic queues."""
        policy = matching(self.policies, queue.name, queue.type)
        operator = matching(self.operator_policies, queue.name, queue.type)
        queue.apply_policy(
            None if policy is None else policy.name,
            {} if policy is None else policy.definition,
            None if operator is None else operator.definition,
        )
        if queue.expires is not None:
            self.track_expiring(queue)
        while queue.overflow == "drop-head" and queue.over_limit():
            dropped = queue.pop()
            self.dead_letter(queue, dropped.message, "maxlen")

    def follow_exchange_policy(self, exchange: Exchange[Queue]) -> None:
        """Apply the policy that matches *exchange* now (its ``alternate-exchange``)."""
        if exchange.name == "":
            return
        policy = matching_exchange(self.policies, exchange.name)
        alternate = None if policy is None else policy.definition.get("alternate-exchange")
        exchange.policy_alternate = alternate if isinstance(alternate, str) else None

    def set_policy(self, policy: Policy) -> None:
        """Add or replace a policy; every queue and exchange follows the policies from now
        on."""
        self.policies[policy.name] = policy
        self._follow_policies()

    def clear_policy(self, name: str) -> None:
        """Remove the policy *name* (a missing one is a KeyError, as rabbitmqctl's error)."""
        del self.policies[name]
        self._follow_policies()

    def set_operator_policy(self, policy: Policy) -> None:
        """Add or replace an operator policy (its values cap the queues it matches)."""
        self.operator_policies[policy.name] = policy
        self._follow_policies()

    def clear_operator_policy(self, name: str) -> None:
        """Remove the operator policy *name* (KeyError when there is none)."""
        del self.operator_policies[name]
        self._follow_policies()

    def _follow_policies(self) -> None:
        for queue in list(self.queues.values()):
            self.follow_policy(queue)
        for exchange in self.exchanges.values():
            self.follow_exchange_policy(exchange)

    def exchange(self, name: str) -> Exchange[Queue]:
        """The exchange *name*; 404 when there is none."""
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise BrokerError(404, f"no exchange '{name}' in vhost '{self.name}'")
        return exchange

    def queue(self, name: str) -> Queue:
        """The queue *name*; 404 when there is none."""
        queue = self.queues.get(name)
        if queue is None:
            raise BrokerError(404, f"no queue '{name}' in vhost '{self.name}'")
        return queue

    # --- routing ------------------------------------------------------------------------------

    def route(
        self, exchange: Exchange[Queue], routing_key: str, headers: FieldTable | None
    ) -> list[Queue]:
        """Every queue a message reaches from *exchange*, each once, following
        exchange-to-exchange bindings and alternate exchanges without looping."""
        if exchange.name == "":
            queue = self.queues.get(routing_key)
            return [] if queue is None else [queue]
        found: dict[int, Queue] = {}
        seen: set[int] = set()
        stack = [exchange]
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            matched = False
            for binding in current.matches(routing_key, headers):
                matched = True
                destination = binding.destination
                if isinstance(destination, Exchange):
                    stack.append(destination)
                else:
                    found.setdefault(id(destination), destination)
            if not matched:
                # the exchange's own argument wins over its policy's, as in RabbitMQ
                alternate = current.arguments.get("alternate-exchange")
                if not isinstance(alternate, str):
                    alternate = current.policy_alternate
                if isinstance(alternate, str) and alternate in self.exchanges:
                    stack.append(self.exchanges[alternate])
        return list(found.values())

    # --- the durable store ---------------------------------------------------------------------

    def stored_gone(self, queue: Queue, entries: Iterable[Entry]) -> None:
        """*entries* left *queue* for good: the store forgets the stored ones."""
        store = self.store
        if store is not None:
            for entry in entries:
                if entry.stored:
                    entry.stored = False
                    store.message_removed(self.name, queue.name, entry.seq)

    def stored_delivered(self, queue: Queue, entry: Entry, *, no_ack: bool) -> None:
        """*entry* went to a consumer: gone for good without acks, else redelivered after a
        crash."""
        store = self.store
        if store is not None and entry.stored:
            if no_ack:
                entry.stored = False
                store.message_removed(self.name, queue.name, entry.seq)
            else:
                store.message_delivered(self.name, queue.name, entry.seq, entry.delivery_count)

    # --- deletion -----------------------------------------------------------------------------

    def delete_queue(self, queue: Queue) -> int:
        """Remove *queue*, its bindings and consumers (cancelling them); returns how many
        ready messages were dropped."""
        if queue.deleted:
            return 0
        queue.deleted = True
        self.queues.pop(queue.name, None)
        if queue.durable and self.store is not None:
            self.store.queue_deleted(self.name, queue.name)
        for key, exchange in list(queue.bindings_in.items()):
            exchange.remove(key)
            self.maybe_auto_delete(exchange)
        queue.bindings_in.clear()
        for consumer in list(queue.consumers):
            consumer.channel.drop_consumer(consumer, notify=True)
        queue.consumers.clear()
        count = queue.purge()
        log = queue.log
        if log is not None:
            count = len(log)
            for message in log.clear():
                self.memory.release(message.held)
        self.timed.discard(queue)
        self.expiring.discard(queue)
        return count

    def delete_exchange(self, exchange: Exchange[Queue]) -> None:
        """Remove *exchange* and every binding from or to it."""
        exchange.deleted = True
        self.exchanges.pop(exchange.name, None)
        if exchange.durable and self.store is not None:
            self.store.exchange_deleted(self.name, exchange.name)
        for key, binding in list(exchange.bindings.items()):
            exchange.remove(key)
            destination = binding.destination
            if isinstance(destination, Exchange):
                destination.incoming.pop(key, None)
            else:
                destination.bindings_in.pop(key, None)
        for key, source in list(exchange.incoming.items()):
            source.remove(key)
            self.maybe_auto_delete(source)
        exchange.incoming.clear()

    def maybe_auto_delete(self, exchange: Exchange[Queue]) -> None:
        """Delete an auto-delete exchange that lost its last binding."""
        if exchange.auto_delete and not exchange.bindings and not exchange.deleted:
            self.delete_exchange(exchange)

    def delete_exclusive(self, queue: Queue) -> None:
        """Delete *queue*, first forgetting it in its exclusive owner."""
        owner = queue.exclusive_owner
        if owner is not None:
            owner.exclusive_queues.pop(queue.name, None)
        self.delete_queue(queue)

    # --- expiry -------------------------------------------------------------------------------

    def track_timed(self, queue: Queue) -> None:
        """*queue* holds a message with an expiry time: the timer must look at it."""
        self.timed.add(queue)
        self.clock.timer_changed()

    def track_expiring(self, queue: Queue) -> None:
        """*queue* has ``x-expires``: the timer must look at it."""
        self.expiring.add(queue)
        self.clock.timer_changed()

    def next_deadline(self) -> float | None:
        """When the earliest message at the head of a queue expires, or an unused queue is
        deleted; None when nothing waits."""
        deadline: float | None = None
        for queue in list(self.timed):
            head = next((e for e in queue.ready if e.expires_at is not None), None)
            if head is None:
                self.timed.discard(queue)
                continue
            expires_at = head.expires_at
            assert expires_at is not None
            if deadline is None or expires_at < deadline:
                deadline = expires_at
        for queue in self.expiring:
            unused = _unused_deadline(queue)
            if unused is not None and (deadline is None or unused < deadline):
                deadline = unused
        return deadline

    def handle_timer(self, now: float) -> None:
        """Expire (and dead-letter) messages at queue heads and delete queues unused for
        their ``x-expires``."""
        for queue in list(self.timed):
            self.expire_head(queue, now)
        for queue in list(self.expiring):
            deadline = _unused_deadline(queue)
            if queue.deleted:
                self.expiring.discard(queue)
            elif deadline is not None and deadline <= now:
                self.delete_exclusive(queue)
                self.expiring.discard(queue)

    def touch(self, queue: Queue) -> None:
        """*queue* was used: its ``x-expires`` countdown starts again."""
        if queue.expires is not None:
            queue.idle_since = self.clock.now()
            self.clock.timer_changed()

    def expire_head(self, queue: Queue, now: float) -> None:
        """Drop expired messages from the head of *queue* (RabbitMQ also expires at heads)."""
        if not queue.ready:
            return
        for entry in queue.drop_expired(now):
            self.stored_gone(queue, (entry,))
            self.dead_letter(queue, entry.message, "expired")

    # --- dead-lettering -----------------------------------------------------------------------

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """Republish *message* to the queue's dead-letter exchange, with an ``x-death``
        record; drop it when there is none, or when it would cycle without a rejection."""
        exchange_name = queue.dead_letter_exchange
        if exchange_name is None or queue.deleted:
            return
        exchange = self.exchanges.get(exchange_name)
        if exchange is None:
            return
        copy = dead_lettered(queue, message, reason, exchange_name, self.clock.wall())
        for target in self.route(exchange, copy.routing_key, copy.properties.headers):
            if may_reach(copy, target):
                self.enqueue(target, copy)

    # --- enqueue and dispatch -----------------------------------------------------------------

    def enqueue(self, queue: Queue, message: Message) -> bool:
        """Put *message* into *queue*; False when a full ``reject-publish`` queue refused it."""
        if queue.deleted:
            return True
        log = queue.log
        if log is not None:
            self._append(queue, log, message)
            return True
        now = self.clock.now()
        if queue.overflow != "drop-head" and queue.full():
            self.expire_head(queue, now)
        if queue.overflow != "drop-head" and queue.full():
            if queue.overflow == "reject-publish-dlx":
                self.dead_letter(queue, message, "maxlen")
            return False
        expires_at = expiry(queue.message_ttl, message.properties.expiration, now)
        entry = Entry(message, self.clock.next_seq(), expires_at)
        if expires_at is not None and expires_at <= now:
            # TTL 0: delivered only to a consumer that can take it right now
            if not queue.ready and self._hand_over(queue, entry):
                return True
            self.dead_letter(queue, message, "expired")
            return True
        queue.push(entry)
        store = self.store
        if store is not None and queue.durable and is_persistent(message.properties):
            entry.stored = True
            store.message_added(
                self.name,
                queue.name,
                entry.seq,
                message.exchange,
                message.routing_key,
                message.properties,
                message.body,
            )
        if expires_at is not None:
            self.track_timed(queue)
        while queue.overflow == "drop-head" and queue.over_limit():
            dropped = queue.pop()
            self.stored_gone(queue, (dropped,))
            self.dead_letter(queue, dropped.message, "maxlen")
        self.dispatch(queue)
        return True

    def _append(self, queue: Queue, log: StreamLog, message: Message) -> None:
        memory = self.memory
        memory.hold(message.held)
        offset = log.next_offset
        now_ms = int(self.clock.wall() * 1000)
        dropped = log.append(message, now_ms)
        for gone in dropped:
            memory.release(gone.held)
        store = self.store
        if store is not None:
            store.stream_appended(
                self.name,
                queue.name,
                offset,
                now_ms,
                message.exchange,
                message.routing_key,
                message.properties,
                message.body,
            )
            if dropped:
                store.stream_trimmed(self.name, queue.name, log.first_offset)
        self.dispatch(queue)

    def _hand_over(self, queue: Queue, entry: Entry) -> bool:
        for consumer in queue.active_consumers():
            if consumer.can_take():
                queue.consumers.rotate(-1)
                if not consumer.no_ack:
                    self.memory.hold(entry.message.held)  # the channel holds it now
                consumer.channel.send(consumer, queue, entry, self.clock.now())
                return True
        return False

    def dispatch(self, queue: Queue) -> None:
        """Hand ready messages to consumers with room, round robin."""
        if queue.dispatching:
            queue.redispatch = True  # a delivery led back here (dead-letter, ack)
            return
        queue.dispatching = True
        try:
            while True:
                queue.redispatch = False
                self._dispatch_once(queue)
                if not queue.redispatch:
                    return
        finally:
            queue.dispatching = False

    def _dispatch_once(self, queue: Queue) -> None:
        log = queue.log
        if log is not None:
            self._dispatch_stream(queue, log)
            return
        consumers = queue.consumers
        if not consumers or not queue.ready:
            return
        now = self.clock.now()
        if not queue.single_active and len(consumers) > 1 and any(c.priority for c in consumers):
            self._dispatch_by_priority(queue, now)
            return
        idle = 0
        while queue.ready and consumers and not queue.deleted:
            if queue.single_active:
                consumer = consumers[0]
                if not consumer.can_take():
                    return
            else:
                consumer = consumers[0]
                consumers.rotate(-1)
                if not consumer.can_take():
                    idle += 1
                    if idle >= len(consumers):
                        return
                    continue
            idle = 0
            self.expire_head(queue, now)
            if not queue.ready:
                return
            entry = queue.pop(keep_held=not consumer.no_ack)
            self.stored_delivered(queue, entry, no_ack=consumer.no_ack)
            consumer.channel.send(consumer, queue, entry, now)

    def _dispatch_by_priority(self, queue: Queue, now: float) -> None:
        """RabbitMQ's consumer priorities: each message goes to a consumer of the highest
        priority that has room (prefetch, credit, a writable connection), round robin among
        those of one priority; lower ones get messages only while every higher one is full."""
        consumers = queue.consumers
        while queue.ready and consumers and not queue.deleted:
            chosen: Consumer | None = None
            for consumer in consumers:
                if (chosen is None or consumer.priority > chosen.priority) and consumer.can_take():
                    chosen = consumer
            if chosen is None:
                return
            consumers.remove(chosen)
            consumers.append(chosen)  # behind the others of its priority
            self.expire_head(queue, now)
            if not queue.ready:
                return
            entry = queue.pop(keep_held=not chosen.no_ack)
            chosen.channel.send(chosen, queue, entry, now)

    def _dispatch_stream(self, queue: Queue, log: StreamLog) -> None:
        """Every consumer of a stream reads on from its own offset while it has credit."""
        now = self.clock.now()
        for consumer in list(queue.consumers):
            while consumer.offset < log.next_offset and consumer.can_take() and not queue.deleted:
                offset = max(consumer.offset, log.first_offset)
                consumer.offset = offset + 1
                message = log.read(offset)
                # None: the record that starts a segment; a filtered consumer skips what its
                # filter refuses (each chunk here is one message: the chunk filter is exact)
                if message is not None and consumer.wants(message):
                    consumer.channel.send(consumer, queue, Entry(message, offset, None), now)
