"""The AMQP 0-10 part of ``bench/codec.py``: our 0-10 core next to qpid-python 1.36's codec.

One message shape, as close to the 0-9-1 one as 0-10 allows: ``message.transfer`` with
``delivery-properties`` (routing key, delivery mode 2, exchange, timestamp) and
``message-properties`` (content type, a uuid message id, the three application headers),
then the body.

* **decode**: N transfers from our server core, as one buffer, fed to our client core
  (``amqp_sansio.v0_10.Connection``, a session attached and subscribed beforehand) in read-size
  pieces; each :class:`MessageReceived` goes to a sink after its application headers are read.
  The client core also numbers, completes and reports the transfers, which qpid's codec does
  not do.
* **encode**: N ``Session.transfer`` calls of our client core, the structs built per message,
  each message's octets taken with ``data_to_send()``.
* **qpid-python**: ``FrameDecoder -> SegmentDecoder -> OpDecoder`` on the same buffer, and
  ``OpEncoder -> SegmentEncoder -> FrameEncoder`` (``bench/qpid_codec_0_10.py2``), under Python
  2.7 in a subprocess of the same run. Each side's frames are checked to decode in the other.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from amqp_sansio.v0_10 import (
    NEED_DATA,
    AcceptMode,
    Connection,
    ConnectionConfig,
    CreditUnit,
    DeliveryProperties,
    FlowMode,
    MessageProperties,
    MessageReceived,
    Session,
    Typed,
)
from amqp_sansio.v0_10.testing import ConnectionPair, parse_assemblies

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

ROOT: Final = Path(__file__).resolve().parent.parent
QPID_SCRIPT: Final = Path(__file__).resolve().parent / "qpid_codec_0_10.py2"
DESTINATION: Final = "ctag-1"
EXCHANGE: Final = "amq.direct"
ROUTING_KEY: Final = "bench.key"
CONTENT_TYPE: Final = "application/json"
HEADERS: Final[Mapping[str, object]] = {"x-trace": "abc123", "attempt": 3, "ok": True}
MESSAGE_ID: Final = uuid.UUID(bytes=b"\x0e\x4b\x7c\x1d" + b"\x00" * 11 + b"\x01")
TIMESTAMP: Final = 1_700_000_000
NOTES: Final = (
    (
        "0-10: ours is the whole client core (framing, assembly, command ids, completion, the "
        "MessageReceived event) against qpid-python's codec alone; qpid runs on CPython 2.7 in "
        "a subprocess, ours on this interpreter. Both encode the structs they build per message."
    ),
)


def headers() -> list[Any]:
    return [
        DeliveryProperties(
            routing_key=ROUTING_KEY, delivery_mode=2, exchange=EXCHANGE, timestamp=TIMESTAMP
        ),
        MessageProperties(
            content_type=CONTENT_TYPE,
            message_id=MESSAGE_ID,
            application_headers=dict(HEADERS),  # type: ignore[arg-type]
        ),
    ]


def _pair() -> tuple[ConnectionPair, Session, Session]:
    """A client and a server core with a session and a subscription with unlimited credit."""
    config = ConnectionConfig(max_message_size=2**30)
    pair = ConnectionPair(config, config)
    pair.handshake()
    client, server = pair.attach("bench")
    client.subscribe("q", DESTINATION, accept_mode=AcceptMode.NONE)
    client.set_flow_mode(DESTINATION, FlowMode.CREDIT)
    client.flow(DESTINATION, CreditUnit.MESSAGE)
    client.flow(DESTINATION, CreditUnit.BYTE)
    for event in pair.transfer(pair.client):
        server.complete(event.command_id)  # type: ignore[union-attr]
    pair.transfer(pair.server)
    pair.client.data_to_send()
    return pair, client, server


def build_transfers(n: int, body: bytes) -> bytes:
    """The octets of *n* transfers from our server core, as its client receives them."""
    _, _, server = _pair()
    conn = server._conn
    for _ in range(n):
        server.transfer(DESTINATION, body, headers=headers(), accept_mode=AcceptMode.NONE)
    return b"".join(bytes(b) for b in conn.buffers_to_send())


def fresh_client() -> Connection:
    """A client core in the state the transfers of :func:`build_transfers` expect."""
    pair, _, _ = _pair()
    return pair.client


def decode_ours(conn: Connection, data: bytes, sink: Callable[[object], object], step: int) -> int:
    count = 0
    receive = conn.receive_data
    next_event = conn.next_event
    for start in range(0, len(data), step):
        receive(data[start : start + step])
        while (event := next_event()) is not NEED_DATA:
            assert type(event) is MessageReceived
            props = event.message_properties
            sink((event.transfer, props, props.application_headers, event.body))  # type: ignore[union-attr]
            count += 1
    return count


def encode_ours(session: Session, n: int, body: bytes, sink: Callable[[object], object]) -> None:
    conn = session._conn
    for _ in range(n):
        session.transfer(EXCHANGE, body, headers=headers())
        sink(conn.data_to_send())


def one_transfer(body: bytes) -> bytes:
    """Our client core's octets for one publish (what qpid's must decode to the same)."""
    _, client, _ = _pair()
    client.transfer(EXCHANGE, body, headers=headers())
    return client._conn.data_to_send()


def verify_ours(data: bytes, n: int, body: bytes, step: int) -> None:
    got: list[Any] = []
    count = decode_ours(fresh_client(), data, got.append, step)
    if count != n:
        raise RuntimeError(f"0-10 decode ours: {count} messages, expected {n}")
    transfer, props, app_headers, got_body = got[-1]
    plain = {k: v.value if isinstance(v, Typed) else v for k, v in app_headers.items()}
    if got_body != body or plain != HEADERS or props.message_id != MESSAGE_ID:
        raise RuntimeError("0-10 decode ours: the last message is not the one sent")
    if transfer.destination != DESTINATION:
        raise RuntimeError(f"0-10 decode ours: destination {transfer.destination!r}")


def check_qpid_frames(wire: bytes, body: bytes) -> None:
    """qpid's frames for one transfer, read by our reader: the values we send."""
    (assembly,) = parse_assemblies(wire)
    ours = parse_assemblies(one_transfer(body))[0]
    if (assembly.op, assembly.body) != (ours.op, ours.body):
        raise RuntimeError("qpid's transfer differs from ours in command or body")
    if assembly.headers is None or ours.headers is None:
        raise RuntimeError("qpid's transfer has no header segment")
    for theirs, mine in zip(assembly.headers, ours.headers, strict=True):
        if theirs != mine:
            raise RuntimeError(f"qpid's header {theirs!r} differs from ours {mine!r}")


def _timed(fn: Callable[[], object], clock: Callable[[], float]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = clock()
        fn()
        return clock() - start
    finally:
        gc.enable()


def time_ours(
    sizes: Mapping[str, tuple[int, int]], repeat: int, step: int, clock: Callable[[], float]
) -> dict[tuple[str, str], list[float]]:
    samples: dict[tuple[str, str], list[float]] = {}
    for label, (size, n) in sizes.items():
        body = bytes(32 + i % 95 for i in range(size))
        data = build_transfers(n, body)
        verify_ours(data, n, body, step)
        decode = samples[("decode", label)] = []
        encode = samples[("encode", label)] = []
        for _ in range(repeat):
            conn = fresh_client()
            decode.append(
                _timed(lambda c=conn, d=data: decode_ours(c, d, _drop(), step), clock)  # type: ignore[misc]
            )
            _, session, _ = _pair()
            encode.append(
                _timed(lambda s=session, k=n, b=body: encode_ours(s, k, b, _drop()), clock)  # type: ignore[misc]
            )
    return samples


def _drop() -> Callable[[object], object]:
    held: list[object] = []

    def sink(item: object) -> None:
        held[:] = (item,)

    return sink


def time_qpid(
    sizes: Mapping[str, tuple[int, int]], repeat: int, step: int, timer: str
) -> tuple[dict[tuple[str, str], list[float]], str] | str:
    """qpid-python's samples and its Python version, or why it could not run."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.support.qpid import QpidUnavailable, py2_env, python27, qpid_install
    finally:
        sys.path.remove(str(ROOT))
    python = python27()
    if python is None:
        return "no Python 2.7 here (pyenv install 2.7.18): qpid-python skipped"
    try:
        qpid_dir = qpid_install(python)
    except (QpidUnavailable, RuntimeError) as exc:
        return f"qpid-python could not be installed: {exc}"
    params = {
        "sizes": {label: [size, n] for label, (size, n) in sizes.items()},
        "rounds": repeat,
        "timer": timer,
        "read_size": step,
        "data": {},
    }
    # qpid decodes the octets our server core writes, so both decoders get the same input.
    for label, (size, _) in sizes.items():
        body = bytes(32 + i % 95 for i in range(size))
        params["data"][label] = build_transfers(1, body).hex()  # type: ignore[index]
    done = subprocess.run(
        [str(python), str(QPID_SCRIPT)],
        input=json.dumps(params),
        env=py2_env(qpid_dir),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"qpid-python's benchmark failed:\n{done.stdout}\n{done.stderr}")
    report = json.loads(done.stdout)
    for label, wire in report["frames"].items():
        size = sizes[label][0]
        check_qpid_frames(bytes.fromhex(wire), bytes(32 + i % 95 for i in range(size)))
    samples = {(r["op"], r["size"]): r["seconds"] for r in report["results"]}
    return samples, report["python"]


def run(
    sizes: Mapping[str, tuple[int, int]],
    repeat: int,
    step: int,
    timer: str,
    clock: Callable[[], float],
    *,
    qpid: bool,
    ours_0_9_1: Mapping[tuple[str, str], float],
) -> list[dict[str, object]]:
    """Time the 0-10 cases, print their table, and return the JSON rows."""
    ours = time_ours(sizes, repeat, step, clock)
    qpid_result = time_qpid(sizes, repeat, step, timer) if qpid else "skipped (--amqp-0-10 ours)"
    theirs: dict[tuple[str, str], list[float]] = {}
    qpid_python = ""
    if isinstance(qpid_result, str):
        print(f"\nqpid-python: {qpid_result}")
    else:
        theirs, qpid_python = qpid_result
    print(
        "\nAMQP 0-10: message.transfer with delivery and message properties"
        + (f"; qpid-python 1.36 on Python {qpid_python}" if qpid_python else "")
    )
    header = (
        f"{'case':<14}{'N':>7}{'ours 0-10 msg/s':>18}{'qpid msg/s':>14}{'ours/qpid':>11}"
        f"{'ours 0-9-1 msg/s':>19}"
    )
    print(header)
    print("-" * len(header))
    rows: list[dict[str, object]] = []
    for (op, label), seconds in ours.items():
        n = sizes[label][1]
        rate = n / statistics.median(seconds)
        peer = theirs.get((op, label))
        peer_rate = n / statistics.median(peer) if peer else None
        other = ours_0_9_1.get((op, label))
        versus = f"{peer_rate:>14,.0f}{rate / peer_rate:>10.2f}x" if peer_rate else " " * 25
        print(
            f"{op + ' ' + label:<14}{n:>7}{rate:>18,.0f}{versus}"
            + (f"{other:>19,.0f}" if other else f"{'-':>19}")
        )
        rows.append(
            {
                "op": op,
                "size": label,
                "n": n,
                "lib": "ours 0-10",
                "protocol": "0-10",
                "seconds": seconds,
                "median_msgs_per_s": rate,
                "ours_over_qpid": rate / peer_rate if peer_rate else None,
            }
        )
        if peer:
            rows.append(
                {
                    "op": op,
                    "size": label,
                    "n": n,
                    "lib": "qpid-python",
                    "protocol": "0-10",
                    "seconds": peer,
                    "median_msgs_per_s": peer_rate,
                }
            )
    return rows
