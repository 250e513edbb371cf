"""The I/O under one core, shared by the client and the server role: one flush path under a
lock, a writer task that also runs the core's timers, and the reader's receive step.

Bytes are produced by the core before the lock is taken and stay in the core's outbound buffer
until whoever holds the lock writes them, so a task cancelled while waiting for the lock loses
nothing (trio-websocket's ``_send`` bug is impossible here). Writes are shielded: a half-written
frame would corrupt the stream for every channel.
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from contextlib import suppress
from typing import TYPE_CHECKING, Final, final

import trio

from amqp_sansio import NEED_DATA, ConnectionCloseOk, HeartbeatTimeout
from amqp_sansio.client import ConnectionLostError
from amqp_sansio.framing import encode_method_frame

if TYPE_CHECKING:
    from amqp_sansio import Buffer, Connection, Event, Sentinel

__all__ = ["RECEIVE_SIZE", "Wire", "plain_socket", "send_buffers"]

logger: Final = logging.getLogger("amqp_trio")

#: Bytes asked of the transport per read.
RECEIVE_SIZE: Final = 256 * 1024

#: Queued output above which a publisher waits for the transport itself (see queue_output).
HIGH_WATER: Final = 1024 * 1024

#: A publisher that never waits yields to the scheduler once per this many publishes.
YIELD_EVERY: Final = 128

#: Output of at least this many octets queued by one call (a large message) is written by the
#: task that queued it when no write is under way: a batch of several would save no system
#: call worth a scheduling round of the writer's.
DIRECT_WRITE: Final = 64 * 1024

#: Scheduling rounds the writer lets pass while publishers keep adding output.
GATHER_ROUNDS: Final = 16

#: Seconds a failed connection keeps reading (and discarding) after its last words, waiting for
#: the peer's close-ok or end of stream before the transport is closed.
CLOSE_LINGER: Final = 1.0


def _close_ok_frame() -> bytes:
    frame = bytearray()
    encode_method_frame(frame, 0, ConnectionCloseOk())
    return bytes(frame)


_CLOSE_OK_FRAME: Final = _close_ok_frame()

# At most this many buffers per sendmsg (Linux's IOV_MAX).
_IOV_MAX: Final = 1024
# Buffers are joined into writes of about this size when the stream has no socket (TLS).
_JOIN_LIMIT: Final = 64 * 1024

_TRANSPORT_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


@final
class Wire:
    """One core and its transport."""

    def __init__(self, core: Connection, stream: trio.abc.Stream) -> None:
        self.core: Final = core
        self.stream: Final = stream
        self._send_lock = trio.Lock()
        self._wake = trio.Event()
        # Events the writer pulled from the core while the reader was parked in receive_some
        # (a heartbeat timeout); the reader takes them before asking the core again.
        self._stash: deque[Event] = deque()
        self._reader_parked = False
        self._eof = False
        #: Set once the transport failed or was closed; writes stop.
        self.broken = False
        # Queued output that should not wait for more (an ack).
        self._urgent = False
        # queue_output() calls since the last real yield.
        self._unyielded = 0
        # A producer gave up its turn only because of YIELD_EVERY: it will queue more, so the
        # writer lets it (gathers). Otherwise the queued output is all there is for now (the
        # producer parked waiting for something else, e.g. a reply) and is written at once.
        self._more_coming = False
        # A plain TCP stream is written with sendmsg (several buffers per system call).
        self._socket = plain_socket(stream)
        # On a plain socket, the first output after a read (a request after its reply, an ack
        # after deliveries) is written by the task that queued it when no write is under way:
        # waking the writer for it would cost a scheduling round per round trip (_write_now).
        self._read_since_write = False
        # What such a write could not write (the socket's buffer was full): the writer writes
        # it before anything else.
        self._leftover: list[Buffer] = []
        # A large write left some over: its caller writes the rest itself (output_turn).
        self._drain = False
        # The core's outbound size after the last note_output (what the next one added).
        self._queued_seen = 0

    # --- Writing ------------------------------------------------------------------------------

    def schedule_flush(self) -> None:
        """Wake the writer task (non-blocking); it writes whatever the core has queued."""
        self._wake.set()

    async def queue_output(self, *, urgent: bool = False) -> None:
        """After a publish or an ack was queued in the core: let the writer task write it,
        batched with whatever else is queued, and write it here only when the core holds more
        than :data:`HIGH_WATER` octets (backpressure for a fast publisher). *urgent* output (an
        ack: the broker's prefetch window waits for it) is written at the writer's next turn;
        publishes may be gathered for a few more rounds.

        Never raises ``Cancelled``: the output is queued already, so callers check for
        cancellation before queueing. It yields to the scheduler only every
        :data:`YIELD_EVERY` calls (or when it writes): a scheduling round per publish (an
        epoll poll, then a wake-up of the writer that sends one message) would cost more
        than the publish itself.

        :raises ConnectionLostError: the transport is gone.
        """
        if self.note_output(urgent=urgent):
            await self.output_turn()

    def note_output(self, *, urgent: bool = False) -> bool:
        """The part of :meth:`queue_output` that needs no await: wake the writer. True when
        the caller must still ``await output_turn()`` (a write or a yield is due); a publisher
        skips creating a coroutine on the other calls."""
        queued = self.core.outbound_size
        seen = self._queued_seen
        # What this call's output added (the writer may have written since the last call):
        # one large message goes at once; small publishes that piled up past DIRECT_WRITE
        # stay the writer's to gather (its writes are fewer and larger). The first test
        # spares small publishes the rest (callgrind, 1 KiB: 33.5k -> 31.8k per publish).
        large = queued >= DIRECT_WRITE and queued - (seen if seen <= queued else 0) >= DIRECT_WRITE
        if self._read_since_write or large:
            if self._write_now():
                self._queued_seen = 0
                self._unyielded += 1
                return self._unyielded >= YIELD_EVERY
            if self._leftover and large:
                # The socket is full: a large publisher waits for it (output_turn writes the
                # rest), as a blocking send would, rather than waking the writer for each
                # message. Small output (an ack) is left to the writer as before.
                self._queued_seen = 0
                self._drain = True
                return True
            queued = self.core.outbound_size
        self._queued_seen = queued
        if urgent:
            self._urgent = True
        if queued >= HIGH_WATER or self.broken:
            return True
        self._wake.set()
        self._unyielded += 1
        return self._unyielded >= YIELD_EVERY

    async def send_request(self) -> None:
        """:meth:`flush` for a request whose caller then parks for its reply: on a plain socket
        written from the calling task with no scheduling round of its own when the socket takes
        it all (the park that follows is the caller's checkpoint).

        :raises ConnectionLostError: the transport failed.
        """
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except trio.Cancelled:
            # Cancelled before writing: the request is in the core, and the writer sends it
            # (its late reply is dropped), as flush() does.
            self._wake.set()
            raise
        if not self._write_now():
            await self.flush()

    def flush_soon(self) -> None:
        """The reader's flush of what an event queued in the core (a close-ok, a cancel):
        written at once when the socket takes it, else by the writer; the writer is not woken
        when nothing is queued."""
        if self.core.outbound_size and not self._write_now():
            self._wake.set()  # also for what the socket did not take

    def _write_now(self) -> bool:
        """Write what the core holds from the calling task, without blocking: on a plain
        socket, when no write is under way and nothing is left over. True when all of it was
        written; what the socket did not take waits in ``_leftover``, and the caller either
        flushes it itself or wakes the writer. Synchronous: the frames were in the core's
        outbound buffer before, so a cancelled caller never leaves one half-written."""
        self._read_since_write = False
        sock = self._socket
        if sock is None or self._send_lock.locked() or self._leftover or self.broken:
            return False
        fd = sock.fileno()  # asked each time: -1 once the socket is closed
        if fd < 0:
            return False
        buffers = self.core.buffers_to_send()
        if not buffers:
            return True
        sent = 0
        if len(buffers) <= _IOV_MAX:
            # Full, or failed: the writer's own write meets the error and reports it.
            with suppress(OSError):
                sent = os.writev(fd, buffers)
        left = _unsent(buffers, sent)
        if not left:
            return True
        self._leftover = left
        return False

    async def output_turn(self) -> None:
        """The rest of :meth:`queue_output` after :meth:`note_output` returned True; never
        raises ``Cancelled``.

        :raises ConnectionLostError: the transport is gone.
        """
        self._unyielded = 0
        if self._drain or self.core.outbound_size >= HIGH_WATER or self.broken:
            self._drain = False
            with trio.CancelScope(shield=True):
                await self.flush()
            return
        self._more_coming = True
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def flush(self) -> None:
        """Write everything the core has queued.

        :raises ConnectionLostError: the transport failed (it is then closed, so the reader
            sees the end of the stream and fails everything pending).
        """
        lock = self._send_lock
        try:
            # A free lock is taken without a scheduling round (the write itself is one).
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                lock.acquire_nowait()
            except trio.WouldBlock:
                await lock.acquire()
        except trio.Cancelled:
            # Cancelled before writing: what we queued is still in the core.
            self._wake.set()
            raise
        try:
            await self._write_queued()
        finally:
            lock.release()

    async def _write_queued(self) -> None:
        if self.broken:
            raise ConnectionLostError("the connection's transport is closed")
        core = self.core
        with trio.CancelScope(shield=True):
            while True:
                if self._leftover:
                    buffers, self._leftover = self._leftover, []
                else:
                    buffers = core.buffers_to_send()
                self._urgent = False
                if not buffers:
                    return
                self._read_since_write = False
                try:
                    await send_buffers(self.stream, self._socket, buffers)
                except _TRANSPORT_ERRORS as exc:
                    logger.debug("write failed: %r", exc)
                    await self.close_transport()
                    raise ConnectionLostError(f"writing to the transport failed: {exc}") from exc

    async def run_writer(self) -> None:
        """The writer task: flush when woken, run the core's timers at their deadlines."""
        core = self.core
        while not self.broken:
            deadline = core.next_deadline()
            if not self._wake.is_set():
                with trio.move_on_at(math.inf if deadline is None else deadline):
                    await self._wake.wait()
            if self._wake.is_set():
                self._wake = trio.Event()
                await self._gather_output()
            now = trio.current_time()
            if deadline is not None and now >= deadline:
                core.handle_timer(now)
                if self._reader_parked:
                    await self._poll_parked_reader()
            try:
                await self.flush()
            except ConnectionLostError:
                return

    async def _gather_output(self) -> None:
        # Woken by a publish or an ack: while the producers keep adding to the queued output
        # between two of our turns, let them (bounded), then write it all in one go.
        if not self._more_coming:
            return
        self._more_coming = False
        core = self.core
        seen = core.outbound_size
        rounds = 0
        while seen and not self._urgent and rounds < GATHER_ROUNDS:
            await trio.lowlevel.cancel_shielded_checkpoint()
            queued = core.outbound_size
            if queued <= seen:
                return
            seen = queued
            rounds += 1

    async def _poll_parked_reader(self) -> None:
        # The reader drained the core before parking, so anything next_event() returns now
        # was produced by handle_timer: a heartbeat timeout. Close the transport so the
        # parked receive_some returns and the reader handles it.
        event = self.core.next_event()
        if event is NEED_DATA:
            return
        self._stash.append(event)
        if type(event) is HeartbeatTimeout:
            await self.close_transport()

    # --- Reading ------------------------------------------------------------------------------

    def next_event(self) -> Event | Sentinel:
        """The core's next event (or one the writer pulled out while the reader was parked)."""
        if self._stash:
            return self._stash.popleft()
        return self.core.next_event()

    async def receive(self) -> None:
        """Read once and give the bytes to the core; a failed or closed transport is the end
        of the stream (``receive_data(b"")``)."""
        if self._eof:
            raise AssertionError("receive() after the end of the stream")
        self._reader_parked = True
        try:
            data = await self.stream.receive_some(RECEIVE_SIZE)
        except _TRANSPORT_ERRORS as exc:
            logger.debug("read failed: %r", exc)
            data = b""
        finally:
            self._reader_parked = False
        if not data:
            self._eof = True
            self.broken = True
            self._wake.set()  # the writer task ends
        # The read's time: a silent peer is dead two intervals after its last octet, not
        # after the writer's next tick noticed it (up to half an interval later).
        self.core.receive_data(data, trio.current_time())
        self._read_since_write = True

    def end_of_stream(self) -> None:
        """Tell the core the transport is gone (after a heartbeat timeout closed it)."""
        if not self._eof:
            self._eof = True
            self.broken = True
            self._wake.set()
            self.core.receive_data(b"")

    async def linger(self, timeout: float = CLOSE_LINGER) -> None:
        """After the core failed (it no longer takes bytes) and its close was written: read
        and discard until the peer's close-ok, the end of the stream, or *timeout* seconds.

        Closing a socket with unread input resets the connection, and a reset can destroy
        the close before the peer read it; this gives the peer the time to read it, without
        a fixed sleep. The peer's close-ok is recognised by its exact frame octets.
        """
        if self.broken or self._eof:
            return
        keep = len(_CLOSE_OK_FRAME) - 1
        tail = b""
        with trio.move_on_after(timeout):
            while True:
                try:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                except _TRANSPORT_ERRORS:
                    return
                if not data:
                    return
                window = tail + bytes(data)
                if _CLOSE_OK_FRAME in window:
                    return
                tail = window[-keep:]

    async def close_transport(self) -> None:
        """Close the transport at once (no graceful TLS close-notify)."""
        self.broken = True
        self._wake.set()
        await trio.aclose_forcefully(self.stream)


def _unsent(buffers: list[Buffer], sent: int) -> list[Buffer]:
    """What is left of *buffers* after the first *sent* octets were written."""
    for index, buffer in enumerate(buffers):
        view = memoryview(buffer).cast("B")
        if sent < len(view):
            rest = buffers[index:]
            if sent:
                rest[0] = view[sent:]
            return rest
        sent -= len(view)
    return []


def plain_socket(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    """*stream*'s socket when it is a plain TCP stream that :func:`send_buffers` may write
    with ``sendmsg`` (several buffers per system call), else None (TLS and other streams)."""
    if isinstance(stream, trio.SocketStream) and hasattr(stream.socket, "sendmsg"):
        return stream.socket
    return None


async def send_buffers(
    stream: trio.abc.Stream, sock: trio.socket.SocketType | None, buffers: list[Buffer]
) -> None:
    """Write *buffers* to *stream*: one alone as it is, many in one ``sendmsg`` on a plain
    socket (*sock*, the stream's own), else joined into few writes."""
    if len(buffers) == 1:
        await stream.send_all(buffers[0])
    elif sock is not None:
        await _send_vectored(sock, buffers)
    else:
        await _send_joined(stream, buffers)


async def _send_vectored(sock: trio.socket.SocketType, buffers: list[Buffer]) -> None:
    """Write *buffers* with ``sendmsg``: one system call for many frames, large bodies not
    copied."""
    views = [memoryview(buffer).cast("B") for buffer in buffers]
    start = 0
    while start < len(views):
        sent = await sock.sendmsg(views[start : start + _IOV_MAX])
        while sent:  # skip what was written; a partly written buffer goes on from its rest
            view = views[start]
            if sent >= len(view):
                sent -= len(view)
                start += 1
            else:
                views[start] = view[sent:]
                sent = 0
        while start < len(views) and not views[start]:
            start += 1


async def _send_joined(stream: trio.abc.Stream, buffers: list[Buffer]) -> None:
    """Write *buffers* as few large writes (TLS and other streams): small buffers are joined
    up to :data:`_JOIN_LIMIT` octets, a buffer at least that large goes alone."""
    pending: list[Buffer] = []
    size = 0
    for buffer in buffers:
        length = memoryview(buffer).nbytes
        if length >= _JOIN_LIMIT:
            if pending:
                await stream.send_all(b"".join(pending))
                pending, size = [], 0
            await stream.send_all(buffer)
            continue
        pending.append(buffer)
        size += length
        if size >= _JOIN_LIMIT:
            await stream.send_all(b"".join(pending))
            pending, size = [], 0
    if pending:
        await stream.send_all(b"".join(pending) if len(pending) > 1 else pending[0])
