"""A client against a server in memory, its link cut at a chosen frame or octet, recovered with
the client layer's recovery plan; and the sweep that cuts a workload at every point.

The core never imports a broker: :class:`MemoryConnection` and :func:`fault_sweep` take a
*server factory* (``amqp_broker.memory_server`` is one) whose calls give the server side of each
new connection (:class:`ServerSide`).
"""

from __future__ import annotations

import random
import struct
from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeAlias, final

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
    PublishNacked,
)
from .._generated.spec_0_9_1 import BasicAck, BasicNack, BasicReject, ConfirmSelect
from .._method import Role
from .._state import ConnectionState
from ..client._errors import AMQPError, ConnectionLostError
from ..client._recovery import (
    Recovered,
    RecoveryPlan,
    RecoveryPolicy,
    TopologyRestorer,
    check_settle,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._method import Buffer, ContentProperties, Method
    from .._topology import Topology

__all__ = [
    "MemoryConnection",
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
class MemoryConnection:
    """A client core joined to a server in memory, recovered under a
    :class:`~amqp_sansio.client.RecoveryPolicy` when the link is cut.

    The application (a :class:`Workload`) sends through :meth:`open_channel`, :meth:`send`,
    :meth:`publish` and :meth:`settle`, which keep what recovery needs (the channels in order,
    which are in confirm mode) and refuse settling a delivery from an older :attr:`epoch`.
    Channel numbers given and taken are the *first* connection's: :meth:`channel` maps them.

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
        #: Units that crossed the link so far (counted across connections).
        self.moved = 0
        #: Units that crossed before both ends were open, on the first connection.
        self.handshake_units: int | None = None
        #: 0 for the first connection, +1 each time a connection is lost; deliveries carry it.
        self.epoch = 0
        #: Every recovery so far.
        self.recoveries: list[Recovered] = []
        #: Settles refused because their delivery came on an older epoch.
        self.refused_settles = 0
        #: basic.nack frames the server sent, and publish numbers the client reported nacked.
        self.server_nacks = 0
        self.client_nacks = 0
        #: Failed connection or recovery attempts, and the last one's error.
        self.failed_attempts = 0
        self.last_error: AMQPError | None = None
        self.core: Connection = Connection(Role.CLIENT, config)
        self._served = self.core  # the last core that opened (and was restored)
        self.server: ServerSide = server()
        self._header_pending = True
        self._channels: list[int] = []  # logical channel numbers, in opening order
        self._confirm: set[int] = set()
        self._map: dict[int, int] = {}  # logical -> current number
        self._restorer: TopologyRestorer | None = None
        self._lost = False
        self._backlog: list[Event] = []  # events that arrived while recovering

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
        logical = number if self.epoch == 0 else max(self._map, default=0) + 1
        self._channels.append(logical)
        self._map[logical] = number
        return logical

    def send(self, channel: int, method: Method) -> None:
        """Send *method* on logical *channel* (``confirm.select`` is remembered)."""
        self._check_link()
        if isinstance(method, ConfirmSelect):
            self._confirm.add(channel)
        self.core.send_method(self._map[channel], method)

    def publish(
        self, channel: int, method: Method, properties: ContentProperties, body: Buffer
    ) -> int | None:
        """Publish on logical *channel*; returns the publish number (confirm mode)."""
        self._check_link()
        return self.core.publish(self._map[channel], method, properties, body)

    def settle(self, channel: int, method: Method, epoch: int) -> bool:
        """Send a ``basic.ack``, ``nack`` or ``reject`` of a delivery that came on *epoch*:
        refused (False, counted) when that epoch is over and the policy ignores stale settles.

        :raises StaleDeliveryError: the delivery is stale and the policy raises.
        """
        assert isinstance(method, BasicAck | BasicNack | BasicReject)
        # Once the link is cut the connection's epoch is over, though its events may still
        # be on their way to the application.
        current = self.epoch + 1 if self._lost else self.epoch
        try:
            allowed = check_settle(
                method.delivery_tag, epoch, current, stale=self.policy.stale_settle
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
        events: list[Event] = []
        while True:
            event = self.core.next_event()
            if event is NEED_DATA:
                return events
            assert not isinstance(event, type(NEED_DATA))
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
            for event in new:
                if isinstance(event, PublishNacked):
                    self.client_nacks += len(event.publish_numbers)
                restorer = self._restorer
                if restorer is not None and not restorer.done and restorer.handle(event):
                    continue
                events.append(event)
            if self._lost or not moved:
                return events
        raise AssertionError("the link never went quiet")

    # --- connecting and recovering ------------------------------------------------------------

    def _handshake(self) -> list[Event]:
        events = self.pump()
        if self.core.state is not ConnectionState.OPEN:
            raise ConnectionLostError(f"the handshake did not finish: {events}")
        if self.handshake_units is None:
            self.handshake_units = self.moved
        return [e for e in events if not isinstance(e, ConnectionOpened)]

    def open(self) -> None:
        """Connect (retrying under the policy when the link is cut in the handshake); the
        client's events after ``ConnectionOpened`` come with the next :meth:`pump`."""
        try:
            self._backlog += self._handshake()
        except AMQPError as exc:
            self._lost = True
            self.failed_attempts += 1
            self.last_error = exc
            self._backlog += self._reconnect(None, 0)

    def recover(self, lost: ConnectionLost | None = None) -> Recovered:
        """The link was cut (*lost* is the client's event): reconnect and restore the topology
        (the old core's record, its channels and confirm mode). Deliveries after this carry
        the next :attr:`epoch`; the events that came during recovery come with the next
        :meth:`pump`.

        :raises AssertionError: the restored topology differs from the lost one (up to new
            server-assigned names), or the policy gave up.
        """
        unknown = 0 if lost is None else len(lost.unconfirmed_publishes)
        # The topology of the last connection that opened (a failed attempt's core has none).
        self._backlog += self._reconnect(self._served.topology, unknown)
        return self.recoveries[-1]

    def _reconnect(self, topology: Topology | None, unknown: int) -> list[Event]:
        policy = self.policy
        attempt = 0
        while True:
            attempt += 1
            if policy.gives_up(attempt - 1, 0.0):
                raise AssertionError(f"recovery gave up after {attempt - 1} attempts")
            self.core = Connection(Role.CLIENT, self._config)
            self.server = self._server_factory()
            self.epoch += 1
            self._header_pending = True
            self._lost = False
            try:
                events = self._handshake()
                if topology is not None:
                    events += self._restore(topology, attempt, unknown)
                self._served = self.core
                return events
            except AMQPError as exc:
                self.failed_attempts += 1
                self.last_error = exc
                if not self._lost:
                    self.cut()

    def _restore(self, topology: Topology, attempt: int, unknown: int) -> list[Event]:
        plan = RecoveryPlan(
            topology, channels=self._channels, confirm_channels=self._confirm, policy=self.policy
        )
        restorer = self._restorer = TopologyRestorer(self.core, plan, self.policy)
        restorer.start()
        # pump() moves octets until the link is quiet: the plan is done by then, or stuck.
        events = self.pump()
        if self._lost:
            raise ConnectionLostError("the link was cut during recovery")
        if not restorer.done:
            raise AssertionError(f"topology recovery stalled: {plan!r}, events {events}")
        self._restorer = None
        self._map = {logical: restorer.channel_map[logical] for logical in self._channels}
        if not plan.skipped:
            _assert_same_topology(topology, self.core.topology, plan.renamed, self._map)
        self.recoveries.append(
            Recovered(
                attempt=attempt,
                epoch=self.epoch,
                renamed_queues=dict(plan.renamed),
                unknown_publishes=unknown,
                skipped=tuple(plan.skipped),
            )
        )
        return events


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
        if not events and not conn.core.data_to_send() and not workload.finished:
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
