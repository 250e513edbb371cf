"""A TCP proxy in a thread between a client and a broker that can go silent: it then forwards
nothing either way and keeps both sockets open, which is how a dead peer (a frozen process, a
dropped network) looks to a client that relies on heartbeats."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Iterator

_READ: Final = 65536


@final
class SilentProxy:
    """Listens on :attr:`port`, forwards to *target*; :meth:`go_silent` stops forwarding.
    :attr:`last_to_client` is when octets last went to the client (``time.monotonic()``)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: Final = int(self._listener.getsockname()[1])
        self._silent = threading.Event()
        self._stop = threading.Event()
        self.last_to_client = 0.0
        self._thread = threading.Thread(target=self._run, name="silent proxy", daemon=True)
        self._thread.start()

    def url(self, query: str = "") -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/{query}"

    def go_silent(self) -> None:
        self._silent.set()

    def resume(self) -> None:
        """Forward again, starting with what arrived while silent: every reply is late."""
        self._silent.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        pairs: dict[socket.socket, socket.socket] = {}
        try:
            while not self._stop.is_set():
                for key, _ in selector.select(0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self._listener:
                        client, _ = sock.accept()
                        upstream = socket.create_connection(self._target)
                        pairs[client], pairs[upstream] = upstream, client
                        selector.register(client, selectors.EVENT_READ)
                        selector.register(upstream, selectors.EVENT_READ)
                        continue
                    if self._silent.is_set():
                        continue  # unread: a silent peer neither answers nor closes
                    try:
                        data = sock.recv(_READ)
                    except OSError:
                        data = b""
                    other = pairs[sock]
                    if not data:
                        for end in (sock, other):
                            selector.unregister(end)
                            end.close()
                        continue
                    with contextlib.suppress(OSError):
                        other.sendall(data)
                        if other.getsockname()[1] == self.port:  # toward the client
                            self.last_to_client = time.monotonic()
                if self._silent.is_set():
                    time.sleep(0.05)
        finally:
            for sock in list(pairs):
                with contextlib.suppress(OSError):
                    sock.close()
            selector.close()


@contextlib.contextmanager
def silent_proxy(target: tuple[str, int]) -> Iterator[SilentProxy]:
    proxy = SilentProxy(target)
    try:
        yield proxy
    finally:
        proxy.close()
