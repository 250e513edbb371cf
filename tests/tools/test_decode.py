"""amqp-decode on captures written here from a client and server core's bytes: in order, cut
small, reordered, retransmitted, and broken in every way a capture breaks.

The happy paths and the bad files run the installed console script in a subprocess, as a user
would; the many variations call :func:`amqp_tools.decode_main` in-process (scapy is imported
once, not per run).
"""

from __future__ import annotations

import contextlib
import io
import random
from typing import TYPE_CHECKING, Final

import pytest

from amqp_sansio import AMQP_0_8, AMQP_0_9, ProtocolSpec
from amqp_sansio.framing import (
    PROTOCOL_HEADER_0_9_1,
    PROTOCOL_HEADER_0_10,
    PROTOCOL_HEADER_1_0,
    ContentBodyFrame,
    ContentHeaderFrame,
    HeartbeatFrame,
    MethodFrame,
)
from amqp_sansio.testing import parse_frames
from amqp_tools import decode_main

from .captures import (
    LINKTYPE_RAW,
    Conversation,
    Host,
    Packet,
    Sender,
    amqp_session,
    amqp_session_0_10,
    conversation,
    pcap,
    pcapng,
)
from .support import assert_no_traceback, frame_lines, run_tool

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

Turns = list[tuple[Sender, bytes]]

WRITERS: Final[dict[str, Callable[[Sequence[Packet]], bytes]]] = {"pcap": pcap, "pcapng": pcapng}


@pytest.fixture(scope="module")
def turns() -> Turns:
    return amqp_session()


def expected_frames(turns: Turns, sender: Sender) -> list[str]:
    """What each frame of *sender* is called in amqp-decode's output, from the core's parser."""
    names = ["protocol header"] if sender == "client" else []
    for frame in parse_frames(b"".join(data for who, data in turns if who == sender)):
        if isinstance(frame, MethodFrame):
            names.append(frame.method.NAME)
        elif isinstance(frame, ContentHeaderFrame):
            names.append("content header")
        elif isinstance(frame, ContentBodyFrame):
            names.append("content body")
        else:
            assert isinstance(frame, HeartbeatFrame)
            names.append("heartbeat")
    return names


def decoded_frames(output: str, arrow: str) -> list[str]:
    """The frame names of one direction in amqp-decode's output."""
    names = []
    for line in frame_lines(output):
        if not line.startswith(arrow):
            continue
        words = line.split()[1:]
        if words[0] == "protocol":
            names.append("protocol header")
        elif words[1] == "content":
            names.append(f"content {words[2]}")
        else:
            names.append(words[1] if words[0].startswith("ch") else words[0])
    return names


def decode(tmp_path: Path, data: bytes, *args: str, name: str = "capture.pcap") -> tuple[int, str]:
    """Run amqp-decode in-process on *data*; its exit status and standard output."""
    path = tmp_path / name
    path.write_bytes(data)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = decode_main([str(path), *args])
    return status, out.getvalue()


# --- as a user runs it --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", WRITERS)
def test_decodes_every_frame_of_a_capture(tmp_path: Path, turns: Turns, fmt: str) -> None:
    capture = tmp_path / f"session.{fmt}"
    capture.write_bytes(WRITERS[fmt](conversation(turns).packets))
    result = run_tool("amqp-decode", str(capture))
    assert_no_traceback(result)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"session.{fmt} ({fmt})" in out
    assert decoded_frames(out, "C>S") == expected_frames(turns, "client")
    assert decoded_frames(out, "S>C") == expected_frames(turns, "server")
    assert "[1] 10.0.0.1:40001 > 10.0.0.2:5672: AMQP 0-9-1" in out
    assert "C>S ch1 queue.declare queue='jobs' passive=False durable=True" in out
    assert (
        "C>S ch1 content header class=60 body_size=5 content_type='text/plain' "
        "headers={'try': 1} delivery_mode=2" in out
    )
    assert "C>S ch1 content body 5 octets: b'hello'" in out
    # The login is shown, its password is not.
    assert "response=<PLAIN login 'guest', password hidden>" in out
    assert "\\x00guest\\x00guest" not in out
    assert "client 9 frames in 491 octets, server 6 frames in 400 octets" in out


def test_help_of_every_tool() -> None:
    for name, words in {
        "amqp-decode": ["--max-body", "--hex", "exit status"],
        "amqp-publish": ["--routing-key", "--persistent", "--content-type", "--header", "--url"],
        "amqp-consume": ["--queue", "--no-ack", "--prefetch-count", "--count", "--exclusive"],
    }.items():
        result = run_tool(name, "--help")
        assert result.returncode == 0, result.stderr
        for word in words:
            assert word in result.stdout, (name, word)


# --- bad input: a clear message and an exit status, never a traceback -------------------------


def test_a_file_that_is_not_a_capture(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("these are notes, not packets\n" * 10)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    result = run_tool("amqp-decode", str(text), str(empty), str(tmp_path / "missing.pcap"))
    assert_no_traceback(result)
    assert result.returncode == 2
    assert f"amqp-decode: error: {text} is not a pcap or pcapng capture" in result.stderr
    assert f"amqp-decode: error: {empty} is empty" in result.stderr
    assert "amqp-decode: error: cannot open" in result.stderr
    assert "No such file or directory" in result.stderr


@pytest.mark.parametrize("fmt", WRITERS)
def test_a_truncated_capture_decodes_what_it_holds(tmp_path: Path, turns: Turns, fmt: str) -> None:
    whole = WRITERS[fmt](conversation(turns).packets)
    capture = tmp_path / f"cut.{fmt}"
    capture.write_bytes(whole[: len(whole) * 2 // 3])
    result = run_tool("amqp-decode", str(capture))
    assert_no_traceback(result)
    assert result.returncode == 1
    assert "connection.start-ok" in result.stdout  # what came before the cut
    assert "error: capture file:" in result.stdout
    assert "truncated" in result.stdout or "too short" in result.stdout
    assert "problem" in result.stderr


def test_a_malformed_frame_is_reported_and_other_connections_go_on(
    tmp_path: Path, turns: Turns
) -> None:
    broken = list(turns)
    index = next(i for i, (who, data) in enumerate(broken) if b"jobs" in data and who == "client")
    data = bytearray(broken[index][1])
    data[-1] = 0x00  # the queue.declare frame's frame-end octet
    broken[index] = ("client", bytes(data))
    bad = conversation(broken, client=Host("10.0.0.1", 40001))
    good = conversation(turns, client=Host("10.0.0.1", 40002))
    capture = tmp_path / "two.pcapng"
    capture.write_bytes(pcapng(bad.packets + good.packets))
    result = run_tool("amqp-decode", str(capture))
    assert_no_traceback(result)
    assert result.returncode == 1
    errors = [line for line in result.stdout.splitlines() if "error:" in line]
    assert len(errors) == 1, errors
    assert "[1] C>S error: malformed frame: method frame on channel 1" in errors[0]
    assert "frame-end octet is 0x00, expected 0xce" in errors[0]
    assert "the rest of this side" in errors[0]
    # The broken side's later frames are not decoded; the server side and connection 2 are.
    assert "[1] C>S ch1 basic.publish" not in result.stdout
    assert "[1] S>C ch1 queue.declare-ok" in result.stdout
    assert "[2] C>S ch1 basic.publish" in result.stdout
    assert "1 problem found" in result.stderr


# --- reassembly -------------------------------------------------------------------------------


def _jumble(packets: list[Packet], rng: random.Random) -> list[Packet]:
    """Swap neighbours and repeat packets (retransmissions), the handshake left first."""
    head, rest = packets[:3], list(packets[3:])
    for index in range(len(rest) - 1):
        if rng.random() < 0.4:
            rest[index], rest[index + 1] = rest[index + 1], rest[index]
    jumbled = []
    for packet in rest:
        jumbled.append(packet)
        if rng.random() < 0.2:
            jumbled.append(packet)
    return head + jumbled


@pytest.mark.parametrize("seed", range(3))
def test_out_of_order_and_retransmitted_segments(tmp_path: Path, turns: Turns, seed: int) -> None:
    rng = random.Random(seed)
    # Small segments, and sequence numbers that wrap around 2**32 in both directions.
    conv = conversation(turns, mss=7, client_isn=2**32 - 300, server_isn=2**32 - 50)
    status, out = decode(tmp_path, pcap(_jumble(conv.packets, rng)))
    assert status == 0, out
    assert decoded_frames(out, "C>S") == expected_frames(turns, "client")
    assert decoded_frames(out, "S>C") == expected_frames(turns, "server")


def test_repacketised_retransmissions_overlap_what_came_before(
    tmp_path: Path, turns: Turns
) -> None:
    client = b"".join(data for who, data in turns if who == "client")
    conv = Conversation(mss=10)
    conv.send("client", client[:40])
    # A retransmission that covers the last 15 octets sent and 25 new ones in one segment.
    conv.rewind("client", 15)
    conv.mss = 40
    conv.send("client", client[25:65])
    conv.mss = 10
    conv.send("client", client[65:])
    status, out = decode(tmp_path, pcap(conv.packets))
    assert decoded_frames(out, "C>S") == expected_frames(turns, "client")
    assert status == 0, out


def test_octets_missing_from_the_capture(tmp_path: Path, turns: Turns) -> None:
    conv = conversation(turns, mss=20)
    client_data = [index for index, packet in enumerate(conv.packets) if b"jobs" in packet.data]
    del conv.packets[client_data[0]]
    status, out = decode(tmp_path, pcap(conv.packets))
    assert status == 1
    assert "connection.open-ok" in out
    assert "octets missing from the capture" in out
    assert "C>S ch1 basic.publish" not in out


def test_ipv6_over_raw_ip(tmp_path: Path, turns: Turns) -> None:
    conv = conversation(
        turns,
        client=Host("2001:db8::1", 50000),
        server=Host("2001:db8::2", 5672),
        linktype=LINKTYPE_RAW,
    )
    status, out = decode(tmp_path, pcapng(conv.packets, LINKTYPE_RAW), name="v6.pcapng")
    assert status == 0, out
    assert "[1] [2001:db8::1]:50000 > [2001:db8::2]:5672: AMQP 0-9-1" in out
    assert decoded_frames(out, "C>S") == expected_frames(turns, "client")


# --- protocols, and what is not AMQP ----------------------------------------------------------


@pytest.mark.parametrize("spec", [AMQP_0_9, AMQP_0_8], ids=["0-9", "0-8"])
def test_decodes_0_9_and_0_8(tmp_path: Path, spec: ProtocolSpec) -> None:
    turns = amqp_session(protocol=spec)
    status, out = decode(tmp_path, pcap(conversation(turns).packets))
    assert status == 0, out
    version = spec.version.value
    assert f"[1] 10.0.0.1:40001 > 10.0.0.2:5672: AMQP {version}" in out
    assert f"C>S protocol header AMQP {version}" in out
    # connection.start says the version's own numbers: 8-0 for 0-8, 0-9 for 0-9
    major, minor = spec.start_version
    assert f"connection.start version_major={major} version_minor={minor}" in out
    assert "C>S ch1 queue.declare queue='jobs'" in out
    assert "C>S ch1 content body 5 octets: b'hello'" in out
    assert "ch0 connection.close-ok" in out


def test_decodes_0_10(tmp_path: Path) -> None:
    status, out = decode(tmp_path, pcap(conversation(amqp_session_0_10()).packets))
    assert status == 0, out
    client = decoded_frames(out, "C>S")
    server = decoded_frames(out, "S>C")
    assert client == [
        "protocol header",
        "connection.start-ok",
        "connection.tune-ok",
        "connection.open",
        "session.attach",
        "session.command-point",
        "message.transfer",
        "connection.close",
    ]
    assert server == [
        "protocol header",  # a 0-10 server repeats the header: not a refusal
        "connection.start",
        "connection.tune",
        "connection.open-ok",
        "session.attached",
        "session.command-point",
        "connection.close-ok",
    ]
    assert "response=<12 octets hidden>" in out  # PLAIN's password
    assert "C>S ch1 message.transfer destination='amq.direct' accept_mode=1 acquire_mode=0" in out
    assert "header message.delivery-properties " in out
    assert "routing_key='jobs'" in out
    assert "header message.message-properties content_type='text/plain'" in out
    assert "body 5 octets: b'hello'" in out
    assert "AMQP 0-10, client 9 frames in 323 octets, server 6 frames in 251 octets" in out


def test_a_malformed_0_10_frame(tmp_path: Path) -> None:
    turns = amqp_session_0_10()
    client = turns[0][1]
    broken = client[:8] + b"\xff" * 12 + client[20:]  # the first frame's header
    status, out = decode(tmp_path, pcap(conversation([("client", broken), turns[1]]).packets))
    assert status == 1, out
    assert "C>S error: malformed frame or segment at stream offset 8: malformed frame header" in out
    assert "S>C ch0 connection.start " in out  # the other side goes on


def test_other_versions_are_named_not_decoded(tmp_path: Path) -> None:
    one = conversation([("client", PROTOCOL_HEADER_1_0 + b"\x00" * 20), ("server", b"x" * 30)])
    odd = conversation([("client", b"AMQP\x09\x09\x09\x09")], client=Host("10.0.0.1", 40002))
    status, out = decode(tmp_path, pcap(one.packets + odd.packets))
    assert status == 0, out
    assert (
        "[1] 10.0.0.1:40001 > 10.0.0.2:5672: AMQP 1.0, not decoded yet (amqp-decode "
        "decodes AMQP 0-9-1, AMQP 0-9, AMQP 0-8, AMQP 0-10); this connection is skipped" in out
    )
    assert "AMQP with unknown version octets 9.9.9.9, not decoded yet" in out
    assert "[1] 10.0.0.1:40001 > 10.0.0.2:5672: AMQP 1.0, not decoded (58 octets)" in out


def test_a_server_that_refuses_the_version(tmp_path: Path) -> None:
    conv = conversation([("client", PROTOCOL_HEADER_0_9_1), ("server", PROTOCOL_HEADER_0_10)])
    status, out = decode(tmp_path, pcap(conv.packets))
    assert status == 0, out
    assert "S>C protocol header AMQP 0-10: the server refuses AMQP 0-9-1" in out


def test_traffic_that_is_not_amqp(tmp_path: Path, turns: Turns) -> None:
    http = conversation(
        [("client", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ("server", b"HTTP/1.1 200 OK\r\n")],
        server=Host("10.0.0.2", 80),
    )
    status, out = decode(tmp_path, pcap(http.packets))
    assert status == 1
    assert "not AMQP, it starts with b'GET / HTTP/1.1\\r\\n'; skipped" in out
    assert "error: no AMQP connection in" in out
    # Beside an AMQP connection, other traffic is only noted.
    amqp = conversation(turns, client=Host("10.0.0.1", 40002))
    status, out = decode(tmp_path, pcap(http.packets + amqp.packets))
    assert status == 0, out
    assert "1 TCP connections" not in out
    assert "2 TCP connections, 1 AMQP" in out


def test_a_capture_that_starts_mid_connection(tmp_path: Path, turns: Turns) -> None:
    conv = conversation(turns, mss=30)
    status, out = decode(tmp_path, pcap(conv.packets[6:]))
    assert status == 1
    assert "the capture has no start of this connection" in out


def test_body_options(tmp_path: Path, turns: Turns) -> None:
    big = amqp_session(body=bytes(range(256)) * 40)
    conv = conversation(big)
    data = pcap(conv.packets)
    status, out = decode(tmp_path, data, "--max-body", "20", "--hex")
    assert status == 0, out
    assert "content body 10240 octets: hex dump ... (10220 more octets):" in out
    assert "  00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  |................|" in out
    assert "  00000010  10 11 12 13" in out
    status, out = decode(tmp_path, data, "--max-body", "0")
    assert "content body 10240 octets: (not shown) ... (10240 more octets)" in out
    status, out = decode(tmp_path, data, "--max-body", "all")
    assert "content body 10240 octets: b'\\x00\\x01\\x02" in out
    assert "more octets" not in out
    status, out = decode(tmp_path, data, "--show-credentials")
    assert "response=b'\\x00guest\\x00guest'" in out


def test_heartbeats_can_be_left_out(tmp_path: Path, turns: Turns) -> None:
    from amqp_sansio.framing import HEARTBEAT_FRAME

    with_beats = [*turns[:-2], ("server", HEARTBEAT_FRAME), ("client", HEARTBEAT_FRAME)]
    data = pcap(conversation(with_beats).packets)
    status, out = decode(tmp_path, data)
    assert status == 0, out
    assert "S>C heartbeat" in out
    assert "C>S heartbeat" in out
    status, out = decode(tmp_path, data, "--no-heartbeats")
    assert status == 0, out
    assert not [line for line in frame_lines(out) if line.endswith("heartbeat")]


def test_a_stream_ending_inside_a_frame(tmp_path: Path, turns: Turns) -> None:
    cut = [*turns[:-3], ("client", turns[-3][1][:30])]
    status, out = decode(tmp_path, pcap(conversation(cut).packets))
    assert status == 0, out
    assert "the stream ends inside a frame: 9 octets of an incomplete frame" in out


def test_bad_options(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        decode_main(["--max-body", "lots", str(tmp_path)])
    assert exited.value.code == 2
