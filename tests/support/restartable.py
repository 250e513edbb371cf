"""An embedded broker (``python -m amqp_broker``) in a subprocess that a test kills and starts
again on the same port, as a broker restart looks to a client: the socket dies, connections are
refused for a while, then accepted by a broker that has forgotten everything."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from collections.abc import Iterator

_START_TIMEOUT: Final = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@final
class RestartableBroker:
    """The broker process; :meth:`kill` and :meth:`start` it."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/?connection_timeout=5000"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, *options: str) -> None:
        """Start it (with these ``amqp_broker`` command-line *options*) and wait until it
        accepts connections (the port may linger a moment)."""
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            process = subprocess.Popen(
                [sys.executable, "-m", "amqp_broker", "--port", str(self.port), *options],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while process.poll() is None and time.monotonic() < deadline:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", self.port), timeout=1),
                ):
                    self._process = process
                    return
                time.sleep(0.05)
            process.kill()
            process.wait()
            if time.monotonic() >= deadline:
                raise AssertionError(f"the broker did not start on port {self.port}")

    def pause(self) -> None:
        """SIGSTOP it: a peer that says nothing (heartbeats time out)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT it."""
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL it: sockets die without a close handshake."""
        process, self._process = self._process, None
        if process is not None:
            # SIGKILL ends a paused one too; no SIGCONT first, which would let it answer
            # what it had read (a confirm the test wants never to come).
            process.kill()
            process.send_signal(signal.SIGCONT)
            process.wait()


@contextlib.contextmanager
def restartable_broker() -> Iterator[RestartableBroker]:
    broker = RestartableBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()
