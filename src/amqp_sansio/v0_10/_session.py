"""One AMQP 0-10 session: command ids, completion, results, exceptions and message credit.

A session is attached to a channel. Both ends send and receive commands; each direction numbers
its commands implicitly, counting up from the ``session.command-point`` its sender announced,
modulo 2**32 (RFC 1982 serial numbers). Inside the core ids are kept "unwrapped" (plain ints
that keep counting past 2**32), so ordering is plain integer ordering; the wire and the
application see them modulo 2**32.

Receiving commands, the session:

* completes them (the client role when they are handed out, the server role when the
  application calls :meth:`Session.complete` or :meth:`Session.send_result`; ``execution.sync``
  when every earlier command is complete) and reports the completed set with
  ``session.completed`` when the peer asks (a command with the sync bit, ``execution.sync``,
  ``session.flush``) or needs it (a window-mode sender that would run out of credit); with
  ``ConnectionConfig.eager_completion`` (the client role's default) also whenever the received
  octets are used up (``next_event`` returning ``NEED_DATA``);
* trims that set by the peer's ``known-completed`` and answers ``expected``/``confirmed``.

Sending commands, it keeps the commands not yet completed, ties ``execution.result`` to its
command, answers ``completed`` with ``known-completed`` (at once if the peer asked for a timely
reply; otherwise merged into the next flush with ``eager_completion``, and not at all without
it, as qpidd: qpid.messaging cannot read a ``known-completed`` it did not ask for), returns
window-mode credit on completion, and refuses (:class:`~amqp_sansio.LocalProtocolError`, nothing
written) a transfer that the destination's credit does not cover. Byte credit counts the header
segment and the body, as qpidd does. Every ``ConnectionConfig.sync_every``-th command sent
without the sync bit gets it, so that a peer reporting only when asked (qpidd, qpid-python)
lets us drop the commands we keep until their completion.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Final, final

import attrs

from .._method import Role
from ._events import (
    CommandReceived,
    CommandsCompleted,
    ExceptionRaised,
    MessageReceived,
    ResultReceived,
)
from ._framing import PASSTHROUGH, command_buffers, encode_header_segment, frame_command
from ._generated.spec_0_10 import (
    AcceptMode,
    AcquireMode,
    CreditUnit,
    DetachCode,
    ExecutionException,
    ExecutionResult,
    ExecutionSync,
    FlowMode,
    MessageAccept,
    MessageAcquire,
    MessageCancel,
    MessageFlow,
    MessageFlush,
    MessageReject,
    MessageRelease,
    MessageSetFlowMode,
    MessageStop,
    MessageSubscribe,
    MessageTransfer,
    SessionCommandPoint,
    SessionCompleted,
    SessionConfirmed,
    SessionDetach,
    SessionExpected,
    SessionFlush,
    SessionGap,
    SessionKnownCompleted,
    SessionRequestTimeout,
    SessionTimeout,
)
from ._state import SessionState
from ._types import SERIAL_MODULUS, Command, SequenceSet

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .._method import Buffer
    from ._connection import Connection
    from ._events import Event
    from ._framing import Assembly
    from ._types import Control, Map, Struct

__all__ = ["UNLIMITED", "Credit", "Session"]

_MASK: Final = SERIAL_MODULUS - 1
_HALF: Final = SERIAL_MODULUS >> 1
#: ``message.flow``'s value for infinite credit.
UNLIMITED: Final = 0xFFFF_FFFF
_new: Final = object.__new__

# Commands the core itself acts on when it receives them (beyond handing them out).
_CREDIT_COMMANDS: Final = (MessageSetFlowMode, MessageFlow, MessageStop)


def _unwrap(wire: int, ref: int) -> int:
    """The unwrapped id nearest to *ref* whose low 32 bits are *wire*."""
    return ref + ((wire - ref + _HALF) & _MASK) - _HALF


#: Completed ranges up to this many ids are checked id by id; wider ones by bisection.
_SCAN_RANGE: Final = 64


@final
class _Ranges:
    """A set of unwrapped ids as sorted, merged, inclusive ``[low, high]`` ranges."""

    __slots__ = ("highs", "lows")

    def __init__(self) -> None:
        self.lows: list[int] = []
        self.highs: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.lows)

    def add(self, low: int, high: int) -> None:
        lows = self.lows
        highs = self.highs
        if lows and low == highs[-1] + 1:  # the usual case: the next id in order
            highs[-1] = high
            return
        if not lows or low > highs[-1] + 1:
            lows.append(low)
            highs.append(high)
            return
        # Ranges that touch or overlap [low, high] are merged into it.
        first = bisect.bisect_left(highs, low - 1)
        last = bisect.bisect_right(lows, high + 1)
        if first < last:
            low = min(low, lows[first])
            high = max(high, highs[last - 1])
        lows[first:last] = [low]
        highs[first:last] = [high]

    def discard(self, low: int, high: int) -> None:
        lows = self.lows
        highs = self.highs
        first = bisect.bisect_left(highs, low)
        last = bisect.bisect_right(lows, high)
        if first >= last:
            return
        new_lows: list[int] = []
        new_highs: list[int] = []
        if lows[first] < low:
            new_lows.append(lows[first])
            new_highs.append(low - 1)
        if highs[last - 1] > high:
            new_lows.append(high + 1)
            new_highs.append(highs[last - 1])
        lows[first:last] = new_lows
        highs[first:last] = new_highs

    def __contains__(self, n: int) -> bool:
        index = bisect.bisect_right(self.lows, n) - 1
        return index >= 0 and n <= self.highs[index]

    def __len__(self) -> int:
        return len(self.lows)

    def to_set(self) -> SequenceSet:
        return SequenceSet(
            (low & _MASK, high & _MASK) for low, high in zip(self.lows, self.highs, strict=True)
        )


def _wire_ranges(ids: Sequence[int]) -> SequenceSet:
    """The wire set of ascending unwrapped *ids*, built from their runs."""
    ranges: list[tuple[int, int]] = []
    start = prev = ids[0]
    for n in ids[1:]:
        if n != prev + 1:
            ranges.append((start & _MASK, prev & _MASK))
            start = n
        prev = n
    ranges.append((start & _MASK, prev & _MASK))
    return SequenceSet(ranges)


@final
@attrs.frozen(kw_only=True, slots=True)
class Credit:
    """What a destination may still be sent: ``mode`` is a ``FlowMode``, ``messages`` and
    ``octets`` the balances (``UNLIMITED`` for infinite credit)."""

    mode: int
    messages: int
    octets: int


@final
class _Flow:
    """Credit balances of one destination: granted to us (we send) or by us (we receive)."""

    __slots__ = ("messages", "mode", "octets", "pending_messages", "pending_octets")

    def __init__(self, mode: int) -> None:
        self.mode = mode
        self.messages = 0
        self.octets = 0
        # Receiving side, window mode: completions of this destination's transfers not yet
        # reported to the sender.
        self.pending_messages = 0
        self.pending_octets = 0

    def add(self, unit: int, value: int | None) -> None:
        if unit == CreditUnit.BYTE:
            self.octets = _add_credit(self.octets, value)
        else:
            self.messages = _add_credit(self.messages, value)

    def zero(self) -> None:
        self.messages = self.octets = 0


def _add_credit(balance: int, value: int | None) -> int:
    if value is None or value == UNLIMITED or balance == UNLIMITED:
        return UNLIMITED
    return min(balance + value, UNLIMITED)


@final
class Session:
    """A session on one channel of a :class:`Connection` (``Connection.attach`` returns it;
    ``Connection.session(channel)`` finds one the peer attached).

    Every send writes into the connection's outbound buffer (read it with
    ``Connection.data_to_send()``) and returns the command's id, the key of the later
    :class:`CommandsCompleted`, :class:`ResultReceived` and :class:`ExceptionRaised` events.
    Sends raise :class:`~amqp_sansio.LocalProtocolError` (nothing written) when the session or
    the connection can't send, the role may not send the command, a value can't be encoded, or
    a transfer exceeds the destination's credit.
    """

    __slots__ = (
        "_auto_complete",
        "_completed",
        "_conn",
        "_credit",
        "_eager",
        "_grants",
        "_in_first",
        "_in_next",
        "_incomplete",
        "_known_pending",
        "_out_next",
        "_outstanding",
        "_since_ask",
        "_sizes",
        "_state",
        "_sync_every",
        "_syncs",
        "_unreported",
        "_window_sent",
        "channel",
        "name",
    )

    def __init__(self, conn: Connection, channel: int, name: bytes, state: SessionState) -> None:
        self._conn = conn
        #: The channel the session is attached to.
        self.channel: Final = channel
        #: The session's name.
        self.name: Final = name
        self._state = state
        self._auto_complete = conn._auto_complete
        self._eager = conn._eager_completion
        # Commands we receive (unwrapped ids). _in_next is None until command-point.
        self._in_first = 0
        self._in_next: int | None = None
        self._incomplete: dict[int, tuple[Command, bool]] = {}  # id -> (command, sync bit)
        self._syncs: list[int] = []  # execution.sync ids waiting for earlier commands
        self._sizes: dict[int, int] = {}  # incomplete transfers' sizes, while we grant credit
        self._completed = _Ranges()  # completed, not known-completed by the peer
        self._unreported = False
        # Commands we send.
        self._out_next = conn.config.first_command_id
        self._outstanding: dict[int, Command] = {}
        self._since_ask = 0  # commands sent since the last one with the sync bit
        self._sync_every = conn.config.sync_every
        self._window_sent: dict[int, tuple[str, int]] = {}  # id -> (destination, octets)
        self._known_pending = _Ranges()
        # Message credit: granted to us per destination (we send transfers) and by us.
        self._credit: dict[str, _Flow] = {}
        self._grants: dict[str, _Flow] = {}

    def __repr__(self) -> str:
        return f"<Session {self.name!r} channel={self.channel} state={self._state.value}>"

    # --- Introspection ------------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The session's state."""
        return self._state

    @property
    def next_command_id(self) -> int:
        """The id our next command will get."""
        return self._out_next & _MASK

    @property
    def incomplete_commands(self) -> tuple[int, ...]:
        """Ids of our commands the peer has not reported complete, in order."""
        return tuple(n & _MASK for n in self._outstanding)

    @property
    def incomplete_received(self) -> tuple[int, ...]:
        """Ids of the peer's commands not completed yet (manual completion), in order."""
        return tuple(n & _MASK for n in sorted(self._incomplete))

    def credit(self, destination: str) -> Credit | None:
        """The credit the peer granted for transfers to *destination*; None when it never
        sent flow control for it (no limit), except in the server role, where a destination
        is a subscription and transfers need one."""
        flow = self._credit.get(destination)
        if flow is None:
            return None
        return Credit(mode=flow.mode, messages=flow.messages, octets=flow.octets)

    # --- Sending commands ---------------------------------------------------------------------

    def send(
        self,
        command: Command,
        *,
        sync: bool = False,
        headers: Sequence[Struct] | None = None,
        body: Buffer | None = None,
    ) -> int:
        """Send *command* (with the ``session.header`` sync bit when *sync*) and return its id.

        *headers* and *body* become the header and body segments of the commands that have
        them (``message.transfer``: prefer :meth:`transfer`). ``execution.result`` and
        ``execution.exception`` go through :meth:`send_result` and :meth:`raise_exception`.
        """
        conn = self._conn
        conn._check_usable()
        cls = type(command)
        if cls is ExecutionResult or cls is ExecutionException:
            helper = "send_result" if cls is ExecutionResult else "raise_exception"
            raise conn._local(f"send {cls.NAME} with Session.{helper}()", cls)
        return self._send(command, sync, headers, body)

    def _send(
        self,
        command: Command,
        sync: bool,
        headers: Sequence[Struct] | None,
        body: Buffer | None,
    ) -> int:
        conn = self._conn
        cls = type(command)
        if self._state is not SessionState.ATTACHED:
            raise conn._local(
                f"cannot send {cls.NAME}: session {self.name!r} on channel {self.channel} is "
                f"{self._state.value}",
                cls,
            )
        if conn.role not in cls.SENT_BY:
            raise conn._local(f"the {conn.role.value} role cannot send {cls.NAME}", cls)
        if (headers is not None or body is not None) and not cls.SEGMENTS:
            raise conn._local(f"{cls.NAME} has no header or body segments", cls)
        if not sync and self._sync_every:
            # we keep the command until its completion: ask for it now and then
            self._since_ask += 1
            sync = self._since_ask >= self._sync_every
        if sync:
            self._since_ask = 0
        segment = bytearray()
        header: bytearray | None = None
        try:  # into buffers of our own: nothing is written if a value does not encode
            command.encode(segment, sync)
            if headers is not None:
                header = bytearray()
                encode_header_segment(header, headers)
            body_size = 0 if body is None else memoryview(body).nbytes
        except Exception as exc:
            raise conn._local(f"cannot encode {cls.NAME}: {exc!r}", cls) from None
        window: tuple[str, int] | None = None
        if cls is MessageTransfer:
            assert isinstance(command, MessageTransfer)
            window = self._take_credit(command, (0 if header is None else len(header)) + body_size)
        if body is not None and body_size >= PASSTHROUGH:
            conn._write_buffers(
                command_buffers(self.channel, segment, header, body, conn.max_frame_size)
            )
        else:
            frame_command(conn._out, self.channel, segment, header, body, conn.max_frame_size)
        command_id = self._out_next
        self._out_next = command_id + 1
        self._outstanding[command_id] = command
        if window is not None:
            self._window_sent[command_id] = window
        if cls in _CREDIT_COMMANDS or cls is MessageCancel:
            self._sent_flow_command(command)
        return command_id & _MASK

    def _take_credit(self, command: MessageTransfer, size: int) -> tuple[str, int] | None:
        """Spend the credit a transfer of *size* octets (header and body segments) needs;
        return what window mode gives back on its completion."""
        conn = self._conn
        destination = command.destination or ""
        flow = self._credit.get(destination)
        if flow is None:
            if conn.role is Role.SERVER:
                raise conn._local(
                    f"no subscription {destination!r} on session {self.name!r}: a server "
                    "transfers to the destinations its client subscribed",
                    MessageTransfer,
                )
            return None
        if not _covers(flow, size):
            raise conn._local(
                f"no credit to transfer {size} octets to {destination!r} (messages "
                f"{flow.messages}, octets {flow.octets}): wait for message.flow",
                MessageTransfer,
            )
        if flow.messages != UNLIMITED:
            flow.messages -= 1
        if flow.octets != UNLIMITED:
            flow.octets -= size
        return (destination, size) if flow.mode == FlowMode.WINDOW else None

    def _sent_flow_command(self, command: Command) -> None:
        """Track the credit we grant (for the completion batching of window mode)."""
        if isinstance(command, MessageCancel):
            self._grants.pop(command.destination or "", None)
            return
        destination = getattr(command, "destination", None) or ""
        grant = self._grants.get(destination)
        if grant is None:
            grant = self._grants[destination] = _Flow(FlowMode.WINDOW)
        if isinstance(command, MessageSetFlowMode):
            grant.mode = command.flow_mode or 0
            grant.zero()
        elif isinstance(command, MessageFlow):
            grant.add(command.unit or 0, command.value)
        elif isinstance(command, MessageStop):
            grant.zero()

    def transfer(
        self,
        destination: str = "",
        body: Buffer = b"",
        *,
        headers: Sequence[Struct] = (),
        accept_mode: int = AcceptMode.NONE,
        acquire_mode: int = AcquireMode.PRE_ACQUIRED,
        sync: bool = False,
    ) -> int:
        """Send ``message.transfer``: the header segment holds *headers* (none when empty),
        the body segment *body*. Bodies of 64 KiB or more are written as memoryview slices
        (``buffers_to_send``): don't change them until they were written."""
        self._conn._check_usable()
        command = _new(MessageTransfer)
        command.destination = destination
        command.accept_mode = accept_mode
        command.acquire_mode = acquire_mode
        return self._send(command, sync, headers or None, body)

    def accept(self, transfers: SequenceSet | Iterable[int] | int, *, sync: bool = False) -> int:
        """``message.accept`` of received transfers (their command ids)."""
        return self.send(MessageAccept(transfers=self._received_ids(transfers)), sync=sync)

    def reject(
        self,
        transfers: SequenceSet | Iterable[int] | int,
        code: int = 0,
        text: str | None = None,
        *,
        sync: bool = False,
    ) -> int:
        """``message.reject`` of received transfers."""
        ids = self._received_ids(transfers)
        return self.send(MessageReject(transfers=ids, code=code, text=text), sync=sync)

    def release(
        self,
        transfers: SequenceSet | Iterable[int] | int,
        *,
        set_redelivered: bool = False,
        sync: bool = False,
    ) -> int:
        """``message.release`` of received transfers."""
        ids = self._received_ids(transfers)
        return self.send(MessageRelease(transfers=ids, set_redelivered=set_redelivered), sync=sync)

    def acquire(self, transfers: SequenceSet | Iterable[int] | int, *, sync: bool = False) -> int:
        """``message.acquire`` of received transfers; its result is an ``Acquired``."""
        return self.send(MessageAcquire(transfers=self._received_ids(transfers)), sync=sync)

    def _received_ids(self, transfers: SequenceSet | Iterable[int] | int) -> SequenceSet:
        """*transfers* as a set, checked to name commands received on this session."""
        conn = self._conn
        try:
            if isinstance(transfers, SequenceSet):
                ids = transfers
            elif isinstance(transfers, int):
                ids = SequenceSet.of(transfers)
            else:
                ids = SequenceSet(transfers)
        except ValueError as exc:
            raise conn._local(f"not a set of command ids: {exc}") from None
        if not ids:
            raise conn._local("an empty set of transfers")
        first, top = self._in_first, self._in_next
        for low, high in ids.ranges:
            ulow = -1 if top is None else _unwrap(low, top - 1)
            uhigh = ulow + ((high - low) & _MASK)
            if top is None or ulow < first or uhigh >= top:
                raise conn._local(
                    f"transfers {low}..{high} were not received on session {self.name!r}"
                )
        return ids

    def subscribe(
        self,
        queue: str,
        destination: str,
        *,
        accept_mode: int = AcceptMode.EXPLICIT,
        acquire_mode: int = AcquireMode.PRE_ACQUIRED,
        exclusive: bool = False,
        arguments: Map | None = None,
        sync: bool = False,
    ) -> int:
        """``message.subscribe``; then set the flow mode and grant credit (:meth:`flow`)."""
        return self.send(
            MessageSubscribe(
                queue=queue,
                destination=destination,
                accept_mode=accept_mode,
                acquire_mode=acquire_mode,
                exclusive=exclusive,
                arguments=arguments,
            ),
            sync=sync,
        )

    def set_flow_mode(self, destination: str, mode: int, *, sync: bool = False) -> int:
        """``message.set-flow-mode`` (``FlowMode.CREDIT`` or ``FlowMode.WINDOW``)."""
        return self.send(MessageSetFlowMode(destination=destination, flow_mode=mode), sync=sync)

    def flow(
        self, destination: str, unit: int, value: int | None = UNLIMITED, *, sync: bool = False
    ) -> int:
        """``message.flow``: grant *value* (``UNLIMITED``: infinite) of ``CreditUnit`` *unit*."""
        return self.send(MessageFlow(destination=destination, unit=unit, value=value), sync=sync)

    def stop(self, destination: str, *, sync: bool = False) -> int:
        """``message.stop``: the sender zeroes its credit for *destination*."""
        return self.send(MessageStop(destination=destination), sync=sync)

    def sync(self) -> int:
        """Send ``execution.sync`` with the sync bit: its completion (a
        :class:`CommandsCompleted` holding the returned id) means every earlier command of
        ours is complete."""
        return self.send(ExecutionSync(), sync=True)

    # --- Completing the peer's commands ---------------------------------------------------------

    def complete(self, commands: SequenceSet | Iterable[int] | int, *, report: bool = True) -> None:
        """Complete received commands (their ids) and report them to the peer at once.

        Needed in the server role (manual completion, see ``ConnectionConfig.auto_complete``),
        after a command took effect; completing an id twice does nothing. *report* False
        leaves the report to the next ``session.completed`` the core sends anyway (a command
        with the sync bit, ``execution.sync``, a flush, window credit the peer needs back, or
        with ``ConnectionConfig.eager_completion`` ``next_event`` running out of received
        octets): one control for a burst of transfers rather than one each.
        """
        conn = self._conn
        conn._check_usable()
        ids = self._received_ids(commands)
        top = self._in_next
        assert top is not None
        done: list[int] = []
        for low, high in ids.ranges:
            ulow = _unwrap(low, top - 1)
            uhigh = ulow + ((high - low) & _MASK)
            if uhigh - ulow < len(self._incomplete):
                done += (n for n in range(ulow, uhigh + 1) if n in self._incomplete)
            else:
                done += (n for n in self._incomplete if ulow <= n <= uhigh)
        for n in done:
            self._complete(n)
        if report and self._unreported:
            self._report()

    def send_result(self, command_id: int, value: Struct | None) -> int:
        """Send ``execution.result`` for the peer's command *command_id*, then complete it
        (the result must reach the peer before the completion), reported at once with
        ``ConnectionConfig.eager_completion`` or when the command asked for it (sync bit)."""
        conn = self._conn
        conn._check_usable()
        top = self._in_next
        unwrapped = -1 if top is None else _unwrap(command_id, top - 1)
        entry = self._incomplete.get(unwrapped)
        if entry is None:
            raise conn._local(f"command {command_id} is not an incomplete command of the peer")
        sent = self._send(ExecutionResult(command_id=command_id, value=value), False, None, None)
        if self._mark_complete(unwrapped) or self._eager:
            self._report()
        return sent

    def raise_exception(
        self,
        error_code: int,
        description: str | None = None,
        *,
        command_id: int | None = None,
        field_index: int | None = None,
        error_info: Map | None = None,
    ) -> int:
        """Send ``execution.exception`` about the peer's command *command_id* (or none), then
        ``request-timeout(0)`` and ``detach``: the session's state is dropped, as the spec
        requires of the peer raising an exception. Returns the exception's command id; a
        :class:`SessionEnded` follows when the peer answers."""
        conn = self._conn
        conn._check_usable()
        command: Command | None = None
        if command_id is not None and self._in_next is not None:
            entry = self._incomplete.get(_unwrap(command_id, self._in_next - 1))
            command = None if entry is None else entry[0]
        exception = ExecutionException(
            error_code=error_code,
            command_id=command_id,
            class_code=None if command is None else command.CLASS_CODE,
            command_code=None if command is None else command.CODE,
            field_index=field_index,
            description=description,
            error_info=error_info,
        )
        sent = self._send(exception, False, None, None)
        self._fail_and_detach()
        return sent

    def _fail_and_detach(self) -> None:
        conn = self._conn
        conn._send_control(self.channel, SessionRequestTimeout(timeout=0))
        conn._send_control(self.channel, SessionDetach(name=self.name))
        self._state = SessionState.DETACHING

    def flush(
        self, *, expected: bool = False, confirmed: bool = False, completed: bool = True
    ) -> None:
        """Send ``session.flush``: ask the peer for its expected, confirmed and completed sets
        (the last arrives as :class:`CommandsCompleted`)."""
        self._conn._check_usable()
        self._check_attached("flush")
        self._conn._send_control(
            self.channel, SessionFlush(expected=expected, confirmed=confirmed, completed=completed)
        )

    def detach(self) -> None:
        """Send ``session.detach``; :class:`SessionEnded` follows the peer's ``detached``.
        Sessions are not resumed: send :meth:`sync` first and wait for its completion to know
        every command was executed."""
        conn = self._conn
        conn._check_usable()
        if self._state in (SessionState.DETACHING, SessionState.DETACHED):
            raise conn._local(f"session {self.name!r} is already {self._state.value}")
        conn._send_control(self.channel, SessionDetach(name=self.name))
        self._state = SessionState.DETACHING

    def _check_attached(self, what: str) -> None:
        if self._state is not SessionState.ATTACHED:
            raise self._conn._local(f"cannot {what}: session {self.name!r} is {self._state.value}")

    # --- The core's side: completion ------------------------------------------------------

    def _complete(self, n: int) -> None:
        """Complete received command *n* (unwrapped) and the execution.syncs it unblocks;
        report at once if any of them had the sync bit."""
        if self._mark_complete(n):
            self._report()

    def _mark_complete(self, n: int) -> bool:
        """Complete *n* and what it unblocks; whether one of them asked for a sync report."""
        entry = self._incomplete.pop(n, None)
        if entry is None:
            return False
        self._completed.add(n, n)
        if not self._unreported:
            self._unreported = True
            if self._eager:
                self._conn._mark_dirty(self)
        command, sync = entry
        cls = type(command)
        # execution.sync asks for the report by its nature, with or without the sync bit
        sync = sync or cls is ExecutionSync
        if cls is MessageTransfer and self._sizes:
            assert isinstance(command, MessageTransfer)
            size = self._sizes.pop(n, None)
            if size is not None and self._count_window(command.destination or "", size):
                sync = True
        if cls is MessageFlush:
            assert isinstance(command, MessageFlush)
            flow = self._credit.get(command.destination or "")
            if flow is not None:
                flow.zero()
        syncs = self._syncs
        while syncs:
            first = syncs[0]
            if any(other < first for other in self._incomplete):
                break
            syncs.pop(0)
            sync = self._mark_complete(first) or sync
        return sync

    def _release_syncs(self) -> None:
        """Complete the execution.syncs no earlier command holds back any more."""
        syncs = self._syncs
        report = False
        while syncs and not any(n < syncs[0] for n in self._incomplete):
            report = self._mark_complete(syncs.pop(0)) or report
        if report:
            self._report()

    def _report(self) -> None:
        """Send ``session.completed`` with every completed id the peer does not know of."""
        if self._state is SessionState.DETACHED:
            return
        completed = self._completed
        self._unreported = False
        for grant in self._grants.values():
            grant.pending_messages = grant.pending_octets = 0
        # A fragmented set asks for known-completed at once so it shrinks again.
        self._conn._send_control(
            self.channel,
            SessionCompleted(commands=completed.to_set(), timely_reply=len(completed) > 1),
        )

    def flush_pending(self) -> None:
        """At the end of the received octets: report completions, answer known-completed."""
        if self._state is SessionState.DETACHED:
            return
        if self._unreported:
            self._report()
        if self._known_pending:
            pending = self._known_pending
            self._known_pending = _Ranges()
            self._conn._send_control(self.channel, SessionKnownCompleted(commands=pending.to_set()))

    # --- The core's side: received commands ---------------------------------------------

    def on_command(self, assembly: Assembly) -> Event | None:
        """A command assembly from the peer: number it, act on it, hand it out."""
        command = assembly.op
        assert isinstance(command, Command)
        conn = self._conn
        if self._state is not SessionState.ATTACHED:
            return None  # detaching or failed: the peer's commands are not executed
        top = self._in_next
        if top is None:
            # command data before any command-point: the spec's unknown-ids detach
            return conn._detach_session(self, DetachCode.UNKNOWN_IDS)
        self._in_next = top + 1
        command_id = top & _MASK
        cls = type(command)
        sync = assembly.sync
        if cls is MessageTransfer:
            assert isinstance(command, MessageTransfer)
            return self._on_transfer(top, command_id, command, assembly)
        if conn._peer not in cls.SENT_BY:
            return self._raise_core_exception(
                top,
                command,
                sync,
                503,
                f"the {conn._peer.value} role cannot send {cls.NAME}",
            )
        self._incomplete[top] = (command, sync)
        if cls is ExecutionSync:
            self._syncs.append(top)
            self._release_syncs()
            return None
        if cls is ExecutionResult:
            assert isinstance(command, ExecutionResult)
            self._complete(top)
            return self._on_result(command)
        if cls is ExecutionException:
            assert isinstance(command, ExecutionException)
            self._complete(top)
            return self._on_exception(command)
        if cls in _CREDIT_COMMANDS or cls is MessageSubscribe or cls is MessageCancel:
            self._on_flow_command(command)
            if cls is not MessageSubscribe and cls is not MessageCancel:
                self._complete(top)  # the core applied it
        if self._auto_complete and cls.RESULT is None and top in self._incomplete:
            self._complete(top)
        return CommandReceived(
            channel=self.channel,
            command_id=command_id,
            command=command,
            sync=sync,
            headers=assembly.headers,
            body=assembly.body,
        )

    def _on_transfer(
        self, top: int, command_id: int, command: MessageTransfer, assembly: Assembly
    ) -> MessageReceived:
        size = assembly.size
        if self._auto_complete:
            completed = self._completed
            if completed.lows and top == completed.highs[-1] + 1:
                completed.highs[-1] = top
            else:
                completed.add(top, top)
            if assembly.sync:
                self._report()
            else:
                if not self._unreported:
                    self._unreported = True
                    if self._eager:
                        self._conn._dirty.add(self)
                if self._grants and self._count_window(command.destination or "", size):
                    self._report()
            if self._syncs:
                self._release_syncs()
        else:
            self._incomplete[top] = (command, assembly.sync)
            if self._grants:
                self._sizes[top] = size  # for the window, when the application completes it
        event = _new(MessageReceived)
        event.channel = self.channel
        event.command_id = command_id
        event.transfer = command
        event.headers = assembly.headers or ()
        body = assembly.body
        event.body = b"" if body is None else body
        event.sync = assembly.sync
        event.size = size
        return event

    def _count_window(self, destination: str, size: int) -> bool:
        """A transfer to a window-mode destination we granted credit for was completed:
        whether to report now, before the sender could run out of window (half of it used)."""
        grant = self._grants.get(destination)
        if grant is None or grant.mode != FlowMode.WINDOW:
            return False
        grant.pending_messages += 1
        grant.pending_octets += size
        return (grant.messages != UNLIMITED and 2 * grant.pending_messages >= grant.messages) or (
            grant.octets != UNLIMITED and 2 * grant.pending_octets >= grant.octets
        )

    def _on_flow_command(self, command: Command) -> None:
        """The peer (receiver of our transfers) changed the credit of a destination."""
        destination = getattr(command, "destination", None) or ""
        if isinstance(command, MessageSubscribe):
            # A new subscription: window mode, zero credit (the spec's defaults).
            self._credit[destination] = _Flow(FlowMode.WINDOW)
            return
        if isinstance(command, MessageCancel):
            self._credit.pop(destination, None)
            return
        flow = self._credit.get(destination)
        if flow is None:
            flow = self._credit[destination] = _Flow(FlowMode.WINDOW)
        if isinstance(command, MessageSetFlowMode):
            flow.mode = command.flow_mode or 0
            flow.zero()
            self._forget_window(destination)
        elif isinstance(command, MessageFlow):
            flow.add(command.unit or 0, command.value)
        elif isinstance(command, MessageStop):
            flow.zero()
            self._forget_window(destination)

    def _forget_window(self, destination: str) -> None:
        """After ``stop`` (or a new flow mode) the completion of transfers sent before it no
        longer moves the window (qpidd; ``test_window_stop`` in qpid's suite)."""
        window = self._window_sent
        if window:
            for n in [n for n, sent in window.items() if sent[0] == destination]:
                del window[n]

    def _on_result(self, command: ExecutionResult) -> ResultReceived:
        request = None
        cid = command.command_id
        if cid is not None:
            request = self._outstanding.get(_unwrap(cid, self._out_next - 1))
        return ResultReceived(
            channel=self.channel,
            command_id=0 if cid is None else cid,
            request=request,
            value=command.value,
        )

    def _on_exception(self, command: ExecutionException) -> ExceptionRaised:
        request = None
        cid = command.command_id
        if cid is not None:
            request = self._outstanding.get(_unwrap(cid, self._out_next - 1))
        self._state = SessionState.FAILED
        return ExceptionRaised(
            channel=self.channel, exception=command, request=request, by_peer=True
        )

    def _raise_core_exception(
        self, top: int, command: Command, sync: bool, code: int, text: str
    ) -> ExceptionRaised:
        """The peer's command *top* is invalid: raise an exception about it and detach."""
        exception = ExecutionException(
            error_code=code,
            command_id=top & _MASK,
            class_code=command.CLASS_CODE,
            command_code=command.CODE,
            description=text,
        )
        self._send(exception, False, None, None)
        self._fail_and_detach()
        return ExceptionRaised(
            channel=self.channel, exception=exception, request=command, by_peer=False
        )

    # --- The core's side: session controls -----------------------------------------------

    def on_control(self, control: Control) -> Event | None:
        """A session control other than attach/attached/detach/detached."""
        conn = self._conn
        cls = type(control)
        if cls is SessionCommandPoint:
            assert isinstance(control, SessionCommandPoint)
            if control.command_offset:
                raise conn._remote(
                    f"command-point with offset {control.command_offset}: resuming a "
                    "partly sent command is not supported (sessions are not resumed)",
                    cls,
                )
            first = control.command_id or 0
            if self._in_next is not None:
                first = _unwrap(first, self._in_next)
            conn._abort_partial(self.channel)
            self._in_first = self._in_next = first
            return None
        if cls is SessionCompleted:
            assert isinstance(control, SessionCompleted)
            return self._on_completed(control)
        if cls is SessionKnownCompleted:
            assert isinstance(control, SessionKnownCompleted)
            if control.commands is not None and self._in_next is not None:
                for low, high in control.commands.ranges:
                    ulow = _unwrap(low, self._in_next - 1)
                    self._completed.discard(ulow, ulow + ((high - low) & _MASK))
            return None
        if cls is SessionFlush:
            assert isinstance(control, SessionFlush)
            self._on_flush(control)
            return None
        if cls is SessionRequestTimeout:
            # We keep no state for detached sessions: the largest timeout we grant is 0.
            conn._send_control(self.channel, SessionTimeout(timeout=0))
            return None
        if cls is SessionGap:
            assert isinstance(control, SessionGap)
            self._on_gap(control)
            return None
        # timeout, expected, confirmed: nothing to do without replay.
        return None

    def _on_completed(self, control: SessionCompleted) -> CommandsCompleted | None:
        commands = control.commands
        if commands is not None:
            if control.timely_reply:
                self._conn._send_control(self.channel, SessionKnownCompleted(commands=commands))
            elif self._eager:
                # answered with the next flush; without eager completion only a timely-reply
                # is answered (qpidd): the peer's next timely request covers these ids too
                ref = self._out_next - 1
                for low, high in commands.ranges:
                    ulow = _unwrap(low, ref)
                    self._known_pending.add(ulow, ulow + ((high - low) & _MASK))
                self._conn._mark_dirty(self)
        elif control.timely_reply:
            self._conn._send_control(self.channel, SessionKnownCompleted(commands=SequenceSet()))
        outstanding = self._outstanding
        if commands is None or not outstanding:
            return None
        ref = self._out_next - 1
        done: list[int] = []
        ordered: list[int] | None = None
        for low, high in commands.ranges:
            ulow = _unwrap(low, ref)
            uhigh = ulow + ((high - low) & _MASK)
            if uhigh - ulow < _SCAN_RANGE:
                done += (n for n in range(ulow, uhigh + 1) if n in outstanding)
            else:
                # A wide range is looked up in the sorted outstanding ids: scanning them all
                # for each of a set's thousands of ranges would be quadratic.
                if ordered is None:
                    ordered = sorted(outstanding)
                lo = bisect.bisect_left(ordered, ulow)
                done += ordered[lo : bisect.bisect_right(ordered, uhigh, lo)]
        if not done:
            return None
        done.sort()
        window = self._window_sent
        for n in done:
            del outstanding[n]
            if window:
                sent = window.pop(n, None)
                if sent is not None:
                    flow = self._credit.get(sent[0])
                    if flow is not None and flow.mode == FlowMode.WINDOW:
                        if flow.messages != UNLIMITED:
                            flow.messages = min(flow.messages + 1, UNLIMITED - 1)
                        if flow.octets != UNLIMITED:
                            flow.octets = min(flow.octets + sent[1], UNLIMITED - 1)
        return CommandsCompleted(channel=self.channel, commands=_wire_ranges(done))

    def _on_flush(self, control: SessionFlush) -> None:
        conn = self._conn
        if control.expected:
            top = self._in_next
            expected = SequenceSet() if top is None else SequenceSet.of(top & _MASK)
            conn._send_control(self.channel, SessionExpected(commands=expected))
        if control.confirmed:
            # Completed commands are confirmed; nothing else is (no durable fragments).
            conn._send_control(self.channel, SessionConfirmed(commands=self._completed.to_set()))
        if control.completed:
            self._report()

    def _on_gap(self, control: SessionGap) -> None:
        commands = control.commands
        top = self._in_next
        if commands is None or top is None:
            return
        for low, high in commands.ranges:
            ulow = _unwrap(low, top - 1)
            uhigh = ulow + ((high - low) & _MASK)
            if ulow <= top <= uhigh and self._conn._abort_partial(self.channel):
                self._in_next = top + 1  # the partly received command will never finish
            for n in [n for n in self._incomplete if ulow <= n <= uhigh]:
                self._complete(n)
            self._completed.add(ulow, uhigh)
            self._unreported = True
        if self._eager:
            self._conn._mark_dirty(self)

    def on_detached(self) -> tuple[int, ...]:
        """The session is gone: its ids never completed, for the event."""
        self._state = SessionState.DETACHED
        return self.incomplete_commands

    def attached(self) -> None:
        """The session is attached: announce our first command id."""
        self._state = SessionState.ATTACHED
        self._conn._send_control(
            self.channel, SessionCommandPoint(command_id=self._out_next & _MASK, command_offset=0)
        )


def _covers(flow: _Flow, size: int) -> bool:
    return (flow.messages == UNLIMITED or flow.messages >= 1) and (
        flow.octets == UNLIMITED or flow.octets >= size
    )
