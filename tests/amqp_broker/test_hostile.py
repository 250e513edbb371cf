"""Slow and hostile clients over raw sockets: connections that never finish the handshake are
dropped by the handshake timeout (as RabbitMQ drops them after its 10 s, without a frame),
the listener stops accepting at ``max_connections``, and a bystander connection keeps working
throughout. Timeouts are short; every wait is bounded."""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import socket
import time
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
import amqp_broker
from amqp_broker import BrokerOptions
from amqp_sansio import ConnectionStart, ConnectionStartOk
from amqp_sansio.client import ConnectionParameters
from amqp_sansio.framing import PROTOCOL_HEADER_0_9_1, MethodFrame
from amqp_sansio.testing import method_frame, parse_frames

if TYPE_CHECKING:
    from collections.abc import Iterator

HANDSHAKE_TIMEOUT: Final = 1.0
# Connections per kind of misbehaviour (twice this, plus a few, sockets in each direction).
HOSTILE: Final = 200
# A hang guard, not a speed requirement.
BOUND: Final = 20.0


@pytest.fixture(scope="module", autouse=True)
def _enough_descriptors() -> Iterator[None]:
    """Hundreds of sockets, each counted twice (client and broker in this process)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4096))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def address(url: str) -> tuple[str, int]:
    params = ConnectionParameters.from_url(url)
    return params.host, params.port


def open_sockets() -> set[str]:
    """This process's sockets (the broker's ends too: it runs in a thread here)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:"):
            found.add(target)
    return found


def still_serves(connection: amqp_blocking.Connection) -> None:
    with connection.channel() as ch:
        queue = ch.queue_declare("", exclusive=True).queue
        ch.basic_publish(b"alive", routing_key=queue)
        message = ch.basic_get(queue, no_ack=True)
        assert message is not None
        assert message.body == b"alive"


def read_until_closed(sockets: list[socket.socket]) -> dict[socket.socket, bytes]:
    """Everything each socket receives until the broker closes it (EOF or reset)."""
    received = dict.fromkeys(sockets, b"")
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + BOUND
    open_ = set(sockets)
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            ready = key.fileobj
            assert isinstance(ready, socket.socket)
            try:
                data = ready.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data = b""
            if data:
                received[ready] += data
                continue
            selector.unregister(ready)
            open_.discard(ready)
    selector.close()
    assert not open_, f"{len(open_)} connections still open after {BOUND} s"
    return received


def test_connections_that_never_finish_the_handshake_are_dropped() -> None:
    options = BrokerOptions(handshake_timeout=HANDSHAKE_TIMEOUT)
    with (
        contextlib.ExitStack() as sockets,
        amqp_broker.run_in_thread(options=options) as url,
        amqp_blocking.connect(url) as bystander,
    ):

        def connect() -> socket.socket:
            return sockets.enter_context(socket.create_connection(address(url)))

        before = open_sockets()
        idle = [connect() for _ in range(HOSTILE)]
        header_only = []
        for _ in range(HOSTILE):
            # the header right after the connect: the timeout runs from the accept, and a
            # loaded machine can take longer than it to open the next two hundred sockets
            header_only.append(connect())
            header_only[-1].sendall(PROTOCOL_HEADER_0_9_1)
        slow = connect()
        trickle = PROTOCOL_HEADER_0_9_1 + method_frame(
            0,
            ConnectionStartOk(
                # long enough that trickling it takes 20 s: a broker thread starved for a
                # while still drops the connection long before it could finish
                client_properties={"padding": "x" * 400},
                mechanism="PLAIN",
                response=b"\0guest\0guest",
                locale="",
            ),
        )
        # one octet at a time: the header trickles in, the start-ok never completes in time
        sent = 0
        received = b""
        slow.settimeout(BOUND)
        while sent < len(trickle):
            try:
                slow.sendall(trickle[sent : sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            slow.settimeout(0.05)
            try:
                chunk = slow.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        assert sent < len(trickle)  # dropped before it could finish
        assert all(isinstance(f, MethodFrame) for f in parse_frames(received))  # start, or none
        replies = read_until_closed(idle + header_only)
        assert all(replies[sock] == b"" for sock in idle)
        # A header read in time gets connection.start, then the drop; a broker thread starved
        # for longer than the timeout drops the connection before reading it. Nothing else.
        starts = 0
        for sock in header_only:
            frames = parse_frames(replies[sock])
            assert len(frames) <= 1
            for frame in frames:
                assert isinstance(frame, MethodFrame)
                assert isinstance(frame.method, ConnectionStart)
                starts += 1
        assert starts > 0
        for sock in [*idle, *header_only, slow]:
            sock.close()
        still_serves(bystander)
        deadline = time.monotonic() + BOUND  # the broker's ends are closed too
        while open_sockets() - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not open_sockets() - before


def test_the_listener_stops_accepting_at_max_connections() -> None:
    options = BrokerOptions(max_connections=3, handshake_timeout=None)
    with amqp_broker.run_in_thread(options=options) as url:
        first = amqp_blocking.connect(url)
        with amqp_blocking.connect(url) as second, amqp_blocking.connect(url):
            waiting = socket.create_connection(address(url), timeout=BOUND)
            waiting.sendall(PROTOCOL_HEADER_0_9_1)
            waiting.settimeout(0.3)
            with pytest.raises(TimeoutError):  # not accepted: the header waits in the kernel
                waiting.recv(1)
            still_serves(second)  # the open ones are served
            first.close()
            waiting.settimeout(BOUND)
            data = b""
            while len(data) < 8 or not parse_frames_safe(data):
                chunk = waiting.recv(65536)
                assert chunk, "closed instead of accepted"
                data += chunk
            [frame] = parse_frames(data)
            assert isinstance(frame, MethodFrame)
            assert isinstance(frame.method, ConnectionStart)
            waiting.close()


def parse_frames_safe(data: bytes) -> bool:
    """Whether *data* holds whole frames only."""
    try:
        parse_frames(data)
    except ValueError:
        return False
    return True
