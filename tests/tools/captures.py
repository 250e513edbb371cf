"""Capture files made here, byte by byte: pcap and pcapng writers, Ethernet/IPv4/IPv6/TCP
packets, and a TCP conversation carrying what a client and a server core said to each other.

Nothing here uses scapy, so the decoder is checked against an independent writer.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, final

import attrs

from amqp_sansio import (
    AMQP_0_9_1,
    AuthenticationRequested,
    BasicProperties,
    BasicPublish,
    Connection,
    ConnectionConfig,
    ConnectionState,
    ProtocolSpec,
    QueueDeclare,
    QueueDeclareOk,
    VirtualHostRequested,
)
from amqp_sansio.testing import ConnectionPair, get_all_events
from amqp_sansio.v0_10 import DeliveryProperties, MessageProperties
from amqp_sansio.v0_10.testing import ConnectionPair as ConnectionPair010

if TYPE_CHECKING:
    from collections.abc import Sequence

    from amqp_sansio import Event

Sender: TypeAlias = Literal["client", "server"]

LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
_SYN: Final = 0x02
_ACK: Final = 0x10
_PSH: Final = 0x08
_FIN: Final = 0x01


@final
@attrs.frozen
class Packet:
    """One captured packet: when, and its link-layer octets."""

    time: float
    data: bytes


# --- capture files ----------------------------------------------------------------------------


def pcap(packets: Sequence[Packet], linktype: int = LINKTYPE_ETHERNET) -> bytes:
    """A classic pcap file (little-endian, microseconds)."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
    for packet in packets:
        seconds = int(packet.time)
        micros = round((packet.time - seconds) * 1_000_000)
        size = len(packet.data)
        out += struct.pack("<IIII", seconds, micros, size, size) + packet.data
    return bytes(out)


def _block(block_type: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    total = len(body) + 12
    return struct.pack("<II", block_type, total) + body + struct.pack("<I", total)


def pcapng(packets: Sequence[Packet], linktype: int = LINKTYPE_ETHERNET) -> bytes:
    """A pcapng file: a section header, one interface (microseconds), enhanced packet blocks."""
    out = bytearray(_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
    out += _block(1, struct.pack("<HHI", linktype, 0, 65535))
    for packet in packets:
        stamp = round(packet.time * 1_000_000)
        size = len(packet.data)
        header = struct.pack("<IIIII", 0, stamp >> 32, stamp & 0xFFFFFFFF, size, size)
        out += _block(6, header + packet.data)
    return bytes(out)


# --- packets ----------------------------------------------------------------------------------


@final
@attrs.frozen
class Host:
    address: str
    port: int


def tcp_packet(
    source: Host,
    destination: Host,
    seq: int,
    ack: int,
    flags: int,
    payload: bytes = b"",
    *,
    linktype: int = LINKTYPE_ETHERNET,
) -> bytes:
    """An Ethernet (or raw IP) frame with an IPv4 or IPv6 header and a TCP segment; checksums
    are left 0, as captures with checksum offloading show them."""
    tcp = struct.pack(
        "!HHIIBBHHH",
        source.port,
        destination.port,
        seq % (1 << 32),
        ack % (1 << 32),
        5 << 4,
        flags,
        65535,
        0,
        0,
    )
    src = ipaddress.ip_address(source.address)
    dst = ipaddress.ip_address(destination.address)
    if src.version == 4:
        ip = struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0x4000, 64, 6, 0,
            src.packed, dst.packed,
        )  # fmt: skip
        ethertype = 0x0800
    else:
        ip = struct.pack(
            "!IHBB16s16s", 6 << 28, len(tcp) + len(payload), 6, 64, src.packed, dst.packed
        )
        ethertype = 0x86DD
    packet = ip + tcp + payload
    if linktype == LINKTYPE_RAW:
        return packet
    return b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + struct.pack("!H", ethertype) + packet


@final
class Conversation:
    """A TCP connection's packets, written as the two ends talk: a three-way handshake, data
    segments of at most *mss* octets with the right sequence numbers, and a FIN from each end."""

    def __init__(
        self,
        client: Host = Host("10.0.0.1", 40001),
        server: Host = Host("10.0.0.2", 5672),
        *,
        client_isn: int = 1000,
        server_isn: int = 5_000_000,
        mss: int = 1460,
        start: float = 1_700_000_000.0,
        linktype: int = LINKTYPE_ETHERNET,
    ) -> None:
        self.client = client
        self.server = server
        self.mss = mss
        self.linktype = linktype
        self.packets: list[Packet] = []
        self._time = start
        self._next = {"client": client_isn + 1, "server": server_isn + 1}
        self._send_raw("client", client_isn, 0, _SYN)
        self._send_raw("server", server_isn, client_isn + 1, _SYN | _ACK)
        self._send_raw("client", client_isn + 1, server_isn + 1, _ACK)

    def _ends(self, sender: Sender) -> tuple[Host, Host]:
        return (self.client, self.server) if sender == "client" else (self.server, self.client)

    def _send_raw(
        self, sender: Sender, seq: int, ack: int, flags: int, payload: bytes = b""
    ) -> None:
        source, destination = self._ends(sender)
        data = tcp_packet(source, destination, seq, ack, flags, payload, linktype=self.linktype)
        self._time += 0.0001
        self.packets.append(Packet(self._time, data))

    def send(self, sender: Sender, data: bytes) -> None:
        """*data* from *sender*, cut into segments of at most ``mss`` octets."""
        other: Sender = "server" if sender == "client" else "client"
        for at in range(0, len(data), self.mss):
            piece = data[at : at + self.mss]
            self._send_raw(sender, self._next[sender], self._next[other], _PSH | _ACK, piece)
            self._next[sender] += len(piece)

    def rewind(self, sender: Sender, octets: int) -> None:
        """Send the last *octets* of *sender* again, as part of its next :meth:`send`."""
        self._next[sender] -= octets

    def close(self) -> None:
        for sender in ("client", "server"):
            other: Sender = "server" if sender == "client" else "client"
            self._send_raw(sender, self._next[sender], self._next[other], _FIN | _ACK)
            self._next[sender] += 1


# --- what the cores say -----------------------------------------------------------------------


def _move(
    sender: Connection, receiver: Connection, who: Sender, turns: list[tuple[Sender, bytes]]
) -> list[Event]:
    data = sender.data_to_send()
    if not data:
        return []
    turns.append((who, data))
    receiver.receive_data(data)
    return get_all_events(receiver)


def amqp_session(
    body: bytes = b"hello", protocol: ProtocolSpec = AMQP_0_9_1
) -> list[tuple[Sender, bytes]]:
    """What a client and a server core send each other, turn by turn: the handshake, a
    channel, a queue.declare and its -ok, a publish of *body* with properties, and the close;
    in *protocol* (0-9-1, 0-9 or 0-8)."""
    config = ConnectionConfig(protocol=protocol)
    pair = ConnectionPair(config, config)
    client, server = pair.client, pair.server
    turns: list[tuple[Sender, bytes]] = []
    while client.state is not ConnectionState.OPEN or server.state is not ConnectionState.OPEN:
        for event in _move(client, server, "client", turns):
            if isinstance(event, AuthenticationRequested):
                server.accept_authentication()
            elif isinstance(event, VirtualHostRequested):
                server.accept_virtual_host()
        _move(server, client, "server", turns)
    channel = client.open_channel()
    _move(client, server, "client", turns)
    _move(server, client, "server", turns)
    client.send_method(channel, QueueDeclare(queue="jobs", durable=True))
    _move(client, server, "client", turns)
    server.send_method(channel, QueueDeclareOk(queue="jobs", message_count=0, consumer_count=0))
    _move(server, client, "server", turns)
    properties = BasicProperties(content_type="text/plain", delivery_mode=2, headers={"try": 1})
    client.publish(channel, BasicPublish(routing_key="jobs"), properties, body)
    _move(client, server, "client", turns)
    client.close()
    _move(client, server, "client", turns)
    _move(server, client, "server", turns)
    return turns


def amqp_session_0_10(body: bytes = b"hello") -> list[tuple[Sender, bytes]]:
    """An AMQP 0-10 client and server core: the handshake, a session, a message.transfer of
    *body* with delivery and message properties, and the close (each side's octets whole)."""
    pair = ConnectionPair010()
    pair.handshake()
    client, _server = pair.attach("s")
    client.transfer(
        "amq.direct",
        body,
        headers=[
            DeliveryProperties(routing_key="jobs"),
            MessageProperties(content_type="text/plain"),
        ],
    )
    pair.exchange()
    pair.client.close()
    pair.exchange()
    return [("client", bytes(pair.client_sent)), ("server", bytes(pair.server_sent))]


def conversation(
    turns: Sequence[tuple[Sender, bytes]],
    *,
    mss: int = 1460,
    client_isn: int = 1000,
    server_isn: int = 5_000_000,
    client: Host = Host("10.0.0.1", 40001),
    server: Host = Host("10.0.0.2", 5672),
    linktype: int = LINKTYPE_ETHERNET,
) -> Conversation:
    """A TCP conversation carrying *turns*, closed at the end."""
    conv = Conversation(
        client, server, client_isn=client_isn, server_isn=server_isn, mss=mss, linktype=linktype
    )
    for sender, data in turns:
        conv.send(sender, data)
    conv.close()
    return conv
