"""Helpers for AMQP 0-10 protocol tests without sockets, shaped like :mod:`amqp_sansio.testing`:
a client/server :class:`ConnectionPair`, feeders (whole, one octet at a time, in random pieces),
frame builders and a parser for asserting on the wire.

A typical test::

    pair = ConnectionPair(byte_at_a_time=True)
    pair.handshake()
    client, server = pair.attach("s1")
    client.transfer("amq.direct", b"hi", headers=[DeliveryProperties(routing_key="q")])
    [message] = pair.transfer(pair.client)      # the server's MessageReceived
    server.complete(message.command_id)
    pair.transfer(pair.server)                   # the client's CommandsCompleted
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, final

from .._errors import ProtocolError
from .._events import NEED_DATA, Sentinel
from .._method import Role
from ..client._errors import AMQPError, ConnectionLostError
from ..client._params import ConnectionParameters
from ..client._recovery import Recovered, RecoveryEvent, RecoveryPolicy, StaleDeliveryError
from ..client._supervisor import Connect, GiveUp, RecoverySupervisor, Resume, Wait
from ._connection import Connection, ConnectionConfig
from ._events import AuthenticationRequested, Event, SessionOpened, VirtualHostRequested
from ._framing import (
    FRAME_HEADER_SIZE,
    PROTOCOL_HEADER_0_10,
    Assembly,
    AssemblyReader,
    FrameReader,
    encode_command,
    encode_control,
)
from ._generated.spec_0_10 import MIN_MAX_FRAME_SIZE, QueueDeclare
from ._state import ConnectionState
from .client._core import ClientCore, ClientSession, Pending, SubscriptionCore
from .client._message import Message, Properties
from .client._recovery import LostSessions

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from .._method import Buffer
    from ._session import Session
    from ._types import Command, Control, Struct

__all__ = [
    "BacklogTransfer010",
    "ConnectionPair",
    "MemoryConnection010",
    "ServerFactory010",
    "ServerSide010",
    "command_frames",
    "control_frames",
    "fault_sweep_0_10",
    "feed",
    "feed_in_pieces",
    "get_all_events",
    "parse_assemblies",
    "run_backlog_0_10",
]


_logger: Final = logging.getLogger("amqp_sansio.testing")


def get_all_events(conn: Connection) -> list[Event]:
    """Call ``next_event()`` until it returns ``NEED_DATA``."""
    events: list[Event] = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            return events
        events.append(event)


def feed(conn: Connection, data: bytes, *, byte_at_a_time: bool = False) -> list[Event]:
    """Give *data* to *conn* (whole, or one octet at a time draining events after each) and
    return every event it produced. ``b""`` feeds the end of the stream."""
    if not byte_at_a_time or not data:
        conn.receive_data(data)
        return get_all_events(conn)
    events: list[Event] = []
    for index in range(len(data)):
        conn.receive_data(data[index : index + 1])
        events += get_all_events(conn)
    return events


def feed_in_pieces(
    conn: Connection, data: bytes, pieces: random.Random | Iterable[int]
) -> list[Event]:
    """Give *data* to *conn* in pieces, draining events after each, and return every event.

    *pieces* is the sizes of the pieces in order (below 1 counts as 1; the rest goes in one
    piece when they run out), or a seeded :class:`random.Random` drawing sizes of 1 to 64.
    """
    if not data:
        return feed(conn, data)
    if isinstance(pieces, random.Random):
        rng = pieces
        sizes: Iterable[int] = iter(lambda: rng.randint(1, 64), 0)
    else:
        sizes = pieces
    events: list[Event] = []
    offset = 0
    for size in sizes:
        if offset >= len(data):
            break
        end = offset + max(size, 1)
        conn.receive_data(data[offset:end])
        events += get_all_events(conn)
        offset = end
    if offset < len(data):
        conn.receive_data(data[offset:])
        events += get_all_events(conn)
    return events


def parse_assemblies(data: Buffer) -> list[Assembly]:
    """The controls and commands in *data* (what a core wrote), decoded.

    A leading 0-10 protocol header is skipped.

    :raises ValueError: *data* ends inside a frame or an assembly.
    :raises RemoteProtocolError: *data* is not valid framing.
    """
    view = memoryview(data)
    if bytes(view[:8]) == PROTOCOL_HEADER_0_10:
        view = view[8:]
    frames = FrameReader()
    assemblies = AssemblyReader()
    frames.feed(view)
    out: list[Assembly] = []
    channels: set[int] = set()
    while (frame := frames.next_frame()) is not None:
        channels.add(frame.channel)
        assembly = assemblies.receive(frame)
        if assembly is not None:
            out.append(assembly)
    if frames.buffered:
        raise ValueError(f"{frames.buffered} octets after the last whole frame")
    if any(assemblies.in_progress(channel) for channel in channels):
        raise ValueError("the data ends inside an assembly")
    return out


def control_frames(
    channel: int, control: Control, *, max_frame_size: int = MIN_MAX_FRAME_SIZE
) -> bytes:
    """The octets of one control."""
    out = bytearray()
    encode_control(out, channel, control, max_frame_size)
    return bytes(out)


def command_frames(
    channel: int,
    command: Command,
    *,
    sync: bool = False,
    headers: Sequence[Struct] | None = None,
    body: Buffer | None = None,
    max_frame_size: int = MIN_MAX_FRAME_SIZE,
) -> bytes:
    """The octets of one command assembly (its command id is implicit: the receiving session
    gives it the next one)."""
    out = bytearray()
    encode_command(out, channel, command, max_frame_size, sync=sync, headers=headers, body=body)
    return bytes(out)


@final
class ConnectionPair:
    """A 0-10 client core and server core joined by a perfect in-memory link.

    Nothing moves by itself: :meth:`transfer` moves what one side queued to the other and
    returns the events the receiver produced, so a test sees every step. Everything moved is
    also kept in ``client_sent`` and ``server_sent``, for replaying a conversation into one
    role (fuzzing, regression tests).
    """

    def __init__(
        self,
        client_config: ConnectionConfig | None = None,
        server_config: ConnectionConfig | None = None,
        *,
        byte_at_a_time: bool = False,
    ) -> None:
        self.client = Connection(Role.CLIENT, client_config)
        self.server = Connection(Role.SERVER, server_config)
        self.byte_at_a_time = byte_at_a_time
        self.client_sent = bytearray()
        self.server_sent = bytearray()

    def peer(self, conn: Connection) -> Connection:
        """The other end of *conn*."""
        return self.server if conn is self.client else self.client

    def transfer(self, sender: Connection) -> list[Event]:
        """Move everything *sender* queued to its peer; return the peer's events (none when
        nothing was queued: an empty transfer is not an end of stream)."""
        data = self._take(sender)
        if not data:
            return []
        return feed(self.peer(sender), data, byte_at_a_time=self.byte_at_a_time)

    def _take(self, sender: Connection) -> bytes:
        data = sender.data_to_send()
        (self.client_sent if sender is self.client else self.server_sent).extend(data)
        return data

    def exchange(self, first: Connection | None = None, *, rounds: int = 50) -> list[Event]:
        """Move data both ways, starting with *first* (default the client), until neither side
        has anything to send; return every event in order."""
        sender = self.client if first is None else first
        events: list[Event] = []
        idle = 0
        for _ in range(rounds):
            data = self._take(sender)
            receiver = self.peer(sender)
            if data:
                events += feed(receiver, data, byte_at_a_time=self.byte_at_a_time)
                idle = 0
            else:
                idle += 1
                if idle == 2:
                    return events
            sender = receiver
        raise AssertionError(f"the peers still talk after {rounds} rounds: {events}")

    def handshake(self) -> tuple[list[Event], list[Event]]:
        """Run the handshake to ``open-ok``, the server accepting any credentials and virtual
        host. Returns the client's and the server's events."""
        client_events: list[Event] = []
        server_events: list[Event] = []
        for _ in range(10):
            moved = self.transfer(self.client)
            while moved:
                server_events += moved
                for event in moved:
                    if isinstance(event, AuthenticationRequested):
                        self.server.accept_authentication()
                    elif isinstance(event, VirtualHostRequested):
                        self.server.accept_virtual_host()
                moved = get_all_events(self.server)
            client_events += self.transfer(self.server)
            if (
                self.client.state is ConnectionState.OPEN
                and self.server.state is ConnectionState.OPEN
            ):
                return client_events, server_events
        raise AssertionError(f"handshake did not finish: {client_events}, {server_events}")

    def attach(self, name: bytes | str = b"session") -> tuple[Session, Session]:
        """Attach a session from the client and move the controls until both ends opened it.

        :raises AssertionError: either end did not report :class:`SessionOpened`.
        """
        session = self.client.attach(name)
        server_events = self.transfer(self.client)
        client_events = self.transfer(self.server)
        opened = [e for e in server_events if isinstance(e, SessionOpened)]
        if not opened or not any(isinstance(e, SessionOpened) for e in client_events):
            raise AssertionError(f"session {name!r} did not open: {server_events}, {client_events}")
        # The client's command-point is still queued: deliver it.
        leftover = self.transfer(self.client)
        if leftover:
            raise AssertionError(f"unexpected events after attaching: {leftover}")
        return session, self.server.session(opened[0].channel)


# --- Recovery in memory: a 0-10 client against a server factory, its link cut -------------------


class ServerSide010(Protocol):
    """The server's end of one in-memory 0-10 connection (``amqp_broker.memory_server_0_10``
    gives them)."""

    @property
    def core(self) -> Connection:
        """The server-role core the client's octets go to."""
        ...

    def handle(self, event: Event, /) -> None:
        """Act on one event of :attr:`core`."""

    def lost(self) -> None:
        """The link was cut: forget the connection (release what it held)."""

    def queue_counts(self, queue: str, /) -> tuple[int, int]:
        """The queue's ready messages, and those this connection holds unaccepted."""
        ...


ServerFactory010: TypeAlias = "Callable[[], ServerSide010]"


def _units_0_10(data: bytes, header: bool) -> list[bytes]:
    """*data* cut into frames (a leading protocol header is one unit)."""
    units: list[bytes] = []
    offset = 0
    if header:
        units.append(data[:8])
        offset = 8
    size = len(data)
    while offset < size:
        if size - offset < FRAME_HEADER_SIZE:
            units.append(data[offset:])
            break
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        units.append(data[offset : offset + max(length, FRAME_HEADER_SIZE)])
        offset += max(length, FRAME_HEADER_SIZE)
    return units


_MEMORY_PARAMS: Final = ConnectionParameters(host="memory", port=5672)
_MAX_STEPS: Final = 100_000


@final
class MemoryConnection010:
    """A 0-10 client (:class:`~amqp_sansio.v0_10.client.ClientCore`) joined to a server in
    memory, recovered by the client layer's
    :class:`~amqp_sansio.client.RecoverySupervisor` on a virtual clock when the link is cut
    (once, after *cut_after* frames crossed it in either direction): the 0-10 counterpart of
    :class:`amqp_sansio.testing.MemoryConnection`.

    The workload uses :attr:`client` as an adapter does (attach, execute, transfer,
    subscribe, take, accept); sessions are named by their first channel (:meth:`session`
    maps it to the current one).
    """

    def __init__(
        self,
        server: ServerFactory010,
        *,
        policy: RecoveryPolicy | None = None,
        cut_after: int | None = None,
    ) -> None:
        self._server_factory = server
        self.policy = policy or RecoveryPolicy(max_attempts=5, jitter=0)
        self._cut_after = cut_after
        self.now = 0.0
        self.moved = 0
        self.recoveries: list[Recovered] = []
        self.events: list[RecoveryEvent] = []
        self.supervisor: RecoverySupervisor[ClientCore, ClientSession] = RecoverySupervisor(
            _MEMORY_PARAMS, self.policy, emit=self._emit, rng=random.Random(0), logger=_logger
        )
        self.client = self._new_client()
        self.server: ServerSide010 = server()
        self._headers = [True, True]  # a protocol header leads each direction
        self._lost = False
        self._opened = False
        self._sessions: dict[int, ClientSession] = {}  # first channel -> current session

    def _new_client(self) -> ClientCore:
        client = ClientCore(_MEMORY_PARAMS, wake=_nothing)
        client.epochs = self.supervisor.epoch
        client.recover_on = self.supervisor.recover_on
        return client

    def _emit(self, event: RecoveryEvent) -> None:
        self.events.append(event)
        if isinstance(event, Recovered):
            self.recoveries.append(event)

    @property
    def is_lost(self) -> bool:
        """Whether the link is cut and not recovered yet."""
        return self._lost

    @property
    def epoch(self) -> int:
        return self.supervisor.epoch.current

    def session(self, first: int) -> ClientSession:
        """The current session of the one first attached on channel *first*."""
        return self._sessions[first]

    def attach(self, name: str) -> int:
        """Attach a session; returns its first channel (its name for :meth:`session`)."""
        session = self.client.attach(name)
        session.attached = Pending()
        self._sessions[session.channel] = session
        return session.channel

    # --- moving octets ------------------------------------------------------------------------

    def _deliver(self, units: list[bytes], to_server: bool) -> bool:
        for unit in units:
            if self._cut_after is not None and self.moved >= self._cut_after:
                return False
            self.moved += 1
            if to_server:
                core = self.server.core
                with contextlib.suppress(ProtocolError):
                    core.receive_data(unit)
                    while (event := core.next_event()) is not NEED_DATA:
                        assert not isinstance(event, Sentinel)
                        self.server.handle(event)
            else:
                self.client.receive_data(unit, self.now)
        return True

    def _move_once(self) -> bool:
        client = self.client
        client.flush_settlements()
        out = client.conn.data_to_send()
        moved = bool(out)
        if out:
            header, self._headers[0] = self._headers[0], False
            if not self._deliver(_units_0_10(out, header), to_server=True):
                self.cut()
                return True
        out = self.server.core.data_to_send()
        if out:
            moved = True
            header, self._headers[1] = self._headers[1], False
            delivered = self._deliver(_units_0_10(out, header), to_server=False)
            self._process()
            if not delivered:
                self.cut()
        return moved

    def _process(self) -> None:
        client = self.client
        client.process()
        supervisor = self.supervisor
        if supervisor.restoring:
            supervisor.handle(None)  # raises a refused step: the attempt fails
        if client.suspended and not supervisor.recovering and self._opened:
            assert client.error is not None
            supervisor.lost(LostSessions(client), client.error, self.now)

    def pump(self) -> None:
        """Move octets both ways until neither end has anything to send."""
        for _ in range(_MAX_STEPS):
            if self._lost or not self._move_once():
                return
        raise AssertionError("the link never went quiet")

    def cut(self) -> None:
        """Cut the link now: both ends see the end of the stream."""
        self._cut_after = None
        self.server.lost()
        if self.client.error is None:
            self.client.receive_data(b"")
            self._process()
        self._lost = True

    # --- connecting and recovering ------------------------------------------------------------

    def open(self) -> None:
        """Connect (a cut in the first handshake connects again: nothing was open)."""
        for _ in range(3):
            self.pump()
            if self.client.open_info is not None and not self._lost:
                self._opened = True
                self.supervisor.opened()
                return
            self._fresh()
        raise AssertionError("the first connection never opened")

    def _fresh(self) -> None:
        self.client = self._new_client()
        self.server = self._server_factory()
        self._headers = [True, True]
        self._lost = False

    def recover(self) -> Recovered:
        """Carry out the supervisor's actions until the connection is back (virtual time
        passes for its waits).

        :raises AssertionError: recovery gave up, or a restore stalled.
        """
        supervisor = self.supervisor
        if not supervisor.recovering:
            raise AssertionError("nothing to recover")
        while True:
            action = supervisor.next_action(self.now)
            if isinstance(action, Wait):
                self.now = action.until
                continue
            if isinstance(action, GiveUp):
                raise AssertionError(f"recovery gave up: {action.cause}")
            if isinstance(action, Resume):
                self._sessions = {
                    first: action.channels[session.channel]
                    for first, session in self._sessions.items()
                    if session.channel in action.channels
                }
                return supervisor.resume()
            assert isinstance(action, Connect)
            self._fresh()
            try:
                self.pump()
                if self.client.open_info is None or self._lost:
                    raise self.client.error or ConnectionLostError("the handshake failed")
                supervisor.connected(self.client)
                self._process()
                self.pump()
                if self._lost:
                    raise ConnectionLostError("the link was cut during recovery")
                if supervisor.restoring:
                    raise AssertionError(f"the restore stalled: {supervisor!r}")
            except AMQPError as exc:
                if not self._lost:
                    self.cut()
                supervisor.attempt_failed(exc, self.now)


def _nothing() -> None:
    pass


@final
class BacklogTransfer010:
    """The 0-10 backlog workload: *count* durable transfers to *queue* (each synced: 0-10's
    confirm), the first ``(backlog + 1) * credit`` before the subscription starts; the
    application holds *held* messages and accepts the oldest as it takes a new one, and each
    accept lets one more transfer go. Checks, after any cut: every completed transfer accepted
    at least once, no message of the live connection refused as stale, the broker holding for
    the client exactly what it buffered or holds, and the queue empty at the end.
    """

    def __init__(
        self,
        *,
        queue: str = "sweep.backlog010",
        credit: int = 5,
        backlog: int = 3,
        count: int = 40,
        held: int = 2,
    ) -> None:
        self.queue: Final = queue
        self.credit: Final = credit
        self.count: Final = count
        self.held_limit: Final = held
        self._initial = (backlog + 1) * credit
        self._session = 0
        self._declare: Pending | None = None
        self.subscription: SubscriptionCore | None = None
        self._next_id = 0
        self._retry: list[int] = []
        self._outstanding: list[tuple[Pending, int]] = []
        self.confirmed: set[int] = set()
        self.accepted: set[int] = set()
        self.held: list[Message] = []
        self.stale_refused = 0
        self.checked = 0
        self.violations: list[str] = []

    def start(self, conn: MemoryConnection010) -> None:
        self._session = conn.attach("sweep")

    def step(self, conn: MemoryConnection010) -> bool:
        """Act once on what arrived; False when there was nothing to do."""
        if conn.is_lost:
            return False
        session = conn.session(self._session)
        if not session.attached.done:
            return False
        did = False
        if self._declare is None:
            self._declare = Pending()
            session.execute(QueueDeclare(queue=self.queue, durable=True), self._declare)
            return True
        if not self._declare.done:
            return False
        if self._declare.error is not None:  # lost before its completion: not recorded
            self._declare = None
            return True
        for pending, ident in list(self._outstanding):
            if pending.done:
                self._outstanding.remove((pending, ident))
                if pending.error is None:
                    self.confirmed.add(ident)
                else:
                    self._retry.append(ident)  # unknown: send it again (at least once)
                did = True
        did = self._transfer(session, len(self.accepted) + self._initial) or did
        if self.subscription is None and len(self.confirmed) >= self._initial:
            self.subscription = session.subscribe(
                self.queue, "sweep.destination", Pending(), prefetch=self.credit
            )
            return True
        return self._take_one(conn) or did

    def _transfer(self, session: ClientSession, up_to: int) -> bool:
        did = False
        while self._retry or self._next_id < min(up_to, self.count):
            if self._retry:
                ident = self._retry.pop(0)
            else:
                ident = self._next_id
                self._next_id += 1
            pending = Pending()
            properties = Properties(persistent=True)
            headers = properties.header_segment(self.queue, len(b"%d" % ident))
            session.transfer("", b"%d" % ident, headers, pending)
            self._outstanding.append((pending, ident))
            did = True
        return did

    def _take_one(self, conn: MemoryConnection010) -> bool:
        sub = self.subscription
        if sub is None:
            return False
        message = sub.take()
        if message is None:
            if self.held and not sub.buffer and self._drained():
                self._accept(conn, self.held.pop(0))
                return True
            return False
        self.held.append(message)
        while len(self.held) > self.held_limit:
            self._accept(conn, self.held.pop(0))
        return True

    def _drained(self) -> bool:
        return self._next_id >= self.count and not self._outstanding and not self._retry

    def _accept(self, conn: MemoryConnection010, message: Message) -> None:
        epoch = message.epoch
        try:
            message.accept()
        except StaleDeliveryError:
            self.stale_refused += 1
            if epoch == conn.epoch:
                self.violations.append(f"transfer {message.command_id} of the live connection")
            return
        self.accepted.add(int(message.body))

    def lost(self, conn: MemoryConnection010) -> None:
        """The link was cut: what the application held came on the lost connection."""

    def recovered(self, conn: MemoryConnection010) -> None:
        held, self.held = self.held, []
        for message in held:
            self._accept(conn, message)
        if self.subscription is not None and self.subscription.error is not None:
            self.violations.append(f"the subscription ended: {self.subscription.error}")

    def check_accounts(self, conn: MemoryConnection010) -> None:
        """With the link quiet: the broker holds unaccepted exactly what the client buffered
        or holds of the live connection."""
        sub = self.subscription
        if sub is None or conn.is_lost or conn.supervisor.recovering:
            return
        _, unaccepted = conn.server.queue_counts(self.queue)
        live = sum(1 for m in self.held if m.epoch == conn.epoch)
        self.checked += 1
        if unaccepted != len(sub.buffer) + live:
            self.violations.append(
                f"the broker holds {unaccepted} unaccepted, the client {len(sub.buffer)} "
                f"buffered and {live} in hand"
            )

    def finished(self, conn: MemoryConnection010) -> bool:
        sub = self.subscription
        return (
            len(self.confirmed) == self.count
            and self.confirmed <= self.accepted
            and not self.held
            and not self._outstanding
            and sub is not None
            and not sub.buffer
            and conn.server.queue_counts(self.queue) == (0, 0)
        )

    def check(self, conn: MemoryConnection010) -> None:
        assert not self.violations, self.violations
        assert self.checked, "the broker's accounts were never checked"
        assert self.confirmed == set(range(self.count))
        assert conn.server.queue_counts(self.queue) == (0, 0)


def run_backlog_0_10(
    server: Callable[[], ServerFactory010], *, cut_after: int | None = None
) -> tuple[MemoryConnection010, BacklogTransfer010]:
    """Run :class:`BacklogTransfer010` against a fresh *server*, cut once at *cut_after*
    frames and recovered; its invariants checked.

    :raises AssertionError: an invariant failed, or the run stalled.
    """
    workload = BacklogTransfer010()
    conn = MemoryConnection010(server(), cut_after=cut_after)
    conn.open()
    workload.start(conn)
    for _ in range(_MAX_STEPS):
        conn.pump()
        if conn.is_lost:
            workload.lost(conn)
            conn.recover()
            workload.recovered(conn)
            continue
        if workload.finished(conn):
            break
        workload.check_accounts(conn)
        if not workload.step(conn):
            conn.pump()
            if not workload.step(conn) and not workload.finished(conn):
                raise AssertionError(f"the workload stalled: {workload.confirmed}")
    else:
        raise AssertionError("the workload never finished")
    workload.check(conn)
    return conn, workload


def fault_sweep_0_10(server: Callable[[], ServerFactory010]) -> tuple[int, int]:
    """:class:`BacklogTransfer010` cut at every frame boundary (each run fresh), recovered
    and checked; returns (cut points, recoveries).

    :raises AssertionError: naming the cut point whose run broke an invariant.
    """
    total = run_backlog_0_10(server)[0].moved
    recoveries = 0
    for point in range(total):
        try:
            conn, _ = run_backlog_0_10(server, cut_after=point)
        except (AssertionError, AMQPError, ProtocolError) as exc:
            raise AssertionError(f"cut after frame {point} of {total}: {exc}") from exc
        recoveries += len(conn.recoveries)
    return total, recoveries
