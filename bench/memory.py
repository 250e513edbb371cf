"""Memory of the client core: per idle connection, per open channel, and receiving a huge message.

Measured with ``tracemalloc`` (Python's own allocations, which is where the core keeps
everything):

* **idle connection**: K client cores, each taken through the handshake with a server core by
  ``amqp_sansio.testing.ConnectionPair``, kept without their server; (memory after - before) / K.
* **open channel**: one client core opens C channels; (after - before) / C.
* **one huge message, whole**: a consuming client core (frame_max 131072, RabbitMQ's default)
  receives one ``basic.deliver`` with a body of ``--body-mib`` MiB, fed in 64 KiB ``bytes``
  pieces as a socket would hand them over, until the ``MessageReceived``; the traced peak while
  doing so, against the body size. Goal (issue 3): at most 1.1x the body.
* **one huge message, chunk mode**: the same with ``ConnectionConfig(chunk_threshold=...)``; each
  ``MessageBodyReceived`` chunk is dropped once seen. Goal: a constant, under 16 MiB, whatever
  the body size (two sizes are measured to show it).

The input stream is produced piece by piece (it is never all in memory), and the pieces are
checked: the whole body must arrive, equal to what was sent.

Run ``.venv/bin/python bench/memory.py``; see bench/README.md.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import struct
import sys
import tracemalloc
from typing import TYPE_CHECKING, Final

from amqp_sansio import (
    NEED_DATA,
    BasicConsume,
    BasicConsumeOk,
    ConnectionConfig,
    MessageBodyReceived,
    MessageCompleted,
    MessageReceived,
    MessageStarted,
    MethodReceived,
)
from amqp_sansio.testing import ConnectionPair

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from amqp_sansio import Connection

FRAME_MAX: Final = 131072
READ_SIZE: Final = 65536
MIB: Final = 1024 * 1024
CHUNK_THRESHOLD: Final = MIB
_FRAME: Final = struct.Struct(">BHI")


class BenchError(Exception):
    """The message did not arrive whole and correct."""


def opened_pair(config: ConnectionConfig | None = None) -> ConnectionPair:
    pair = ConnectionPair(client_config=config, server_config=config)
    pair.handshake()
    return pair


def consuming_client(config: ConnectionConfig) -> Connection:
    pair = opened_pair(config)
    channel = pair.open_channel()
    pair.client.send_method(channel, BasicConsume(queue="q", consumer_tag="ctag"))
    for event in pair.transfer(pair.client):
        if isinstance(event, MethodReceived) and isinstance(event.method, BasicConsume):
            pair.server.send_method(channel, BasicConsumeOk(consumer_tag="ctag"))
    pair.transfer(pair.server)
    pair.client.data_to_send()
    return pair.client


def traced(step: Callable[[], object]) -> int:
    """Octets still allocated after *step* (what it keeps), traced from a clean start."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    kept = step()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    del kept
    return after - before


def per_connection(count: int) -> float:
    def make() -> list[Connection]:
        return [opened_pair().client for _ in range(count)]

    return traced(make) / count


def per_channel(count: int) -> float:
    pair = opened_pair()

    def open_all() -> None:
        for _ in range(count):
            pair.open_channel()

    return traced(open_all) / count


def delivery_stream(body_size: int, payload: bytes) -> Iterator[bytes]:
    """The octets of one delivery on channel 1, in READ_SIZE pieces, made as they are needed.

    Every body frame carries *payload* (frame_max - 8 octets) or its beginning (the last one).
    """
    method = struct.pack(">HH", 60, 60) + b"\x04ctag" + struct.pack(">QB", 1, 0) + b"\x00\x01q"
    props = struct.pack(">H", 0x1000) + b"\x02"  # delivery_mode 2
    head = (
        _FRAME.pack(1, 1, len(method))
        + method
        + b"\xce"
        + _FRAME.pack(2, 1, 12 + len(props))
        + struct.pack(">HHQ", 60, 0, body_size)
        + props
        + b"\xce"
    )
    full = _FRAME.pack(3, 1, len(payload)) + payload + b"\xce"
    frames, last = divmod(body_size, len(payload))

    def segments() -> Iterator[memoryview]:
        yield memoryview(head)
        for _ in range(frames):
            yield memoryview(full)
        if last:
            yield memoryview(_FRAME.pack(3, 1, last) + payload[:last] + b"\xce")

    pending: list[memoryview] = []
    have = 0
    for segment in segments():
        while segment:
            take = min(READ_SIZE - have, len(segment))
            pending.append(segment[:take])
            have += take
            segment = segment[take:]
            if have == READ_SIZE:
                yield b"".join(pending)  # a new bytes, as recv() returns
                pending = []
                have = 0
    if pending:
        yield b"".join(pending)


def receive_huge(body_size: int, chunk_threshold: int | None) -> tuple[int, int]:
    """(traced peak while receiving, octets of body seen); the body is checked on the way."""
    config = ConnectionConfig(
        frame_max=FRAME_MAX,
        heartbeat=0,
        chunk_threshold=chunk_threshold,
        max_message_size=2 * body_size,  # the default, 128 MiB, refuses the message
    )
    client = consuming_client(config)
    payload = bytes(range(256)) * ((FRAME_MAX - 8) // 256) + bytes(range((FRAME_MAX - 8) % 256))
    seen = 0
    whole: bytes | bytearray | None = None
    gc.collect()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    for piece in delivery_stream(body_size, payload):
        client.receive_data(piece)
        del piece
        while (event := client.next_event()) is not NEED_DATA:
            if isinstance(event, MessageBodyReceived):
                # Chunks arrive frame by frame: check each against the payload, then drop it.
                chunk = event.data
                if chunk != payload[: len(chunk)]:
                    raise BenchError(f"chunk at {seen} differs from what was sent")
                seen += len(chunk)
            elif isinstance(event, MessageReceived):
                whole = event.body
            elif not isinstance(event, (MessageStarted, MessageCompleted)):
                raise BenchError(f"unexpected {event!r}")
            del event
        client.data_to_send()
    peak = tracemalloc.get_traced_memory()[1] - base
    if whole is not None:
        view = memoryview(whole)
        step = len(payload)
        for start in range(0, len(whole), step):
            if view[start : start + step] != payload[: min(step, len(whole) - start)]:
                raise BenchError(f"body differs from what was sent at {start}")
        seen = len(whole)
        del view, whole
    if seen != body_size:
        raise BenchError(f"{seen} body octets arrived, {body_size} were sent")
    return peak, seen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--body-mib", type=int, default=256, help="size of the huge message")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--channels", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 1 run")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    body = (4 if args.quick else args.body_mib) * MIB
    small_body = body // 2
    connections = 20 if args.quick else args.connections
    channels = 50 if args.quick else args.channels
    tracemalloc.start()
    try:
        rows = [
            ("idle client connection", [per_connection(connections) for _ in range(repeat)]),
            ("open channel", [per_channel(channels) for _ in range(repeat)]),
        ]
        print(
            f"tracemalloc, median of {repeat} run(s); frame_max {FRAME_MAX}, "
            f"{READ_SIZE}-octet reads"
        )
        for label, values in rows:
            print(f"  {label:<40} {statistics.median(values):>12,.0f} octets")
        goals_met = True
        for label, threshold, size in (
            ("whole", None, body),
            ("chunk mode", CHUNK_THRESHOLD, small_body),
            ("chunk mode", CHUNK_THRESHOLD, body),
        ):
            peaks = [receive_huge(size, threshold)[0] for _ in range(repeat)]
            peak = statistics.median(peaks)
            if threshold is None:
                ok = peak <= 1.1 * size
                goal = f"{peak / size:.3f}x the body (goal <= 1.1x) {'met' if ok else 'MISSED'}"
            else:
                ok = peak < 16 * MIB
                goal = (
                    f"{peak / MIB:.2f} MiB (goal: constant, < 16 MiB) {'met' if ok else 'MISSED'}"
                )
            goals_met &= ok
            print(f"  peak receiving {size // MIB} MiB, {label:<11} {peak:>14,.0f} octets  {goal}")
    except BenchError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        tracemalloc.stop()
    print("goals " + ("met" if goals_met else "MISSED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
