"""Deliveries through the whole client core, beside the codec alone and beside pika's client.

The same wire bytes as ``bench/codec.py`` (N ``basic.deliver`` messages on channel 1, consumer
tag ``ctag-1``, each a method frame, a content header with a 3-entry headers table and one body
frame of 64 B, 1 KiB or 64 KiB) are consumed four ways, in the same process and the same rounds:

* **codec**: ``bench/codec.py``'s decode of ours (``FrameReader``, frames assembled into
  (method, properties, headers, body)); the reference the core is held against.
* **core**: ``amqp_sansio.Connection`` in the client role, opened and consuming: each read goes
  to ``receive_data``, ``next_event`` runs until ``NEED_DATA``; for each ``MessageReceived`` the
  headers are read and a ``basic.ack`` is sent (``ack``: one per message; ``ack100``: one with
  ``multiple`` every 100 messages), then ``data_to_send()`` is drained once per read.
* **pika**: ``pika.connection.Connection`` and its ``Channel``, opened and consuming (through a
  handshake with our server core), without a socket: each read goes to
  ``Connection._on_data_available``, what its I/O adapter calls on every socket read; its
  consumer callback reads the headers and calls ``channel.basic_ack`` the same way, and the
  frames it writes (``_adapter_emit_data``) are dropped per read.

Goal (issue 3): the core keeps at least 70% of the codec's messages per second.

Run ``.venv/bin/python bench/core.py`` (``--help`` for the options); see bench/README.md.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import sys
from typing import TYPE_CHECKING, Any, Final

import pika
import pika.connection
import pika.spec

import codec
from amqp_sansio import (
    NEED_DATA,
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    ConnectionConfig,
    MessageReceived,
    MethodReceived,
    Role,
)
from amqp_sansio import Connection as CoreConnection
from amqp_sansio._frames import FrameReader, MethodFrame
from amqp_sansio.testing import ConnectionPair, get_all_events

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

FRAME_MAX: Final = codec.FRAME_MAX
CHANNEL: Final = codec.CHANNEL
#: Messages per case (full run, --quick).
SIZES: Final[Mapping[str, tuple[int, int, int]]] = codec.SIZES
#: pika's I/O adapters read at most this much per recv (pika.adapters.utils.io_services_utils).
PIKA_READ_SIZE: Final = 4096
GOAL: Final = 0.70
RUNS: Final = ("codec", "core-ack", "core-ack100", "pika-ack", "pika-ack100")


class BenchError(Exception):
    """A run handled the wrong number of messages or acks."""


# --------------------------------------------------------------------------------------------
# Ours: a consuming client core
# --------------------------------------------------------------------------------------------


def consuming_core() -> CoreConnection:
    """A client core after the handshake, channel 1 open and consuming as ``ctag-1``."""
    config = ConnectionConfig(frame_max=FRAME_MAX, heartbeat=0)
    pair = ConnectionPair(client_config=config, server_config=config)
    pair.handshake()
    channel = pair.open_channel()
    if channel != CHANNEL:
        raise BenchError(f"the first channel is {channel}, not {CHANNEL}")
    pair.client.send_method(CHANNEL, BasicConsume(queue="bench", consumer_tag=codec.CONSUMER_TAG))
    for event in pair.transfer(pair.client):
        if isinstance(event, MethodReceived) and isinstance(event.method, BasicConsume):
            pair.server.send_method(CHANNEL, BasicConsumeOk(consumer_tag=codec.CONSUMER_TAG))
    replies = pair.transfer(pair.server)
    if not any(isinstance(e, MethodReceived) for e in replies):
        raise BenchError(f"no basic.consume-ok: {replies}")
    pair.client.data_to_send()
    return pair.client


def run_core(
    client: CoreConnection,
    data: bytes,
    read_size: int,
    ack_every: int,
    out: Callable[[bytes], object],
) -> int:
    """Feed *data* to *client* in *read_size* reads; ack; return the messages received."""
    receive = client.receive_data
    next_event = client.next_event
    send_method = client.send_method
    data_to_send = client.data_to_send
    need_data = NEED_DATA
    latest: collections.deque[object] = collections.deque(maxlen=1)
    keep = latest.append
    count = 0
    for start in range(0, len(data), read_size):
        receive(data[start : start + read_size])
        while (event := next_event()) is not need_data:
            if type(event) is not MessageReceived:
                raise BenchError(f"core: unexpected {event!r}")
            method: Any = event.method
            properties: Any = event.properties
            keep((method, properties.headers, event.body))
            count += 1
            tag = method.delivery_tag
            if ack_every == 1:
                send_method(CHANNEL, BasicAck(delivery_tag=tag))
            elif not tag % ack_every:
                send_method(CHANNEL, BasicAck(delivery_tag=tag, multiple=True))
        out(data_to_send())
    return count


# --------------------------------------------------------------------------------------------
# pika: Connection and Channel without a socket
# --------------------------------------------------------------------------------------------


class OfflinePika(pika.connection.Connection):  # type: ignore[misc]
    """pika's connection with the I/O adapter part left out: bytes in by hand, bytes out kept."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        params = pika.ConnectionParameters(frame_max=FRAME_MAX, heartbeat=0)
        super().__init__(parameters=params, internal_connection_workflow=False)

    def _adapter_call_later(self, delay: float, callback: Callable[[], object]) -> object:
        return object()  # no timers fire: heartbeats are off

    def _adapter_remove_timeout(self, timeout_id: object) -> None:
        pass

    def _adapter_add_callback_threadsafe(self, callback: Callable[[], object]) -> None:
        raise NotImplementedError

    def _adapter_connect_stream(self) -> None:
        pass

    def _adapter_disconnect_stream(self) -> None:
        pass

    def _adapter_emit_data(self, data: bytes) -> None:
        self.written.append(data)

    def _adapter_get_write_buffer_size(self) -> int:
        return 0


class PikaConsumer:
    """A consuming pika client; :meth:`feed` is what its adapter does with each read."""

    def __init__(self, ack_every: int) -> None:
        self.count = 0
        self.ack_every = ack_every
        self.latest: collections.deque[object] = collections.deque(maxlen=1)
        self.conn = OfflinePika()
        self.channel: Any = None
        server = CoreConnection(Role.SERVER, ConnectionConfig(frame_max=FRAME_MAX, heartbeat=0))
        self.conn._on_stream_connected()  # sends the protocol header
        for _ in range(20):
            server.receive_data(b"".join(self.conn.written))
            self.conn.written.clear()
            for event in get_all_events(server):
                name = type(event).__name__
                if name == "AuthenticationRequested":
                    server.accept_authentication()
                elif name == "VirtualHostRequested":
                    server.accept_virtual_host()
                elif isinstance(event, MethodReceived) and isinstance(event.method, BasicConsume):
                    server.send_method(
                        CHANNEL, BasicConsumeOk(consumer_tag=event.method.consumer_tag)
                    )
            reply = server.data_to_send()
            if reply:
                self.conn._on_data_available(reply)
            if self.conn.is_open and self.channel is None:
                self.conn.channel(channel_number=CHANNEL, on_open_callback=self._on_channel)
            if self.channel is not None and self.channel.consumer_tags and not self.conn.written:
                break
        else:
            raise BenchError("pika did not open and consume")
        self.conn.written.clear()

    def _on_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.basic_consume(
            "bench", self._on_message, auto_ack=False, consumer_tag=codec.CONSUMER_TAG
        )

    def _on_message(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        self.latest.append((method, properties.headers, body))
        self.count += 1
        tag = method.delivery_tag
        if self.ack_every == 1:
            channel.basic_ack(tag)
        elif not tag % self.ack_every:
            channel.basic_ack(tag, multiple=True)


def run_pika(
    consumer: PikaConsumer, data: bytes, read_size: int, out: Callable[[bytes], object]
) -> int:
    on_data = consumer.conn._on_data_available
    written = consumer.conn.written
    for start in range(0, len(data), read_size):
        on_data(data[start : start + read_size])
        out(b"".join(written))
        written.clear()
    return consumer.count


# --------------------------------------------------------------------------------------------
# Verification and timing
# --------------------------------------------------------------------------------------------


def acks_in(wire: bytes) -> list[tuple[int, bool]]:
    """(delivery tag, multiple) of every basic.ack in *wire*, read by our FrameReader."""
    reader = FrameReader(frame_max=FRAME_MAX)
    reader.feed(wire)
    acks = []
    while (frame := reader.next_frame()) is not None:
        if not isinstance(frame, MethodFrame) or not isinstance(frame.method, BasicAck):
            raise BenchError(f"expected only basic.ack frames, got {frame!r}")
        acks.append((frame.method.delivery_tag, frame.method.multiple))
    if reader.buffered:
        raise BenchError(f"{reader.buffered} octets after the last ack")
    return acks


def expected_acks(n: int, ack_every: int) -> list[tuple[int, bool]]:
    if ack_every == 1:
        return [(tag, False) for tag in range(1, n + 1)]
    return [(tag, True) for tag in range(ack_every, n + 1, ack_every)]


def make_call(
    run: str,
    data: bytes,
    n: int,
    read_size: int,
    pika_read_size: int,
    sink: Callable[[Any], object],
) -> tuple[Callable[..., object], Callable[[], tuple[object, ...]]]:
    """The timed function and a factory of its arguments (set up outside the clock)."""
    if run == "codec":
        return codec.decode_ours, lambda: (data, sink, read_size)
    kind, acks = run.split("-")
    every = 1 if acks == "ack" else 100
    if kind == "core":
        return run_core, lambda: (consuming_core(), data, read_size, every, sink)
    return run_pika, lambda: (PikaConsumer(every), data, pika_read_size, sink)


def verify(run: str, data: bytes, n: int, read_size: int, pika_read_size: int) -> None:
    messages: list[object] = []
    written: list[bytes] = []
    fn, make_args = make_call(run, data, n, read_size, pika_read_size, written.append)
    if run == "codec":
        fn, make_args = make_call(run, data, n, read_size, pika_read_size, messages.append)
        fn(*make_args())
        if len(messages) != n:
            raise BenchError(f"codec: {len(messages)} messages, expected {n}")
        return
    count = fn(*make_args())
    if count != n:
        raise BenchError(f"{run}: {count} messages, expected {n}")
    every = 1 if run.endswith("-ack") else 100
    got = acks_in(b"".join(written))
    if got != expected_acks(n, every):
        raise BenchError(f"{run}: {len(got)} acks, not the {len(expected_acks(n, every))} expected")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per case (median)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small N, 1 repeat")
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated body sizes")
    parser.add_argument("-n", type=int, help="messages per case (default: per body size)")
    parser.add_argument(
        "--read-size", type=int, default=65536, help="octets per read for ours (default 65536)"
    )
    parser.add_argument(
        "--pika-read-size",
        type=int,
        default=PIKA_READ_SIZE,
        help=f"octets per read for pika (default {PIKA_READ_SIZE}, what its adapters recv)",
    )
    parser.add_argument("--timer", choices=tuple(codec.TIMERS), default="wall")
    args = parser.parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]
    for size in sizes:
        if size not in SIZES:
            parser.error(f"unknown size {size!r} (choose from {', '.join(SIZES)})")
    repeat = 1 if args.quick else args.repeat
    clock = codec.TIMERS[args.timer]
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"pika {pika.__version__}; frame_max {FRAME_MAX}; ours reads {args.read_size} octets, "
        f"pika {args.pika_read_size}; median of {repeat} run(s), {args.timer} time, gc off"
    )
    header = f"{'case':<8}{'N':>7}" + "".join(f"{run + ' msg/s':>19}" for run in RUNS)
    header += f"{'core/codec':>13}{'ack100/codec':>14}{'core/pika':>11}{'ack100/pika':>13}"
    print(header)
    print("-" * len(header))
    missed = False
    for size in sizes:
        octets, n_full, n_quick = SIZES[size]
        n = args.n or (n_quick if args.quick else n_full)
        data = codec.build_deliveries(n, codec.body_for(octets))
        latest: collections.deque[object] = collections.deque(maxlen=1)
        calls = {}
        try:
            for run in RUNS:  # also the warm-up
                verify(run, data, n, args.read_size, args.pika_read_size)
                calls[run] = make_call(
                    run, data, n, args.read_size, args.pika_read_size, latest.append
                )
        except BenchError as exc:
            print(f"\nFAILED: {exc}", file=sys.stderr)
            return 1
        samples: dict[str, list[float]] = {run: [] for run in RUNS}
        for round_ in range(repeat):
            k = round_ % len(RUNS)
            for run in (*RUNS[k:], *RUNS[:k]):
                fn, make_args = calls[run]
                samples[run].append(codec._timed(fn, make_args, clock))
        rate = {run: n / statistics.median(samples[run]) for run in RUNS}
        ratios = (
            rate["core-ack"] / rate["codec"],
            rate["core-ack100"] / rate["codec"],
            rate["core-ack"] / rate["pika-ack"],
            rate["core-ack100"] / rate["pika-ack100"],
        )
        missed |= min(ratios[:2]) < GOAL
        print(
            f"{size:<8}{n:>7}"
            + "".join(f"{rate[run]:>19,.0f}" for run in RUNS)
            + f"{ratios[0]:>12.2f}x{ratios[1]:>13.2f}x{ratios[2]:>10.2f}x{ratios[3]:>12.2f}x",
            flush=True,
        )
    print(f"\nGoal: core >= {GOAL:.0%} of codec: {'MISSED' if missed else 'met'} (ack and ack100)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
