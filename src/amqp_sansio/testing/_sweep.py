"""A client against a server in memory, its link cut at a chosen frame or octet, recovered by the
client layer's recovery supervisor (the same one the adapters run); and the sweep that cuts a
workload at every point.

The core never imports a broker: :class:`MemoryConnection` and :func:`fault_sweep` take a
*server factory* (``amqp_broker.memory_server`` is one) whose calls give the server side of each
new connection (:class:`ServerSide`).
"""

from __future__ import annotations

import logging
import random
import struct
from collections import deque
from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeAlias, final, runtime_checkable

import attrs

from .._connection import Connection, ConnectionConfig
from .._errors import LocalProtocolError, RemoteProtocolError
from .._events import (
    NEED_DATA,
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionLost,
    ConnectionOpened,
    Event,
    HeartbeatTimeout,
    MessageReceived,
    PublishNacked,
)
from .._generated.spec_0_9_1 import (
    BasicAck,
    BasicConsume,
    BasicNack,
    BasicReject,
    ConfirmSelect,
)
from .._method import Role
from .._state import ConnectionState
from ..client._errors import AMQPError, ConnectionLostError
from ..client._message import Message, bound_message
from ..client._params import ConnectionParameters
from ..client._recovery import (
    Epoch,
    Recovered,
    RecoveryAttempt,
    RecoveryEvent,
    RecoveryPolicy,
    RecoveryState,
    check_settle,
)
from ..client._requests import consumer_buffer_size
from ..client._router import ChannelBook, Router
from ..client._supervisor import (
    Connect,
    GiveUp,
    LostChannels,
    RecoverySupervisor,
    Resume,
    Wait,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._method import Buffer, ContentProperties, Method
    from .._topology import Topology
    from ..client._router import Reply

__all__ = [
    "MemoryConnection",
    "MemoryConsumer",
    "MemoryMessage",
    "QueueProbe",
    "ServerFactory",
    "ServerSide",
    "SweepReport",
    "Workload",
    "fault_sweep",
    "run_workload",
]

Unit: TypeAlias = Literal["frame", "octet"]

_FRAME_HEADER: Final = struct.Struct(">BHI")
_BASIC_NACK: Final = bytes((0, 60, 0, 120))  # class 60, method 120
_MAX_STEPS: Final = 100_000

logger: Final = logging.getLogger("amqp_sansio.testing")


class ServerSide(Protocol):
    """The server's end of one in-memory connection."""

    @property
    def core(self) -> Connection:
        """The server-role core the client's octets go to."""
        ...

    def handle(self, event: Event, /) -> None:
        """Act on one event of :attr:`core`."""

    def protocol_error(self, error: RemoteProtocolError, /) -> None:
        """:attr:`core` raised *error* for what the client sent (its close is queued)."""

    def flush(self) -> None:
        """About to take :attr:`core`'s output (send what was kept back, e.g. confirms)."""

    def lost(self) -> None:
        """The link was cut: forget the connection (requeue, delete exclusive queues)."""


#: Gives the server side of each new connection to one server (``amqp_broker.memory_server()``).
ServerFactory: TypeAlias = "Callable[[], ServerSide]"


def _units(data: bytes, header: bool, unit: Unit) -> list[bytes]:
    """*data* cut into frames (a leading protocol header is one unit) or octets."""
    if unit == "octet":
        return [data[i : i + 1] for i in range(len(data))]
    units: list[bytes] = []
    offset = 0
    if header:
        units.append(data[:8])
        offset = 8
    size = len(data)
    while offset < size:
        if size - offset < 7:
            units.append(data[offset:])
            break
        length = 7 + _FRAME_HEADER.unpack_from(data, offset)[2] + 1
        units.append(data[offset : offset + length])
        offset += length
    return units


@final
class _Noted:
    """The waiter of a request sent through :meth:`MemoryConnection.send`: its reply goes to
    the workload as an event, so the waiter only keeps the router's books straight."""

    __slots__ = ()

    def done(self) -> bool:
        return False

    def set_result(self, result: Reply, /) -> None:
        pass

    def set_exception(self, exception: BaseException, /) -> None:
        pass


_NOTED: Final = _Noted()


@final
class _NotedConfirm:
    """The confirm sink of a publish through :meth:`MemoryConnection.publish`: its outcome
    goes to the workload as an event."""

    __slots__ = ()

    def settle(self, publish_number: int, error: AMQPError | None, /) -> None:
        pass


_NOTED_CONFIRM: Final = _NotedConfirm()


@runtime_checkable
class QueueProbe(Protocol):
    """A server side that can say what one queue holds (``amqp_broker.memory_server``'s
    can): the workloads check what the broker has against what the client holds."""

    def queue_counts(self, queue: str, /) -> tuple[int, int]:
        """The queue's ready messages, and those this connection holds unacknowledged."""
        ...


@final
@attrs.define(kw_only=True, slots=True, weakref_slot=False)
class MemoryMessage(Message):
    """A delivery from a :class:`MemoryConsumer`, settled with :meth:`ack` on the channel
    incarnation it came on (a stale one raises :class:`~amqp_sansio.client.StaleDeliveryError`
    or is ignored, as the policy says; it is never sent)."""

    _owner: MemoryConsumer | None = attrs.field(default=None, repr=False, eq=False, alias="owner")
    #: The epoch of the connection it came on.
    epoch: int = attrs.field(default=0, eq=False)
    _epoch_cell: Epoch | None = attrs.field(default=None, repr=False, eq=False, alias="epoch_cell")
    _came_on: ChannelBook | None = attrs.field(default=None, repr=False, eq=False, alias="came_on")

    def ack(self) -> bool:
        """Acknowledge it; False when it was stale and the policy ignores stale settles.

        :raises StaleDeliveryError: it came on a lost connection or channel.
        """
        owner = self._owner
        cell = self._epoch_cell
        came_on = self._came_on
        assert owner is not None
        assert cell is not None
        assert came_on is not None
        conn = owner.connection
        try:
            allowed = cell.allows(self.delivery_tag, self.epoch, superseded=came_on.superseded)
        except AMQPError:
            conn.refused_settles += 1
            raise
        if not allowed:
            conn.refused_settles += 1
            return False
        conn.core.send_method(came_on.number, BasicAck(delivery_tag=self.delivery_tag))
        return True


@final
class MemoryConsumer:
    """A consumer made with :meth:`MemoryConnection.consume`: the client layer's
    :class:`~amqp_sansio.client.ConsumerSink` with a buffer the workload takes messages from,
    as an adapter's consumer is (bounded the same way: paused past ``buffer_size`` when the
    broker does not bound it, never refusing a delivery)."""

    __slots__ = (
        "_buffer",
        "_over",
        "buffer_size",
        "channel",
        "connection",
        "dropped",
        "ended",
        "no_ack",
        "started",
        "tag",
    )

    def __init__(
        self, connection: MemoryConnection, channel: int, tag: str, buffer_size: int, no_ack: bool
    ) -> None:
        self.connection: Final = connection
        #: The logical channel it consumes on.
        self.channel: Final = channel
        self.tag: Final = tag
        self.buffer_size: Final = buffer_size
        self.no_ack: Final = no_ack
        self._buffer: deque[MemoryMessage] = deque()
        self._over = False
        #: Deliveries dropped at losses (not handed out; the broker requeued them).
        self.dropped = 0
        #: How it ended (None: our cancel), once it did; a consume the broker never confirmed
        #: (the link was cut first) ends with the loss's error, as an adapter's call raises it.
        self.ended: list[AMQPError | None] = []
        #: Whether the broker confirmed it (consume-ok).
        self.started = False

    def __repr__(self) -> str:
        return f"<MemoryConsumer {self.tag!r} {len(self._buffer)} buffered>"

    @property
    def buffered(self) -> int:
        """Deliveries not handed out yet."""
        return len(self._buffer)

    def take(self) -> MemoryMessage | None:
        """The next delivery, or None."""
        buffer = self._buffer
        if not buffer:
            return None
        message = buffer.popleft()
        if self._over and len(buffer) <= self.buffer_size // 2:
            self._over = False
            conn = self.connection
            conn.router.resume_consumer(conn.channel(self.channel), self.tag)
        return message

    # --- ConsumerSink -------------------------------------------------------------------------

    def deliver(self, event: MessageReceived, book: ChannelBook, /) -> bool:
        conn = self.connection
        buffer = self._buffer
        buffer.append(bound_message(MemoryMessage, event, self, conn.supervisor.epoch, book))
        if len(buffer) > self.buffer_size:
            self._over = True
            return False
        return True

    def finish(self, error: AMQPError | None, by_us: bool, /) -> None:
        self.ended.append(error)

    def cancelling(self) -> None:
        pass

    def drop_unhanded(self) -> int:
        if self.no_ack:
            return 0
        dropped = len(self._buffer)
        self._buffer.clear()
        self._over = False
        self.dropped += dropped
        return dropped


@final
class _ConsumeWaiter:
    """The waiter of :meth:`MemoryConnection.consume`: tells its consumer how it went."""

    __slots__ = ("_consumer",)

    def __init__(self, consumer: MemoryConsumer) -> None:
        self._consumer = consumer

    def done(self) -> bool:
        return False

    def set_result(self, result: Reply, /) -> None:
        self._consumer.started = True

    def set_exception(self, exception: BaseException, /) -> None:
        assert isinstance(exception, AMQPError)
        self._consumer.ended.append(exception)


@final
class MemoryConnection:
    """A client core joined to a server in memory through the client layer's
    :class:`~amqp_sansio.client.Router`, recovered by a
    :class:`~amqp_sansio.client.RecoverySupervisor` (on a virtual clock, :attr:`now`) under a
    :class:`~amqp_sansio.client.RecoveryPolicy` when the link is cut: an adapter without I/O.

    The application (a :class:`Workload`) sends through :meth:`open_channel`, :meth:`send`,
    :meth:`publish` and :meth:`settle` and sees the core's events, or consumes through
    :meth:`consume` and takes :class:`MemoryMessage`\\ s as an adapter's application does.
    Channel numbers given and taken are logical (the *first* connection's): :meth:`channel`
    maps them to the current connection's.

    :param server: the server factory.
    :param cut_after: cut the link when this many units (frames, or octets) crossed it, in
        either direction (once: recovery is never cut).
    :param unit: what *cut_after* counts.
    """

    def __init__(
        self,
        server: ServerFactory,
        *,
        config: ConnectionConfig | None = None,
        policy: RecoveryPolicy | None = None,
        cut_after: int | None = None,
        unit: Unit = "frame",
    ) -> None:
        self._server_factory = server
        self._config = config
        self.policy = policy or RecoveryPolicy(max_attempts=5, jitter=0)
        self._cut_after = cut_after
        self.unit: Unit = unit
        #: The virtual clock the supervisor's waits move.
        self.now = 0.0
        #: Units that crossed the link so far (counted across connections).
        self.moved = 0
        #: Units that crossed before both ends were open, on the first connection.
        self.handshake_units: int | None = None
        #: Every recovery so far, and every recovery event.
        self.recoveries: list[Recovered] = []
        self.events: list[RecoveryEvent] = []
        #: Settles refused because their delivery came on an older epoch or channel.
        self.refused_settles = 0
        #: basic.nack frames the server sent, and publish numbers the client reported nacked.
        self.server_nacks = 0
        self.client_nacks = 0
        #: Failed connection or recovery attempts, and the last one's error.
        self.failed_attempts = 0
        self.last_error: BaseException | None = None
        self.supervisor = self._new_supervisor()
        self._epoch = 0
        self.core: Connection = Connection(Role.CLIENT, config)
        self.router = self._new_router(self.core)
        self._served = self.core  # the last core that opened (and was restored)
        self.server: ServerSide = server()
        self._header_pending = True
        self._channels: list[int] = []  # logical channel numbers, in opening order
        self._map: dict[int, int] = {}  # logical -> current number
        self._lost = False
        self._lost_channels: LostChannels | None = None
        self._attempt_error: AMQPError | None = None
        self._backlog: list[Event] = []  # events that arrived while recovering

    def _new_supervisor(self) -> RecoverySupervisor[Router, ChannelBook]:
        return RecoverySupervisor(
            _MEMORY_PARAMS, self.policy, emit=self._emit, logger=logger, rng=random.Random(0)
        )

    def _new_router(self, core: Connection) -> Router:
        router = Router(core)
        self.supervisor.attach(router)
        return router

    def _emit(self, event: RecoveryEvent) -> None:
        self.events.append(event)
        if isinstance(event, Recovered):
            self.recoveries.append(event)
        elif isinstance(event, RecoveryAttempt):
            self.failed_attempts += 1
            self.last_error = event.error

    @property
    def epoch(self) -> int:
        """The epoch of the connection whose events :meth:`pump` hands out: 0 for the first,
        then the supervisor's, +1 each time one was lost. The workload stamps deliveries with
        it; a settle is checked against the supervisor's current epoch, which moves on as soon
        as a loss is seen."""
        return self._epoch

    # --- the application's calls --------------------------------------------------------------

    def channel(self, logical: int) -> int:
        """The current number of the channel first opened as *logical*."""
        return self._map[logical]

    def logical(self, number: int) -> int:
        """The logical number of the current connection's channel *number*."""
        for logical, current in self._map.items():
            if current == number:
                return logical
        return number

    @property
    def is_lost(self) -> bool:
        """Whether the link is cut and :meth:`recover` not called yet (sends then raise
        :class:`~amqp_sansio.client.ConnectionLostError`)."""
        return self._lost

    def _check_link(self) -> None:
        if self._lost:
            raise ConnectionLostError("the link is cut: recover() first")

    def open_channel(self) -> int:
        """Open a channel; returns its (logical) number."""
        self._check_link()
        number = self.core.open_channel()
        self.router.channel_opening(number, _NOTED)
        logical = max(self._map, default=0) + 1
        self._channels.append(logical)
        self._map[logical] = number
        return logical

    def send(self, channel: int, method: Method) -> None:
        """Send *method* on logical *channel*; its reply comes as an event."""
        self._check_link()
        number = self._map[channel]
        self.core.send_method(number, method)
        if method.expects_reply():
            self.router.expect(number, method, _NOTED)
        elif isinstance(method, ConfirmSelect):  # with nowait: in confirm mode all the same
            self.router.channels[number].confirm_mode = True

    def publish(
        self, channel: int, method: Method, properties: ContentProperties, body: Buffer
    ) -> int | None:
        """Publish on logical *channel*; returns the publish number (confirm mode)."""
        self._check_link()
        number = self._map[channel]
        publish_number = self.core.publish(number, method, properties, body)
        if publish_number is not None:  # the router counts what a loss leaves unknown
            self.router.expect_confirm(number, publish_number, _NOTED_CONFIRM)
            book = self.router.channels[number]
            if book.kept is not None:  # kept for republish_unknown, as the adapters keep it
                book.keep(publish_number, method, properties, body)
        return publish_number

    def consume(
        self,
        channel: int,
        queue: str,
        tag: str,
        *,
        no_ack: bool = False,
        buffer_size: int | None = None,
    ) -> MemoryConsumer:
        """``basic.consume`` on logical *channel*, its deliveries into a
        :class:`MemoryConsumer` (which carries on across recoveries)."""
        self._check_link()
        number = self._map[channel]
        book = self.router.channels[number]
        size = consumer_buffer_size(buffer_size, book.prefetch_count)
        consumer = MemoryConsumer(self, channel, tag, size, no_ack)
        method = BasicConsume(queue=queue, consumer_tag=tag, no_ack=no_ack)
        self.core.send_method(number, method)
        self.router.expect(number, method, _ConsumeWaiter(consumer), consumer)
        return consumer

    def settle(self, channel: int, method: Method, epoch: int) -> bool:
        """Send a ``basic.ack``, ``nack`` or ``reject`` of a delivery that came on *epoch*:
        refused (False, counted) when that epoch is over and the policy ignores stale settles.

        :raises StaleDeliveryError: the delivery is stale and the policy raises.
        """
        assert isinstance(method, BasicAck | BasicNack | BasicReject)
        try:
            allowed = check_settle(
                method.delivery_tag,
                epoch,
                self.supervisor.epoch.current,
                stale=self.policy.stale_settle,
            )
        except AMQPError:
            self.refused_settles += 1
            raise
        if not allowed:
            self.refused_settles += 1
            return False
        self.core.send_method(self._map[channel], method)
        return True

    # --- moving octets ------------------------------------------------------------------------

    def _cut_due(self) -> bool:
        return self._cut_after is not None and self.moved >= self._cut_after

    def _deliver(self, units: list[bytes], to_server: bool) -> bool:
        """Deliver *units* until the cut point; False when the link was cut."""
        if self._cut_after is None or self.moved + len(units) < self._cut_after:
            self.moved += len(units)
            self._receive(b"".join(units), to_server)
            return True
        for unit in units:
            if self._cut_due():
                return False
            self.moved += 1
            self._receive(unit, to_server)
        return not self._cut_due()

    def _receive(self, data: bytes, to_server: bool) -> None:
        if to_server:
            server = self.server
            try:
                server.core.receive_data(data)
                while (event := server.core.next_event()) is not NEED_DATA:
                    assert not isinstance(event, type(NEED_DATA))
                    server.handle(event)
            except RemoteProtocolError as exc:
                server.protocol_error(exc)
        else:
            self.core.receive_data(data)

    def _client_events(self) -> list[Event]:
        """The client core's events, routed as an adapter routes them: the supervisor's
        restoration first, then the router; what the application sees is returned."""
        events: list[Event] = []
        supervisor = self.supervisor
        router = self.router
        while True:
            event = self.core.next_event()
            if event is NEED_DATA:
                return events
            assert not isinstance(event, type(NEED_DATA))
            if isinstance(event, PublishNacked):
                self.client_nacks += len(event.publish_numbers)
            if supervisor.restoring:
                try:
                    if supervisor.handle(event):
                        continue
                except AMQPError as exc:
                    self._attempt_error = exc
            router.handle(event)
            if router.suspended is not None and not supervisor.recovering:
                if supervisor.attempting:
                    self._attempt_error = self._attempt_error or router.error
                elif self.handshake_units is not None:  # only a connection that opened
                    assert router.error is not None
                    self._lost_channels = LostChannels(router)
                    supervisor.lost(self._lost_channels, router.error, self.now)
            events.append(event)

    def cut(self) -> list[Event]:
        """Cut the link now: both ends see the end of the stream; returns the client's events
        (:class:`ConnectionLost` last). Call :meth:`recover` next."""
        self._cut_after = None
        self.server.lost()
        if self.core.state not in (ConnectionState.CLOSED, ConnectionState.ERROR):
            self.core.receive_data(b"")
        self._lost = True
        return self._client_events()

    def _move_once(self) -> tuple[bool, list[Event]]:
        """Move what each end queued once; (moved anything, the client's events)."""
        moved = False
        out = self.core.data_to_send()
        if out and self._cut_after is None and self.unit == "octet":
            # Nothing to cut: no need to split into octets, only to count them.
            moved = True
            self.moved += len(out)
            self._header_pending = False
            self._receive(out, to_server=True)
        elif out:
            moved = True
            units = _units(out, self._header_pending, self.unit)
            self._header_pending = False
            if not self._deliver(units, to_server=True):
                return True, self.cut()
        self.server.flush()
        out = self.server.core.data_to_send()
        events: list[Event] = []
        if out and self._cut_after is None and self.unit == "octet":
            moved = True
            self.moved += len(out)
            self.core.receive_data(out)
            events = self._client_events()
        elif out:
            moved = True
            units = _units(out, False, self.unit)
            if self.unit == "frame":
                self.server_nacks += sum(unit[7:11] == _BASIC_NACK for unit in units)
            delivered = self._deliver(units, to_server=False)
            events = self._client_events()
            if not delivered:
                return True, events + self.cut()
        return moved, events

    def pump(self) -> list[Event]:
        """Move octets both ways until neither end has anything to send; the client's events
        (those recovery did not take). A :class:`ConnectionLost` among them means the link was
        cut: call :meth:`recover`."""
        events, self._backlog = self._backlog, []
        for _ in range(_MAX_STEPS):
            moved, new = self._move_once()
            events += new
            if self._lost or not moved:
                return events
        raise AssertionError("the link never went quiet")

    # --- connecting and recovering ------------------------------------------------------------

    def _connect(self) -> list[Event]:
        """A new core and server side, through the handshake; raises when it did not open."""
        self.core = Connection(Role.CLIENT, self._config)
        self.router = self._new_router(self.core)
        self.server = self._server_factory()
        self._header_pending = True
        self._lost = False
        self._epoch = self.supervisor.epoch.current
        events = self.pump()
        if self.core.state is not ConnectionState.OPEN:
            if not self._lost:
                self.cut()
            error = self.router.error or ConnectionLostError("the handshake did not finish")
            raise error
        if self.handshake_units is None:
            self.handshake_units = self.moved
            self.supervisor.opened()
        return [e for e in events if not isinstance(e, ConnectionOpened)]

    def open(self) -> None:
        """Connect (retrying under the policy when the link is cut in the handshake: no
        connection opened yet, so nothing is recovered); the client's events after
        ``ConnectionOpened`` come with the next :meth:`pump`."""
        try:
            events = self._handshake_first()
            self._backlog.extend(events)
        except AMQPError as exc:
            self.failed_attempts += 1
            self.last_error = exc
            events = self._connect()
            self._backlog.extend(events)

    def _handshake_first(self) -> list[Event]:
        events = self.pump()
        if self.core.state is not ConnectionState.OPEN:
            if not self._lost:
                self.cut()
            raise ConnectionLostError(f"the handshake did not finish: {events}")
        self.handshake_units = self.moved
        self.supervisor.opened()
        return [e for e in events if not isinstance(e, ConnectionOpened)]

    def recover(self, lost: ConnectionLost | None = None) -> Recovered:
        """The link was cut (*lost* is the client's event): carry out the supervisor's actions
        until the connection is back with the old core's topology, channels and confirm mode
        (virtual time passes for its waits). Deliveries after this carry the next
        :attr:`epoch`; the events that came during recovery come with the next :meth:`pump`.
        After a give-up, calling it again starts over.

        :raises AssertionError: the restored topology differs from the lost one (up to new
            server-assigned names), the restore stalled, or the policy gave up.
        """
        supervisor = self.supervisor
        if supervisor.state is RecoveryState.CLOSED and self._lost_channels is not None:
            # Gave up before: start over (a new supervisor, from the same epoch).
            epoch = supervisor.epoch.current
            supervisor = self.supervisor = self._new_supervisor()
            supervisor.opened()
            supervisor.epoch.current = epoch - 1
            supervisor.lost(self._lost_channels, ConnectionLostError("the link was cut"), self.now)
        if not supervisor.recovering and not self._lost:
            self.cut()  # recovering a live connection: cut it first
        if not supervisor.recovering:
            raise AssertionError(f"nothing to recover: {self.router.error} does not recover")
        topology = self._served.topology
        while True:
            action = supervisor.next_action(self.now)
            if isinstance(action, Wait):
                self.now = action.until
                continue
            if isinstance(action, GiveUp):
                attempts = sum(isinstance(e, RecoveryAttempt) for e in self.events)
                raise AssertionError(f"recovery gave up after {attempts} attempts")
            if isinstance(action, Resume):
                return self._resume(action, topology)
            assert isinstance(action, Connect)
            self._attempt_error = None
            try:
                # (pump() hands out the backlog too: never `self._backlog += self.pump()`.)
                events = self._connect()
                supervisor.connected(self.router)
                # pump() moves octets until the link is quiet: the restore is done by then,
                # refused, cut, or stuck.
                events += self.pump()
                self._backlog = events
                if self._attempt_error is not None:
                    raise self._attempt_error
                if self._lost:
                    raise ConnectionLostError("the link was cut during recovery")
                if supervisor.restoring:
                    raise AssertionError(f"topology recovery stalled: {self._backlog}")
            except AMQPError as exc:
                if not self._lost:
                    self.cut()
                supervisor.attempt_failed(exc, self.now)

    def _resume(self, resume: Resume[ChannelBook], topology: Topology) -> Recovered:
        old_map = self._map
        self._map = {
            logical: resume.channels[number].number
            for logical, number in old_map.items()
            if number in resume.channels
        }
        recovered = self.supervisor.resume()
        self._served = self.core
        self._lost_channels = None
        if not recovered.skipped:
            renumbered = {old_map[logical]: new for logical, new in self._map.items()}
            renamed = dict(recovered.renamed_queues)
            _assert_same_topology(topology, self.core.topology, renamed, renumbered)
        return recovered


_MEMORY_PARAMS: Final = ConnectionParameters(host="memory", port=5672)


def _assert_same_topology(
    old: Topology, new: Topology, renamed: dict[str, str], channels: dict[int, int]
) -> None:
    """The restored topology is the lost one, up to new server-assigned queue names and new
    channel numbers."""

    def queue(name: str) -> str:
        return renamed.get(name, name)

    def sort(items: Sequence[Method]) -> list[str]:
        return sorted(repr(item) for item in items)

    expected = {
        "exchanges": dict(old.exchanges),
        "queues": {queue(name): declare for name, declare in old.queues.items()},
        "queue_bindings": sort([attrs.evolve(b, queue=queue(b.queue)) for b in old.queue_bindings]),
        "exchange_bindings": sort(list(old.exchange_bindings)),
        "consumers": {
            (channels.get(ch, ch), tag): repr(
                attrs.evolve(c, queue=queue(c.queue), consumer_tag=tag)
            )
            for (ch, tag), c in old.consumers.items()
        },
        "qos": {channels.get(ch, ch): settings for ch, settings in old.qos.items()},
    }
    actual = {
        "exchanges": dict(new.exchanges),
        "queues": dict(new.queues),
        "queue_bindings": sort(list(new.queue_bindings)),
        "exchange_bindings": sort(list(new.exchange_bindings)),
        "consumers": {
            key: repr(attrs.evolve(c, consumer_tag=key[1])) for key, c in new.consumers.items()
        },
        "qos": dict(new.qos),
    }
    for part, value in expected.items():
        if actual[part] != value:
            raise AssertionError(
                f"restored {part} differ: expected {value!r}, got {actual[part]!r}"
            )


# --- The sweep --------------------------------------------------------------------------------


class Workload(Protocol):
    """An application run by :func:`fault_sweep`, cut and recovered along the way."""

    def start(self, conn: MemoryConnection) -> None:
        """The first connection is open: begin (open channels, declare, publish...)."""

    def handle(self, conn: MemoryConnection, event: Event) -> None:
        """One client event (replies, deliveries, confirms) of the current connection."""

    def lost(self, conn: MemoryConnection, event: ConnectionLost) -> None:
        """The link was cut: *event* lists the requests and publishes left unanswered
        (their outcome is unknown)."""

    def recovered(self, conn: MemoryConnection, recovered: Recovered) -> None:
        """The connection is back with its topology; carry on (resend what was unanswered)."""

    def idle(self, conn: MemoryConnection) -> bool:
        """Nothing arrived and the link is quiet: act if there is something to do without an
        event (take what a consumer buffered); False when there is not."""
        ...

    @property
    def finished(self) -> bool:
        """Whether the workload reached its end."""
        ...

    def check(self, conn: MemoryConnection) -> None:
        """Assert the workload's invariants at the end (raise AssertionError)."""


@final
@attrs.frozen(kw_only=True)
class SweepReport:
    """What :func:`fault_sweep` ran.

    :ivar unit: what the cut points count.
    :ivar total: cut points there were (units crossing the link in an uncut run; for octets,
        those of the handshake).
    :ivar cut_points: the cut points run (all of them, or a sample).
    :ivar recoveries: recoveries over every run.
    :ivar refused_settles: stale settles refused locally over every run.
    :ivar failed_attempts: connection or recovery attempts that failed over every run.
    """

    unit: Unit
    total: int
    cut_points: tuple[int, ...]
    recoveries: int
    refused_settles: int
    failed_attempts: int


def run_workload(
    workload: Workload,
    server: ServerFactory,
    *,
    cut_after: int | None = None,
    unit: Unit = "frame",
    policy: RecoveryPolicy | None = None,
    config: ConnectionConfig | None = None,
) -> MemoryConnection:
    """Run *workload* to its end against *server*, cut once at *cut_after* and recovered;
    returns the connection (counters, :attr:`MemoryConnection.recoveries`).

    :raises AssertionError: an invariant failed: the workload's own, the restored topology,
        a nack the server did not send, a channel or connection the server closed, a stall.
    """
    conn = MemoryConnection(server, config=config, policy=policy, cut_after=cut_after, unit=unit)
    conn.open()
    workload.start(conn)
    events = conn.pump()
    for _ in range(_MAX_STEPS):
        for event in events:
            if isinstance(event, ConnectionLost | HeartbeatTimeout):
                assert isinstance(event, ConnectionLost)
                workload.lost(conn, event)
                workload.recovered(conn, conn.recover(event))
                break
            if isinstance(event, ChannelClosed | ConnectionClosed) and event.by_peer:
                raise AssertionError(f"the server closed: {event!r}")
            if isinstance(event, ChannelOpened):
                continue
            workload.handle(conn, event)
        if workload.finished:
            break
        events = conn.pump()
        if (
            not events
            and not conn.core.outbound_size
            and not workload.idle(conn)
            and not _finished(workload)  # its end may be the broker's (an ack it took)
        ):
            raise AssertionError("the workload stalled")
    else:
        raise AssertionError("the workload never finished")
    if conn.client_nacks > conn.server_nacks and conn.unit == "frame":
        raise AssertionError(
            f"{conn.client_nacks} publishes reported nacked, the server nacked "
            f"{conn.server_nacks} frames' worth"
        )
    workload.check(conn)
    return conn


def _finished(workload: Workload) -> bool:
    return workload.finished


def fault_sweep(
    workload: Callable[[], Workload],
    server: Callable[[], ServerFactory],
    *,
    unit: Unit = "frame",
    sample: int | None = None,
    seed: int = 0,
    policy: RecoveryPolicy | None = None,
    config: ConnectionConfig | None = None,
) -> SweepReport:
    """Run a fresh *workload* against a fresh server once per cut point, cut there, recovered,
    run to its end, with the invariants checked (see :func:`run_workload`).

    Cut points: every frame crossing the link in an uncut run (``unit="frame"``), or every octet
    of the handshake (``unit="octet"``). *sample* runs that many of them (the first and last
    included, the rest drawn with *seed*); None runs them all.

    :param workload: makes a new workload per run.
    :param server: makes a new server per run (``amqp_broker.memory_server``); each of its
        results is a :data:`ServerFactory`.
    :raises AssertionError: naming the cut point whose run broke an invariant.
    """
    baseline = run_workload(workload(), server(), unit=unit, policy=policy, config=config)
    if unit == "octet":
        assert baseline.handshake_units is not None
        total = baseline.handshake_units
    else:
        total = baseline.moved
    points = list(range(total))
    if sample is not None and sample < total:
        rng = random.Random(seed)
        middle = rng.sample(points[1:-1], max(sample - 2, 0))
        points = sorted({points[0], points[-1], *middle})
    recoveries = refused = failed = 0
    for point in points:
        try:
            conn = run_workload(
                workload(), server(), cut_after=point, unit=unit, policy=policy, config=config
            )
        except (AssertionError, AMQPError, LocalProtocolError, RemoteProtocolError) as exc:
            raise AssertionError(f"cut after {unit} {point} of {total}: {exc}") from exc
        recoveries += len(conn.recoveries)
        refused += conn.refused_settles
        failed += conn.failed_attempts
    return SweepReport(
        unit=unit,
        total=total,
        cut_points=tuple(points),
        recoveries=recoveries,
        refused_settles=refused,
        failed_attempts=failed,
    )
