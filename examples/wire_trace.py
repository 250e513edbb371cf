"""Decode a real RabbitMQ conversation with amqp_sansio's codec and print it frame by frame.

The bytes are a recording of RabbitMQ 3.10.8 (``tests/fixtures/rabbitmq/``): a handshake, a
publish with headers, its delivery, and a 10,000-byte body split across body frames.

    python examples/wire_trace.py [fixture-name]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from amqp_sansio.framing import (
    ContentBodyFrame,
    ContentHeaderFrame,
    FrameReader,
    HeartbeatFrame,
    MethodFrame,
    parse_protocol_header,
)

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "rabbitmq"


def describe(frame: MethodFrame | ContentHeaderFrame | ContentBodyFrame | HeartbeatFrame) -> str:
    if isinstance(frame, MethodFrame):
        return f"ch{frame.channel} {frame.method!r}"
    if isinstance(frame, ContentHeaderFrame):
        return f"ch{frame.channel} header body_size={frame.body_size} {frame.properties!r}"
    if isinstance(frame, ContentBodyFrame):
        return f"ch{frame.channel} body {len(frame.payload)} bytes"
    return "heartbeat"


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "delivery_with_headers"
    recording = json.loads((FIXTURES / f"{name}.json").read_text())
    print(f"{recording['scenario']}: {recording['description']}\n")
    readers = {"client": FrameReader(frame_max=131072), "server": FrameReader(frame_max=131072)}
    for chunk in recording["chunks"]:
        side, data = chunk["from"], bytes.fromhex(chunk["hex"])
        if side == "client" and data.startswith(b"AMQP"):
            header = parse_protocol_header(data)
            print(f"client → protocol header {header.version.name if header else '?'}")
            data = data[8:]
        readers[side].feed(data)
        arrow = "client →" if side == "client" else "       ← server"
        while (frame := readers[side].next_frame()) is not None:
            print(f"{arrow} {describe(frame)}"[:160])


if __name__ == "__main__":
    main()
