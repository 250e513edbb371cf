"""Fuzzing with a fixed budget: mutated sessions and random octets into both roles.

The property (see ``tests/support/fuzzing.py``): only events or ``RemoteProtocolError`` come out, a
failed connection stays failed with its close written last, and the octets held unparsed never
exceed one frame. The longer-running entry point is ``fuzz/fuzz_connection.py``.
"""

from __future__ import annotations

import random
import struct
import tracemalloc

import pytest

from amqp_sansio import (
    BasicProperties,
    BasicPublish,
    ConnectionState,
    RemoteProtocolError,
    Role,
)
from amqp_sansio.framing import HEARTBEAT_FRAME
from amqp_sansio.testing import ConnectionPair, content_frames, get_all_events
from tests.support.fuzzing import (
    SLACK,
    Session,
    buffered,
    corpus,
    frame_limit,
    mutate_session,
    random_session,
    run_session,
)

CORPUS = corpus()
ROLES = pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER], ids=lambda r: r.value)
#: The versions and what each gets of the budget: 0-9-1 most, its corpus being the largest.
VERSIONS = pytest.mark.parametrize(
    ("version", "budget"), [("0-9-1", 1.0), ("0-9", 0.4), ("0-8", 0.4)], ids=["0-9-1", "0-9", "0-8"]
)


@pytest.mark.parametrize("session", CORPUS, ids=lambda s: s.name)
def test_unmutated_sessions_replay_the_same_whole_and_in_pieces(session: Session) -> None:
    whole = run_session(session, eof=True)
    pieces = run_session(session, random.Random(7), eof=True)
    assert pieces.events == whole.events
    assert (pieces.error is None) == (whole.error is None)
    if whole.error is not None and pieces.error is not None:
        assert pieces.error.reply_code == whole.error.reply_code
    if session.name.startswith("pair/"):
        assert whole.error is None  # our own cores' conversations are valid
        assert whole.events > 3


@pytest.mark.parametrize(
    "session", [s for s in CORPUS if s.name.startswith("pair/")], ids=lambda s: s.name
)
def test_pair_sessions_replay_the_same_one_octet_at_a_time(session: Session) -> None:
    """Every version, both roles: each octet fed alone gives the same events."""
    whole = run_session(session, eof=True)
    octets = run_session(session, eof=True, byte_at_a_time=True)
    assert (octets.events, octets.error) == (whole.events, None)


@VERSIONS
@ROLES
def test_mutated_sessions_give_only_events_or_remote_errors(
    role: Role, version: str, budget: float
) -> None:
    rng = random.Random(20261121 + (role is Role.SERVER) + 10 * (version != "0-9-1"))
    sessions = [s for s in CORPUS if s.role is role and s.version == version]
    assert sessions
    errors = 0
    runs = int(2500 * budget)
    for _ in range(runs):
        mutated = mutate_session(rng.choice(sessions), rng)
        outcome = run_session(mutated, rng if rng.random() < 0.5 else None, eof=rng.random() < 0.3)
        errors += outcome.error is not None
    assert errors > runs // 25  # the mutations reach the error paths, not only harmless octets


@VERSIONS
@ROLES
def test_random_octets_give_only_events_or_remote_errors(
    role: Role, version: str, budget: float
) -> None:
    rng = random.Random(4242 + (role is Role.SERVER) + 10 * (version != "0-9-1"))
    for _ in range(int(1500 * budget)):
        run_session(random_session(role, rng, version), rng if rng.random() < 0.5 else None)


def _open_pair() -> ConnectionPair:
    pair = ConnectionPair()
    pair.handshake()
    pair.open_channel()
    return pair


@ROLES
# 131072 + 1: nine octets over, past the 8 the server role tolerates (see FrameReader's slack).
@pytest.mark.parametrize("size", [131072 + 1, 2**20, 2**31, 2**32 - 1])
def test_a_huge_announced_frame_is_refused_from_its_header(role: Role, size: int) -> None:
    # A body frame announcing more than frame_max allows: refused once its 7-octet header is
    # in, before any of the payload is held.
    pair = _open_pair()
    conn = pair.client if role is Role.CLIENT else pair.server
    assert size > frame_limit(conn) - 8
    header = struct.pack(">BHI", 3, 1, size)
    for octet in range(len(header) - 1):
        conn.receive_data(header[octet : octet + 1])
        assert get_all_events(conn) == []
    conn.receive_data(header[-1:])
    with pytest.raises(RemoteProtocolError) as info:
        conn.next_event()
    assert info.value.reply_code == 501
    assert buffered(conn) <= len(header)
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(b"\x00" * 65536)  # nothing more is taken in


@ROLES
def test_endless_garbage_is_refused_at_once_and_never_buffered(role: Role) -> None:
    rng = random.Random(99)
    for _ in range(50):
        pair = _open_pair()
        conn = pair.client if role is Role.CLIENT else pair.server
        error: RemoteProtocolError | None = None
        for _ in range(256):  # up to 1 MiB, 4 KiB at a time
            conn.receive_data(rng.randbytes(4096))
            try:
                get_all_events(conn)
            except RemoteProtocolError as exc:
                error = exc
                break
            assert buffered(conn) <= frame_limit(conn) + SLACK
        assert error is not None
        assert conn.state is ConnectionState.ERROR


@ROLES
def test_an_endless_stream_of_heartbeats_holds_at_most_one_frame(role: Role) -> None:
    pair = _open_pair()
    conn = pair.client if role is Role.CLIENT else pair.server
    stream = HEARTBEAT_FRAME * 1000
    for offset in range(0, len(stream), 13):  # pieces that cut frames anywhere
        conn.receive_data(stream[offset : offset + 13])
        assert get_all_events(conn) == []
        assert buffered(conn) < len(HEARTBEAT_FRAME)


def test_a_frame_of_frame_max_is_held_at_most_whole() -> None:
    pair = _open_pair()
    limit = pair.server.frame_max
    body = b"b" * (3 * limit)
    data = content_frames(1, BasicPublish(), BasicProperties(), body, frame_max=limit)
    most = 0
    events = []
    for offset in range(0, len(data), 1000):
        pair.server.receive_data(data[offset : offset + 1000])
        events += get_all_events(pair.server)
        most = max(most, buffered(pair.server))
    assert most <= limit
    assert len(events) == 1


def test_memory_held_follows_the_octets_received_not_the_size_announced() -> None:
    """A peer announcing big bodies and sending one octet of each must not make the core
    allocate the announced sizes: with channel_max channels that is channel_max times
    max_message_size (2047 x 128 MiB by default) for a few kilobytes on the wire."""
    pair = ConnectionPair()
    pair.handshake()
    channels = [pair.open_channel() for _ in range(4)]
    announced = 16 * 1024 * 1024
    wire = bytearray()
    for ch in channels:
        frames = content_frames(ch, BasicPublish(), BasicProperties(), b"x" * 5000, frame_max=4096)
        # Rewrite the header's body size (octets 12..20 of the header frame) and keep only the
        # first body octet.
        method_end = frames.index(b"\xce") + 1
        header_end = frames.index(b"\xce", method_end) + 1
        header = bytearray(frames[method_end:header_end])
        struct.pack_into(">Q", header, 11, announced)
        wire += frames[:method_end] + header + struct.pack(">BHI", 3, ch, 1) + b"x\xce"
    tracemalloc.start()
    try:
        pair.server.receive_data(bytes(wire))
        assert get_all_events(pair.server) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"{peak} octets held for {len(wire)} received"
