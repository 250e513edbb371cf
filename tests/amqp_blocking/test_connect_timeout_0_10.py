"""A timed-out ``connect_0_10`` leaves nothing behind (issue 27, item 14): its I/O thread is
stopped before the call raises, and a server that answers after the timeout makes no thread
raise (it used to die with ``RuntimeError: received data after the end of the stream``)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_sansio.client import ConnectionParameters, ConnectionTimeoutError
from amqp_sansio.v0_10 import ConnectionConfig, Role
from amqp_sansio.v0_10._connection import Connection
from amqp_sansio.v0_10._framing import PROTOCOL_HEADER_0_10

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def thread_failures() -> Iterator[list[threading.ExceptHookArgs]]:
    """Exceptions that ended any thread while the test ran."""
    failures: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = failures.append
    try:
        yield failures
    finally:
        threading.excepthook = previous


def late_answer() -> bytes:
    """What a 0-10 server writes first: its protocol header and ``connection.start``."""
    server = Connection(Role.SERVER, ConnectionConfig())
    server.receive_data(PROTOCOL_HEADER_0_10)
    server.next_event()
    return server.data_to_send()


def test_a_timed_out_connect_stops_its_thread_and_late_data_raises_nothing(
    thread_failures: list[threading.ExceptHookArgs],
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        before = set(threading.enumerate())
        params = ConnectionParameters(host="127.0.0.1", port=port, connection_timeout=0.2)
        # The kernel accepts the TCP connection; nobody answers the protocol header in time.
        with pytest.raises(ConnectionTimeoutError):
            amqp_blocking.connect_0_10(params)
        assert [t for t in threading.enumerate() if t not in before] == []
        peer, _ = listener.accept()
        with peer:
            assert peer.recv(8) in (PROTOCOL_HEADER_0_10, b"")  # what the client wrote
            with contextlib.suppress(OSError):  # the client's socket is closed: a reset
                peer.sendall(late_answer())
                peer.recv(1)
    assert [t for t in threading.enumerate() if t not in before] == []
    assert thread_failures == []
