"""A hostile 0-10 client against the embedded broker on a socket (issue 27, items 11 and 12):
the largest sequence sets the wire allows do not stop the broker answering others, and a body
that never ends is counted against the memory watermark and refused past the connection's
bound of unfinished octets, while other clients carry on."""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
from typing import TYPE_CHECKING

import amqp_blocking
import amqp_broker
from amqp_sansio._events import Sentinel
from amqp_sansio.v0_10 import (
    MAX_SEQUENCE_SET_RANGES,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    DeliveryProperties,
    MessageTransfer,
    Role,
    SequenceSet,
    SessionCompleted,
    SessionOpened,
)
from amqp_sansio.v0_10._connection import Connection
from amqp_sansio.v0_10.testing import command_frames, control_frames
from tests.support.broker_0_10 import brokers_in_thread

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_sansio.v0_10 import Event

_MASK = (1 << 32) - 1


class Hostile:
    """A 0-10 client on a raw socket that opens a session, then writes frames of its own."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.core = Connection(Role.CLIENT, ConnectionConfig())
        self.events: list[Event] = []
        self.until(lambda: any(type(e) is ConnectionOpened for e in self.events))
        self.session = self.core.attach("hostile")
        self.channel = self.session.channel
        self.until(lambda: any(type(e) is SessionOpened for e in self.events))

    def _read(self, data: bytes) -> None:
        self.core.receive_data(data)
        while not isinstance(event := self.core.next_event(), Sentinel):
            self.events.append(event)
        self.sock.sendall(self.core.data_to_send())

    def until(self, done: Callable[[], bool]) -> None:
        """Talk until *done*."""
        self.sock.sendall(self.core.data_to_send())
        while not done():
            data = self.sock.recv(65536)
            assert data, f"the broker closed the connection: {self.events}"
            self._read(data)

    def read_to_end(self) -> list[Event]:
        """Every event until the broker closes the socket (its close answered)."""
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            while data := self.sock.recv(65536):
                self._read(data)
        return self.events


def largest_set(seed: int) -> SequenceSet:
    """MAX_SEQUENCE_SET_RANGES ranges that do not touch, in a shuffled order on the wire."""
    ranges = [(3 * n, 3 * n + 1) for n in range(MAX_SEQUENCE_SET_RANGES)]
    random.Random(seed).shuffle(ranges)
    return SequenceSet(ranges)


def round_trip(url: str, body: bytes) -> bytes:
    with amqp_blocking.connect_0_10(url) as conn, conn.session() as session:
        queue = f"hostile-{random.randrange(1 << 30)}"
        session.queue_declare(queue, auto_delete=True)
        sub = session.subscribe(queue)
        session.transfer("", body, routing_key=queue)
        message = sub.get(timeout=30)
        assert message is not None
        message.accept()
        session.queue_delete(queue)
        return message.body


def test_the_largest_completed_sets_do_not_stop_the_broker() -> None:
    with brokers_in_thread(1) as [ports]:
        hostile = Hostile(ports.amqp_0_10)
        controls = [
            control_frames(hostile.channel, SessionCompleted(commands=largest_set(seed)))
            for seed in range(30)
        ]
        assert len(controls[0]) > 65_528  # the whole set: 8,191 ranges of 8 octets

        def attack() -> None:
            for frames in controls:
                hostile.sock.sendall(frames)

        sender = threading.Thread(target=attack, name="hostile 0-10 client")
        sender.start()
        try:
            assert round_trip(ports.url(), b"while under attack") == b"while under attack"
        finally:
            sender.join(60)
        assert not sender.is_alive()
        # The broker decoded every set: an execution.sync after them is completed, in order.
        sync = hostile.session.sync()
        hostile.until(
            lambda: any(type(e) is CommandsCompleted and sync in e.commands for e in hostile.events)
        )
        hostile.sock.close()


def body_that_never_ends(channel: int, size: int) -> list[bytes]:
    """The frames of a message.transfer whose body segment lacks its last frame."""
    data = command_frames(
        channel,
        MessageTransfer(destination=""),
        headers=[DeliveryProperties(routing_key="nowhere")],
        body=bytes(size),
    )
    frames: list[bytes] = []
    at = 0
    while at < len(data):
        (length,) = struct.unpack_from(">H", data, at + 2)
        frames.append(data[at : at + length])
        at += length
    return frames[:-1]


def test_a_body_that_never_ends_is_counted_and_bounded() -> None:
    limit = 1024 * 1024
    options = amqp_broker.BrokerOptions(
        unfinished_limit=limit,
        memory_high_watermark_bytes=limit // 2,
        memory_check_interval=0.02,
    )
    brokers: list[amqp_broker.Broker] = []
    with brokers_in_thread(1, options=options, made=brokers) as [ports]:
        [broker] = brokers
        hostile = Hostile(ports.amqp_0_10)
        frames = body_that_never_ends(hostile.channel, 4 * limit)
        sent = 0
        body_octets = 0  # of the body segment: the command and header segments are whole
        index = 0
        while sent < 3 * limit // 4:  # under the bound, over the watermark
            frame = frames[index]
            hostile.sock.sendall(frame)
            sent += len(frame)
            if frame[1] == 3:  # a body frame
                body_octets += len(frame) - 12
            index += 1
        # The broker's own accounting holds exactly the unfinished body, and the alarm is on.
        # (The loop waits for the sampler to see all of it; it asserts no time.)
        cleared = threading.Event()
        broker.memory.on_clear(cleared.set)
        for _ in range(3_000):
            if broker.memory.outbound >= body_octets:
                break
            threading.Event().wait(0.01)
        assert broker.memory.outbound == body_octets
        assert broker.memory.alarmed
        # Past the bound: connection.close 320, and the socket ends.
        try:
            for frame in frames[index:]:
                hostile.sock.sendall(frame)
        except OSError:
            pass  # the broker closed first
        events = hostile.read_to_end()
        hostile.sock.close()
        [closed] = [e for e in events if type(e) is ConnectionClosed]
        assert closed.reply_code == 320
        assert "over the connection's bound" in closed.reply_text
        # The octets are released: the alarm clears and another client publishes.
        assert cleared.wait(30)
        assert round_trip(ports.url(), b"after the hostile one") == b"after the hostile one"
