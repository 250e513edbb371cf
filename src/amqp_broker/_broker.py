"""The broker: the root of the model, with its virtual hosts, users, flow control, clocks and
the timer (message and queue expiry, consumer timeouts).

The model does no I/O and reads no clock. Time comes in through the two callables given to
:class:`Broker` (monotonic seconds for TTLs, wall-clock seconds for ``x-death`` timestamps and
stream timestamps). Timers are checked whenever a queue is read and at
:meth:`Broker.handle_timer`, which the transport calls at :meth:`Broker.next_deadline`.

Import order inside the model, one way only: ``_errors``, ``_fields``, ``_message``,
``_clock``, ``_memory``, ``_options``, ``_permissions``, ``_streams`` -> ``_routing`` ->
``_queues`` -> ``_deadletter`` -> ``_vhost`` -> ``_channel`` -> ``_broker``.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Final, final

from ._channel import ModelConnection
from ._clock import ModelClock
from ._counters import MessageCounters
from ._errors import BrokerError
from ._fields import freeze
from ._memory import MemoryMonitor
from ._message import Message, expiry
from ._options import BrokerOptions
from ._permissions import UserRegistry
from ._policies import OPERATOR_POLICY_KEYS, Policy
from ._queues import Entry, Queue
from ._routing import Binding, Exchange
from ._vhost import VirtualHost

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from ._channel import DeliverySink, ReplyConsumers, TimeoutWatch
    from ._permissions import Permission, User
    from ._store import DurableStore, Recovery

__all__ = ["Broker"]

logger: Final = logging.getLogger("amqp_broker")

#: The users a broker has when given none: guest/guest, allowed everything everywhere.
DEFAULT_USERS: Final = {"guest": "guest"}


@final
class Broker:
    """The root of the model: virtual hosts, users, the memory monitor and the clocks.

    :param clock: monotonic seconds, for TTLs and timeouts (``trio.current_time``,
        ``time.monotonic``, or a test's fake).
    :param wall_clock: seconds since the epoch, for ``x-death`` and stream timestamps.
    :param options: limits, timeouts and flow control (:class:`BrokerOptions`).
    :param users: name -> password (allowed everything everywhere) or :class:`User`;
        default guest/guest.
    :param store: keep durable definitions and persistent messages there, and rebuild them
        from it now (None: in memory only, everything is lost when the broker stops).
    :param secret_check: decides a ``connection.update-secret``: called with the connection's
        user and the new secret, True accepts it (``update-secret-ok``), False refuses it (the
        connection is closed with 530, as RabbitMQ does). None, the default, accepts every new
        secret, as RabbitMQ's internal user database does; an OAuth 2 test passes a token check.
    """

    def __init__(
        self,
        *,
        vhosts: Iterable[str] = ("/",),
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        options: BrokerOptions | None = None,
        users: Mapping[str, str | User] | None = None,
        store: DurableStore | None = None,
        secret_check: Callable[[str, bytes], bool] | None = None,
    ) -> None:
        self.clock = clock
        #: The durable store (None: in memory only).
        self.store = store
        #: The check of ``connection.update-secret`` (None: every secret is accepted).
        self.secret_check = secret_check
        self.wall_clock = wall_clock
        self.options = BrokerOptions() if options is None else options
        self._clock = ModelClock(clock, wall_clock)
        #: Flow control: the octets held against the memory high watermark.
        self.memory = MemoryMonitor(self.options.watermark)
        #: Messages published, delivered, acknowledged, ... since the start (``/metrics``).
        self.counters = MessageCounters()
        #: The users and their permissions (see :meth:`set_permissions`).
        self.users = UserRegistry(DEFAULT_USERS if users is None else users)
        self.vhosts: dict[str, VirtualHost] = {}
        for name in vhosts:
            self.add_vhost(name)
        self._connection_ids = itertools.count(1)
        #: Direct reply-to: token -> the consuming channel and its consumer tag.
        self.reply_to: ReplyConsumers = {}
        #: Channels with unacknowledged deliveries, for the consumer timeout.
        self._timeouts: TimeoutWatch = {}
        #: What was rebuilt from the store at start (None without a store).
        self.recovered: str | None = None
        if store is not None:
            self._restore(store.load())

    @property
    def timer_changed(self) -> Callable[[], None]:
        """Called when a message with an expiry time was queued: the transport re-reads
        :meth:`next_deadline`."""
        return self._clock.timer_changed

    @timer_changed.setter
    def timer_changed(self, callback: Callable[[], None]) -> None:
        self._clock.timer_changed = callback

    # --- virtual hosts and users --------------------------------------------------------------

    def add_vhost(self, name: str) -> VirtualHost:
        """Create the virtual host *name* (with its predeclared exchanges) if it is new."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VirtualHost(
                name, self._clock, self.memory, self.store, self.counters
            )
            vhost.max_connections = self.options.vhost_max_connections.get(name)
            vhost.quorum_delivery_limit = self.options.quorum_delivery_limit
            if self.store is not None:
                self.store.vhost_added(name)
        return vhost

    def set_vhost_limits(self, vhost: str, *, max_connections: int | None) -> None:
        """Like ``rabbitmqctl set_vhost_limits -p VHOST '{"max-connections": N}'``: at most
        *max_connections* open connections on *vhost* (None: no limit). Open connections
        stay open."""
        self.vhosts[vhost].max_connections = max_connections

    def set_policy(
        self,
        name: str,
        pattern: str,
        definition: Mapping[str, object],
        *,
        vhost: str = "/",
        priority: int = 0,
        apply_to: str = "all",
    ) -> Policy:
        """Like ``rabbitmqctl set_policy -p VHOST --priority P --apply-to A NAME PATTERN
        DEFINITION``: queues whose names match *pattern* (searched, not anchored) follow
        *definition* (``message-ttl``, ``expires``, ``max-length``, ``max-length-bytes``,
        ``overflow``, ``dead-letter-exchange``, ``dead-letter-routing-key``, ``delivery-limit``,
        ``dead-letter-strategy``, ``queue-leader-locator``; exchanges: ``alternate-exchange``),
        existing ones at once; of several
        matching policies the one of the highest priority applies. A queue's own argument
        wins or the lower value wins as in RabbitMQ 3.10 (see :doc:`/broker`).

        :raises ValueError: an unknown setting or bad value, a bad pattern or *apply_to*.
        :raises KeyError: there is no virtual host *vhost*.
        """
        policy = Policy(name, pattern, definition, priority=priority, apply_to=apply_to)
        self.vhosts[vhost].set_policy(policy)
        self._store_policy(vhost, policy, operator=False)
        return policy

    def clear_policy(self, name: str, *, vhost: str = "/") -> None:
        """Like ``rabbitmqctl clear_policy -p VHOST NAME``; queues follow what remains.

        :raises KeyError: no such policy (or virtual host).
        """
        self.vhosts[vhost].clear_policy(name)
        if self.store is not None:
            self.store.policy_cleared(vhost, name, operator=False)

    def list_policies(self, vhost: str = "/") -> list[Policy]:
        """Like ``rabbitmqctl list_policies -p VHOST``: the policies, by name."""
        return sorted(self.vhosts[vhost].policies.values(), key=lambda p: p.name)

    def set_operator_policy(
        self,
        name: str,
        pattern: str,
        definition: Mapping[str, object],
        *,
        vhost: str = "/",
        priority: int = 0,
    ) -> Policy:
        """Like ``rabbitmqctl set_operator_policy``: caps for the queues it matches
        (``expires``, ``message-ttl``, ``max-length``, ``max-length-bytes``,
        ``delivery-limit``): the lower of the operator policy's value and what the queue's
        arguments and policy give wins, as in RabbitMQ.

        :raises ValueError: a setting operator policies may not hold, or a bad value.
        :raises KeyError: there is no virtual host *vhost*.
        """
        refused = sorted(set(definition) - OPERATOR_POLICY_KEYS)
        if refused:
            raise ValueError(
                f"{', '.join(map(repr, refused))}: not allowed in operator policies (only "
                f"{', '.join(sorted(OPERATOR_POLICY_KEYS))})"
            )
        policy = Policy(name, pattern, definition, priority=priority, apply_to="queues")
        self.vhosts[vhost].set_operator_policy(policy)
        self._store_policy(vhost, policy, operator=True)
        return policy

    def clear_operator_policy(self, name: str, *, vhost: str = "/") -> None:
        """Like ``rabbitmqctl clear_operator_policy``.

        :raises KeyError: no such operator policy (or virtual host).
        """
        self.vhosts[vhost].clear_operator_policy(name)
        if self.store is not None:
            self.store.policy_cleared(vhost, name, operator=True)

    def _store_policy(self, vhost: str, policy: Policy, *, operator: bool) -> None:
        if self.store is not None:
            self.store.policy_set(
                vhost,
                policy.name,
                operator=operator,
                pattern=policy.pattern,
                definition=policy.definition,
                priority=policy.priority,
                apply_to=policy.apply_to,
            )

    def list_operator_policies(self, vhost: str = "/") -> list[Policy]:
        """Like ``rabbitmqctl list_operator_policies``: by name."""
        return sorted(self.vhosts[vhost].operator_policies.values(), key=lambda p: p.name)

    def add_user(self, name: str, password: str) -> None:
        """Add (or replace) a user allowed everything everywhere until
        :meth:`set_permissions` says otherwise."""
        self.users.add(name, password)
        if self.store is not None:
            self.store.user_set(name, password)

    def delete_user(self, name: str) -> None:
        """Remove a user; its open connections stay open, as in RabbitMQ."""
        self.users.delete(name)
        if self.store is not None:
            self.store.user_deleted(name)

    def set_permissions(
        self, user: str, vhost: str, configure: str = ".*", write: str = ".*", read: str = ".*"
    ) -> None:
        """Like ``rabbitmqctl set_permissions -p VHOST USER CONF WRITE READ``: regular
        expressions over queue and exchange names; the user may then use only the virtual
        hosts given permissions. Applies to connections opened afterwards."""
        self.users.set_permissions(user, vhost, configure, write, read)
        if self.store is not None:
            self.store.permissions_set(user, vhost, configure, write, read)

    def clear_permissions(self, user: str, vhost: str) -> None:
        """Like ``rabbitmqctl clear_permissions``: *user* may no longer open *vhost*."""
        self.users.clear_permissions(user, vhost)
        if self.store is not None:
            self.store.permissions_cleared(user, vhost)

    def admit(self, vhost: str, user: str, users: UserRegistry | None = None) -> str | None:
        """Why *user* may not open a connection on *vhost* now (the text of RabbitMQ's 530,
        checked in its order: the vhost, its connection limit, the user's access in *users*,
        by default the broker's), or None."""
        host = self.vhosts.get(vhost)
        if host is None:
            return f"vhost {vhost} not found"
        limit = host.max_connections
        if limit is not None and host.connections >= limit:
            return (
                f"access to vhost '{vhost}' refused for user '{user}': "
                f"connection limit ({limit}) is reached"
            )
        if (self.users if users is None else users).permission(user, vhost) is None:
            return f"access to vhost '{vhost}' refused for user '{user}'"
        return None

    def connect(
        self,
        vhost: str,
        sink: DeliverySink,
        *,
        cancel_notify: bool = True,
        user: str = "",
        permission: Permission | None = None,
    ) -> ModelConnection:
        """A client connection opened on *vhost* (which must exist) by *user*, who may do
        what *permission* allows (None: everything)."""
        return ModelConnection(
            self.vhosts[vhost],
            sink,
            next(self._connection_ids),
            cancel_notify,
            self.reply_to,
            user=user,
            permission=permission,
            timeouts=self._timeouts if self.options.consumer_timeout is not None else None,
        )

    # --- recovery -----------------------------------------------------------------------------

    def _restore(self, recovery: Recovery) -> None:
        """Rebuild what the store kept: definitions, then each durable queue's persistent
        messages in their order, redelivered if they had been delivered."""
        store = self.store
        assert store is not None
        # what is rebuilt is already stored: no changes are queued for it
        self.store = None
        try:
            self._rebuild(recovery)
        finally:
            self.store = store
            for vhost in self.vhosts.values():
                vhost.store = store
        self.recovered = (
            f"recovered from {store.path}: {len(self.vhosts)} vhosts, "
            f"{len(recovery.exchanges)} exchanges, {len(recovery.queues)} queues, "
            f"{len(recovery.bindings)} bindings, {len(recovery.messages)} persistent messages, "
            f"{len(recovery.stream_messages)} stream messages, {len(recovery.policies)} policies"
        )
        logger.info("%s", self.recovered)

    def _rebuild(self, recovery: Recovery) -> None:
        for name in recovery.vhosts:
            self.add_vhost(name)
        for name, password in recovery.users:
            self.users.add(name, password)
        for user, vhost, configure, write, read in recovery.permissions:
            if user in self.users:
                self.users.set_permissions(user, vhost, configure, write, read)
        for exchange in recovery.exchanges:
            host = self.add_vhost(exchange.vhost)
            host.exchanges[exchange.name] = Exchange(
                exchange.name,
                exchange.type,
                durable=True,
                auto_delete=exchange.auto_delete,
                internal=exchange.internal,
                arguments=exchange.arguments,
            )
        now = self._clock.now()
        for queue in recovery.queues:
            host = self.add_vhost(queue.vhost)
            restored = host.queues[queue.name] = Queue(
                queue.vhost,
                queue.name,
                durable=True,
                exclusive_owner=None,
                auto_delete=queue.auto_delete,
                arguments=queue.arguments,
                now=now,
                memory=self.memory,
            )
            if restored.expires is not None:
                host.track_expiring(restored)
        for binding in recovery.bindings:
            host = self.add_vhost(binding.vhost)
            source = host.exchanges.get(binding.source)
            target: Queue | Exchange[Queue] | None = (
                host.queues.get(binding.destination)
                if binding.kind == "queue"
                else host.exchanges.get(binding.destination)
            )
            if source is None or target is None:
                continue
            key = (binding.kind, id(target), binding.routing_key, freeze(binding.arguments))
            if source.add(Binding(target, binding.routing_key, dict(binding.arguments), key)):
                if isinstance(target, Exchange):
                    target.incoming[key] = source
                else:
                    target.bindings_in[key] = source
        last_seq = 0
        for stored in recovery.messages:
            host = self.vhosts[stored.vhost]
            queue_ = host.queues.get(stored.queue)
            if queue_ is None or queue_.log is not None:
                continue
            message = Message(stored.exchange, stored.routing_key, stored.properties, stored.body)
            expires_at = expiry(queue_.message_ttl, stored.properties.expiration, now)
            entry = Entry(message, stored.seq, expires_at)
            entry.redelivered = stored.redelivered
            if stored.redelivered and queue_.kind.counts_deliveries:
                # The delivery the crash cut off was a return, as a closed channel's is.
                entry.delivery_count = stored.delivery_count + 1
            entry.stored = True
            queue_.push(entry)
            if expires_at is not None:
                host.track_timed(queue_)
            last_seq = max(last_seq, stored.seq)
        self._clock.skip_to(last_seq)
        self._rebuild_streams(recovery)
        # last: a policy applies to the queues it matches at once, as when it is set
        for stored_policy in recovery.policies:
            if stored_policy.operator:
                self.set_operator_policy(
                    stored_policy.name,
                    stored_policy.pattern,
                    stored_policy.definition,
                    vhost=stored_policy.vhost,
                    priority=stored_policy.priority,
                )
            else:
                self.set_policy(
                    stored_policy.name,
                    stored_policy.pattern,
                    stored_policy.definition,
                    vhost=stored_policy.vhost,
                    priority=stored_policy.priority,
                    apply_to=stored_policy.apply_to,
                )

    def _rebuild_streams(self, recovery: Recovery) -> None:
        """Append each stream's stored messages again, from its oldest retained offset with
        their original times: the segments roll where they did, so offsets are the same."""
        log = None
        current: tuple[str, str] | None = None
        for stored in recovery.stream_messages:
            if (stored.vhost, stored.queue) != current:
                current = (stored.vhost, stored.queue)
                queue = self.vhosts[stored.vhost].queues.get(stored.queue)
                log = None if queue is None else queue.log
                if log is not None:
                    log.start_at(stored.offset, stored.time_ms)
            if log is None:
                continue
            if log.next_offset != stored.offset:
                logger.warning(
                    "stream %r of vhost %r: stored offset %d rebuilt at %d; the rest of the "
                    "stream is not recovered",
                    stored.queue,
                    stored.vhost,
                    stored.offset,
                    log.next_offset,
                )
                log = None
                continue
            message = Message(stored.exchange, stored.routing_key, stored.properties, stored.body)
            self.memory.hold(message.held)
            for dropped in log.append(message, stored.time_ms):
                self.memory.release(dropped.held)

    # --- timers -------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When the earliest message at the head of a queue expires, an unused queue with
        ``x-expires`` goes or a delivery has waited ``consumer_timeout`` for its ack; or None."""
        deadlines = [d for v in self.vhosts.values() if (d := v.next_deadline()) is not None]
        timeout = self.options.consumer_timeout
        if timeout is not None:
            for channel in list(self._timeouts):
                oldest = channel.oldest_delivery()
                if oldest is None or channel.closed:
                    del self._timeouts[channel]
                else:
                    deadlines.append(oldest + timeout)
        return min(deadlines, default=None)

    def handle_timer(self) -> None:
        """Expire (and dead-letter) every message whose time has come, at queue heads, delete
        queues unused for their ``x-expires``, and close channels whose oldest delivery waited
        longer than ``consumer_timeout`` (406, as RabbitMQ 3.10)."""
        now = self._clock.now()
        for vhost in list(self.vhosts.values()):
            vhost.handle_timer(now)
        timeout = self.options.consumer_timeout
        if timeout is None:
            return
        for channel in list(self._timeouts):
            oldest = channel.oldest_delivery()
            if oldest is None or channel.closed:
                self._timeouts.pop(channel, None)
            elif oldest + timeout <= now:
                self._timeouts.pop(channel, None)
                logger.warning(
                    "consumer on channel %d of connection %d timed out waiting for an ack",
                    channel.number,
                    channel.connection.number,
                )
                error = BrokerError(
                    406,
                    f"delivery acknowledgement on channel {channel.number} timed out. Timeout "
                    f"value used: {round(timeout * 1000)} ms. This timeout value can be "
                    "configured, see consumers doc guide to learn more",
                    caused_by_method=False,
                )
                channel.connection.sink.channel_failed(channel.number, error)
