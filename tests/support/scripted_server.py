"""A scripted one-connection AMQP server on a loopback socket, for adapter tests that need
exact control of what arrives in one read: our own server-role core in a thread.

It accepts any login and virtual host and writes ``connection.open-ok`` together with whatever
*after_open* queues on the core (a ``connection.close``, a ``connection.blocked``) in one
``sendall``, so the client receives them in the same read. Afterwards it answers what the core
answers by itself (channel open and close, close-ok, heartbeats when asked; nothing at all with
*silent_after_open*) and records every event; it never closes the socket before the client
does, unless :meth:`stop` is called.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import TYPE_CHECKING, Final, final

from amqp_sansio import (
    NEED_DATA,
    AuthenticationRequested,
    Connection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionLost,
    ConnectionOpened,
    RemoteProtocolError,
    Role,
    VirtualHostRequested,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_sansio import Event

__all__ = ["ScriptedServer"]

#: Seconds any wait of the server (accept, a read) may take before it gives up: a bound on a
#: broken test, never a measurement.
_GIVE_UP: Final = 30.0


@final
class ScriptedServer:
    """Serve one client connection on ``127.0.0.1:port``; use it as a context manager."""

    def __init__(
        self,
        after_open: Callable[[Connection], None] | None = None,
        *,
        heartbeat: int = 0,
        silent_after_open: bool = False,
    ) -> None:
        self._after_open = after_open
        self._heartbeat = heartbeat
        # After open-ok, write nothing more (not even heartbeats): a stopped or vanished host.
        self._silent_after_open = silent_after_open
        self._silent = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_GIVE_UP)
        #: The port to connect to.
        self.port: Final[int] = self._listener.getsockname()[1]
        self._changed = threading.Condition()
        #: Every event the server core reported after the handshake, in order.
        self.events: list[Event] = []
        self._done = False
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="scripted AMQP server")

    @property
    def url(self) -> str:
        """A URL for this server (guest/guest, the client's heartbeat as configured here)."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/?heartbeat={self._heartbeat}"

    def wait_for(self, kind: type[object], timeout: float = _GIVE_UP) -> Event:
        """Wait until the server recorded an event of type *kind*; return it.

        :raises AssertionError: the connection ended (or *timeout* passed) without one.
        """
        end = time.monotonic() + timeout
        with self._changed:
            while True:
                for event in self.events:
                    if isinstance(event, kind):
                        return event
                remaining = end - time.monotonic()
                if self._done or remaining <= 0:
                    raise AssertionError(f"no {kind.__name__} from the client: {self.events!r}")
                self._changed.wait(remaining)

    def stop(self) -> None:
        """Close the server's end of the connection (if still open) and wait for the thread."""
        self._stopping = True
        self._thread.join(_GIVE_UP)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        self._listener.close()

    def _record(self, event: Event) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def _serve(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        try:
            self._run(sock)
        finally:
            with contextlib.suppress(OSError):
                sock.close()
            with self._changed:
                self._done = True
                self._changed.notify_all()

    def _run(self, sock: socket.socket) -> None:
        core = Connection(Role.SERVER, ConnectionConfig(heartbeat=self._heartbeat))
        sock.settimeout(0.05)  # short, so stop() is noticed; reads just retry
        started = time.monotonic()
        while not self._stopping and time.monotonic() - started < _GIVE_UP:
            try:
                while (event := core.next_event()) is not NEED_DATA:
                    if isinstance(event, AuthenticationRequested):
                        core.accept_authentication()
                    elif isinstance(event, VirtualHostRequested):
                        core.accept_virtual_host()
                        if self._after_open is not None:
                            self._after_open(core)  # queued behind open-ok: one sendall
                        sock.sendall(core.data_to_send())
                        self._silent = self._silent_after_open
                    elif not isinstance(event, ConnectionOpened):
                        self._record(event)
                    if isinstance(event, ConnectionClosed | ConnectionLost):
                        if not self._silent:
                            sock.sendall(core.data_to_send())
                        return
            except RemoteProtocolError as exc:  # fails the test (unhandled thread exception)
                raise AssertionError(f"the client broke the protocol: {exc!r}") from exc
            deadline = core.next_deadline()
            if deadline is not None and time.monotonic() >= deadline:
                core.handle_timer(time.monotonic())
            out = core.data_to_send()
            if not self._silent:
                sock.sendall(out)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                data = b""
            core.receive_data(data)
