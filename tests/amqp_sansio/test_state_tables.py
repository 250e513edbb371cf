"""The state tables by meaning: every meaning they name exists, the diagrams in the docs are
fresh, and a connection speaks a second, renumbered method table through the same transitions
without any edit to them."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from amqp_sansio import (
    METHODS,
    PROPERTIES,
    AuthenticationRequested,
    ChannelOpen,
    ChannelOpened,
    ConnectionClose,
    ConnectionClosed,
    ConnectionCloseOk,
    ConnectionConfig,
    ConnectionOpened,
    MethodReceived,
    QueueDeclare,
    QueueDeclareOk,
    RemoteProtocolError,
    Role,
    VirtualHostRequested,
)
from amqp_sansio._connection import Connection
from amqp_sansio._frames import PROTOCOL_HEADER_0_8, ProtocolVersion
from amqp_sansio._protocol import AMQP_0_9_1, SPECS, ProtocolSpec
from amqp_sansio._state import (
    CONNECTION_TRANSITIONS,
    OVERTAKABLE_REQUESTS,
    RECORDED,
    TAGGED_REPLIES,
    Input,
    channel_transitions,
)
from amqp_sansio.testing import feed
from tests.support import ROOT


def test_every_meaning_in_the_tables_is_a_method_of_some_version() -> None:
    names = {cls.NAME for spec in SPECS.values() for cls in spec.methods.values()}
    for rows in CONNECTION_TRANSITIONS.values():
        for row in rows.values():
            assert {key for key in row if not isinstance(key, Input)} <= names
    assert names >= RECORDED | OVERTAKABLE_REQUESTS | TAGGED_REPLIES
    for channel_rows in channel_transitions(METHODS.values()).values():
        for channel_row in channel_rows.values():
            assert set(channel_row) <= names


def test_state_diagrams_in_the_docs_are_fresh() -> None:
    result = subprocess.run(
        [sys.executable, "tools/gen_state_docs.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- a second method table --------------------------------------------------------------------

# 0-8 numbers connection.close and close-ok (10, 60) and (10, 61), where 0-9-1 has RabbitMQ's
# connection.blocked and unblocked; queue.declare moves too, to show a channel method.
_CLOSE_IDS = (10, 60)
_CLOSE_OK_IDS = (10, 61)
_DECLARE_IDS = (50, 90)


def _renumbered() -> ProtocolSpec:
    methods = {
        index: cls
        for index, cls in METHODS.items()
        if cls.NAME
        not in (
            "connection.blocked",
            "connection.unblocked",
            "connection.close",
            "connection.close-ok",
            "queue.declare",
        )
    }
    for cls, (class_id, method_id) in (
        (ConnectionClose, _CLOSE_IDS),
        (ConnectionCloseOk, _CLOSE_OK_IDS),
        (QueueDeclare, _DECLARE_IDS),
    ):
        methods[class_id << 16 | method_id] = cls
    return ProtocolSpec(
        ProtocolVersion.AMQP_0_8,
        header=PROTOCOL_HEADER_0_8,
        start_version=(0, 9),
        methods=methods,
        properties=PROPERTIES,
    )


def _method_ids(data: bytes) -> list[tuple[int, int]]:
    """(class id, method id) of every method frame in *data*."""
    ids = []
    offset = 0
    while offset < len(data):
        frame_type, _, size = struct.unpack_from(">BHI", data, offset)
        if frame_type == 1:
            ids.append(struct.unpack_from(">HH", data, offset + 7))
        offset += 8 + size
    return ids


def _pair(spec: ProtocolSpec) -> tuple[Connection, Connection]:
    client = Connection(Role.CLIENT, ConnectionConfig(protocol=spec))
    server = Connection(Role.SERVER, ConnectionConfig(protocols=[spec]))
    while True:
        moved = False
        for sender, receiver in ((client, server), (server, client)):
            data = sender.data_to_send()
            if data:
                moved = True
                for event in feed(receiver, data):
                    if isinstance(event, AuthenticationRequested):
                        receiver.accept_authentication()
                    elif isinstance(event, VirtualHostRequested):
                        receiver.accept_virtual_host()
                        assert isinstance(receiver.next_event(), ConnectionOpened)
        if not moved:
            return client, server


def test_a_renumbered_method_table_plugs_into_the_same_transitions() -> None:
    spec = _renumbered()
    assert spec.ids(ConnectionClose) == _CLOSE_IDS
    assert spec.ids(ChannelOpen) == (20, 10)  # everything else keeps its ids
    client, server = _pair(spec)
    assert client.state.value == server.state.value == "OPEN"

    ch = client.open_channel()
    declare = QueueDeclare(queue="q")
    client.send_method(ch, declare)
    data = client.data_to_send()
    assert _method_ids(data) == [(20, 10), _DECLARE_IDS]
    assert feed(server, data) == [
        ChannelOpened(channel=ch),
        MethodReceived(channel=ch, method=declare, request=None),
    ]
    server.send_method(ch, QueueDeclareOk(queue="q", message_count=0, consumer_count=0))
    events = feed(client, server.data_to_send())
    assert isinstance(events[1], MethodReceived)
    assert events[1].request is declare

    client.close(200, "bye")
    data = client.data_to_send()
    assert _method_ids(data) == [_CLOSE_IDS]
    [closed] = feed(server, data)
    assert isinstance(closed, ConnectionClosed)
    assert closed.by_peer
    data = server.data_to_send()
    assert _method_ids(data) == [_CLOSE_OK_IDS]
    [closed] = feed(client, data)
    assert isinstance(closed, ConnectionClosed)
    assert not closed.by_peer


def test_errors_name_the_version_s_ids() -> None:
    _, server = _pair(_renumbered())
    # A close-ok nobody asked for: refused with the ids it has in this version.
    payload = struct.pack(">HH", *_CLOSE_OK_IDS)
    frame = struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"
    with pytest.raises(RemoteProtocolError) as info:
        feed(server, frame)
    assert info.value.reply_code == 503
    assert (info.value.class_id, info.value.method_id) == _CLOSE_OK_IDS
    # ... and the close answering it goes out at (10, 60).
    assert _method_ids(server.data_to_send()) == [_CLOSE_IDS]


def test_0_9_1_ids_are_unchanged_and_decode_to_the_same_classes() -> None:
    assert not AMQP_0_9_1.wire_ids
    for index, cls in AMQP_0_9_1.methods.items():
        assert index == cls.INDEX
        assert AMQP_0_9_1.by_meaning[cls.NAME] is cls
