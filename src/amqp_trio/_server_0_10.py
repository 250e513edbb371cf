"""The AMQP 0-10 server role over a Trio stream: :class:`ServerConnection010` and
:func:`serve_stream_0_10`.

A handler gets the connection and loops on :meth:`ServerConnection010.next_event`, answering
through ``conn.core`` (a :class:`amqp_sansio.v0_10.Connection` in the server role); whatever
it queues in the core is written by the connection's writer task, woken by
:meth:`ServerConnection010.schedule_flush` (called by ``next_event`` itself, and by the
application when it queued output from elsewhere, e.g. a delivery caused by another
connection). Heartbeats run from the core's timer.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Final, final

import trio

from amqp_sansio import NEED_DATA, Role, Sentinel
from amqp_sansio.v0_10 import Connection, ConnectionConfig, ConnectionState

from ._server import _TRANSPORT_ERRORS, RECEIVE_SIZE
from ._wire import plain_socket, send_buffers

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from amqp_sansio.v0_10 import Event

__all__ = ["ServerConnection010", "serve_stream_0_10"]

#: Seconds a closed connection waits for the client to close its side (see ``aclose``).
_CLOSE_LINGER: Final = 1.0
_CLOSED: Final = ConnectionState.CLOSED


@final
class ServerConnection010:
    """One 0-10 connection served over *stream*. *header_consumed*: a dispatcher already read
    the 0-10 protocol header (see ``Connection``); *initial*: what it read after it."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        config: ConnectionConfig | None = None,
        *,
        header_consumed: bool = False,
        initial: bytes = b"",
        peer: str = "",
    ) -> None:
        self.stream: Final = stream
        # As the 0-9-1 server writes: many frames (a transfer is three segments) in one
        # sendmsg, not a send_all (a system call and a scheduling round) per frame.
        self._socket = plain_socket(stream)
        self.core: Final = Connection(Role.SERVER, config, header_consumed=header_consumed)
        if initial:
            self.core.receive_data(initial)
        self.peer: Final = peer
        self._wake = trio.Event()
        self._closed = False

    def __repr__(self) -> str:
        return f"<amqp_trio.ServerConnection010 {self.peer} {self.core.state.value}>"

    @property
    def outbound_size(self) -> int:
        """Octets queued in the core, not yet taken by the writer."""
        return 0

    @property
    def unfinished_size(self) -> int:
        """Octets of the client's segments under way (a body whose last frame has not come),
        held in the core: the broker counts them against its memory watermark."""
        return self.core.unfinished_size

    def resume_reading(self) -> None:
        """Nothing to resume: a 0-10 connection is read whenever its handler waits for an
        event (the broker's shutdown calls this on every transport)."""

    def schedule_flush(self) -> None:
        """Wake the writer: the core has output queued."""
        self._wake.set()

    async def next_event(self) -> Event:
        """The next event from the client (reading as needed); ``ConnectionLost`` (from the
        core) at the end of the stream."""
        core = self.core
        while True:
            event = core.next_event()
            if event is not NEED_DATA:
                self._wake.set()
                assert not isinstance(event, Sentinel)
                return event
            self._wake.set()
            deadline = core.next_deadline()
            with trio.move_on_at(math.inf if deadline is None else deadline):
                try:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                core.receive_data(data, trio.current_time())
                continue
            core.handle_timer(trio.current_time())

    async def run_writer(self) -> None:
        """Write what the core queues; after :meth:`finish`, what is left, then return."""
        core = self.core
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            try:
                # after finish(), also what was queued while the last write was under way
                while buffers := core.buffers_to_send():
                    await send_buffers(self.stream, self._socket, buffers)
                    if not self._closed:
                        break
            except _TRANSPORT_ERRORS:  # sendmsg raises the socket's OSError itself
                return
            if self._closed:
                return

    def finish(self) -> None:
        """The handler is done: the writer writes what is left and returns."""
        self._closed = True
        self._wake.set()

    async def aclose(self, linger: float = 0.0) -> None:
        """Close the stream; with *linger*, first read (and drop) what the client still
        sends until it closes its side, for at most that many seconds: a client may still be
        writing (a ``session.detached`` crossing our ``close-ok``), and a socket closed under
        it would reset the connection before it read the ``close-ok``."""
        self.finish()
        with trio.CancelScope(shield=True):
            if linger > 0:
                with (
                    trio.move_on_after(linger),
                    contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
                ):
                    while await self.stream.receive_some(RECEIVE_SIZE):
                        pass
            await trio.aclose_forcefully(self.stream)


async def serve_stream_0_10(
    stream: trio.abc.Stream,
    handler: Callable[[ServerConnection010], Awaitable[None]],
    *,
    config: ConnectionConfig | None = None,
    header_consumed: bool = False,
    initial: bytes = b"",
    peer: str = "",
    linger: float = 5.0,
) -> None:
    """Run *handler* on one 0-10 connection over *stream*, with its writer task; close the
    stream when the handler returned and what it left queued was written (at most *linger*
    seconds later)."""
    conn = ServerConnection010(
        stream, config, header_consumed=header_consumed, initial=initial, peer=peer
    )
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run_writer)
            try:
                await handler(conn)
            finally:
                conn.finish()
                # the last output (a close-ok) gets a moment to leave, never forever
                nursery.cancel_scope.deadline = trio.current_time() + linger
    finally:
        await conn.aclose(linger=_CLOSE_LINGER if conn.core.state is _CLOSED else 0.0)
