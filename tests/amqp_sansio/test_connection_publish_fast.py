"""The client's basic.publish on an open channel (publish's fast path): the same octets as the
generic encoder for every body split, the same confirm numbers and return bookkeeping, and every
refusal still made with nothing written."""

from __future__ import annotations

import pytest

from amqp_sansio import (
    BasicAck,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ConfirmSelect,
    ConfirmSelectOk,
    Connection,
    ConnectionConfig,
    LocalProtocolError,
    MessageReceived,
    PublishConfirmed,
    PublishReturned,
    Role,
)
from amqp_sansio.framing import encode_content
from amqp_sansio.testing import ConnectionPair

FRAME_MAX = 4096  # small, so bodies of three frames stay below the 64 KiB passthrough
BODY_SIZES = [0, 1, FRAME_MAX - 8, FRAME_MAX - 7, 3 * FRAME_MAX]
PROPERTIES = [
    BasicProperties(),
    BasicProperties(
        content_type="application/json",
        delivery_mode=2,
        headers={"x-trace": "abc", "n": 7},
        message_id="m-1",
        timestamp=1_700_000_000,
    ),
]


def _opened(*, confirm: bool) -> tuple[ConnectionPair, int]:
    pair = ConnectionPair(ConnectionConfig(frame_max=FRAME_MAX))
    pair.handshake()
    assert pair.client.frame_max == FRAME_MAX
    ch = pair.open_channel()
    if confirm:
        pair.client.send_method(ch, ConfirmSelect())
        pair.transfer(pair.client)
        pair.server.send_method(ch, ConfirmSelectOk())
        pair.transfer(pair.server)
    return pair, ch


def _generic(ch: int, method: BasicPublish, props: BasicProperties, body: bytes) -> bytes:
    out = bytearray()
    encode_content(out, ch, method, props, body, FRAME_MAX)
    return bytes(out)


@pytest.mark.parametrize("props", PROPERTIES, ids=["bare", "full"])
@pytest.mark.parametrize("mandatory", [False, True])
@pytest.mark.parametrize("confirm", [False, True])
@pytest.mark.parametrize("size", BODY_SIZES)
def test_publish_octets_match_the_generic_encoder(
    size: int, confirm: bool, mandatory: bool, props: BasicProperties
) -> None:
    pair, ch = _opened(confirm=confirm)
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    method = BasicPublish(exchange="amq.direct", routing_key="rk-é", mandatory=mandatory)
    expected = _generic(ch, method, props, body)
    numbers = [pair.client.publish(ch, method, props, body) for _ in range(2)]
    # bytearray takes the fast path, memoryview the generic one: all three alike.
    numbers.append(pair.client.publish(ch, method, props, bytearray(body)))
    numbers.append(pair.client.publish(ch, method, props, memoryview(body)))
    assert pair.client.data_to_send() == expected * 4
    assert numbers == ([1, 2, 3, 4] if confirm else [None] * 4)


@pytest.mark.parametrize("size", BODY_SIZES)
def test_publish_arrives_whole_at_the_server(size: int) -> None:
    pair, ch = _opened(confirm=False)
    body = b"\xab" * size
    method = BasicPublish(exchange="", routing_key="q", mandatory=True, immediate=True)
    props = PROPERTIES[1]
    assert pair.client.publish(ch, method, props, body) is None
    events = pair.transfer(pair.client)
    assert events == [MessageReceived(channel=ch, method=method, properties=props, body=body)]


def test_mandatory_publishes_are_tied_to_their_returns() -> None:
    pair, ch = _opened(confirm=True)
    client, server = pair.client, pair.server
    props = BasicProperties()
    plain = BasicPublish(exchange="", routing_key="a")
    returned = BasicPublish(exchange="", routing_key="nowhere", mandatory=True)
    assert client.publish(ch, plain, props, b"1") == 1
    assert client.publish(ch, returned, props, b"2") == 2
    assert client.publish(ch, returned, props, b"3") == 3
    pair.transfer(client)
    back = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="nowhere")
    server.send_content(ch, back, props, b"2")
    server.send_method(ch, BasicAck(delivery_tag=2, multiple=True))
    server.send_method(ch, BasicAck(delivery_tag=3))
    assert pair.transfer(server) == [
        PublishReturned(channel=ch, publish_number=2, method=back, properties=props, body=b"2"),
        PublishConfirmed(channel=ch, publish_numbers=(1, 2)),
        PublishConfirmed(channel=ch, publish_numbers=(3,)),
    ]


def test_publishes_on_several_channels_number_separately() -> None:
    pair, first = _opened(confirm=True)
    second = pair.open_channel()
    props = BasicProperties()
    method = BasicPublish(routing_key="q")
    assert pair.client.publish(first, method, props, b"x") == 1
    assert pair.client.publish(second, method, props, b"x") is None
    assert pair.client.publish(first, method, props, b"x") == 2
    assert pair.client.data_to_send() == b"".join(
        _generic(ch, method, props, b"x") for ch in (first, second, first)
    )


def _refused(
    conn: Connection, channel: object, method: object, props: object, body: object
) -> LocalProtocolError:
    conn.data_to_send()
    with pytest.raises(LocalProtocolError) as info:
        conn.publish(channel, method, props, body)  # type: ignore[arg-type]
    assert conn.data_to_send() == b""
    return info.value


GOOD = BasicPublish(exchange="", routing_key="q")


@pytest.mark.parametrize(
    ("method", "props", "code"),
    [
        (BasicPublish(exchange="x" * 256), BasicProperties(), 502),
        (BasicPublish(routing_key="é" * 128), BasicProperties(), 502),
        (BasicPublish(ticket=70000), BasicProperties(), 502),
        (BasicPublish(exchange=7), BasicProperties(), 502),  # type: ignore[arg-type]
        (GOOD, BasicProperties(content_type="t" * 256), 502),
        (GOOD, BasicProperties(priority=256), 502),
        (GOOD, BasicProperties(headers={"big": "v" * FRAME_MAX}), 501),
    ],
    ids=["long-exchange", "long-key", "ticket", "exchange-type", "long-type", "priority", "big"],
)
def test_unencodable_publish_writes_nothing(
    method: BasicPublish, props: BasicProperties, code: int
) -> None:
    pair, ch = _opened(confirm=True)
    error = _refused(pair.client, ch, method, props, b"body")
    assert error.reply_code == code
    # The refused publish took no number.
    assert pair.client.publish(ch, GOOD, BasicProperties(), b"") == 1


def test_publish_refused_on_channels_not_open() -> None:
    pair, ch = _opened(confirm=False)
    props = BasicProperties()
    assert _refused(pair.client, ch + 1, GOOD, props, b"x").reply_code == 504
    assert _refused(pair.client, True, GOOD, props, b"x").reply_code == 504
    assert _refused(pair.client, 0, GOOD, props, b"x").reply_code == 504
    pair.client.close_channel(ch)
    pair.client.data_to_send()
    assert "CLOSING" in _refused(pair.client, ch, GOOD, props, b"x").reply_text


def test_publish_refused_when_the_connection_is_not_open() -> None:
    pair, ch = _opened(confirm=False)
    pair.client.close(200, "bye")
    error = _refused(pair.client, ch, GOOD, BasicProperties(), b"x")
    assert error.reply_code == 503
    fresh = Connection(Role.CLIENT)  # before the handshake
    fresh.data_to_send()
    assert _refused(fresh, 1, GOOD, BasicProperties(), b"x").reply_code == 503


def test_server_role_cannot_publish() -> None:
    pair, ch = _opened(confirm=False)
    error = _refused(pair.server, ch, GOOD, BasicProperties(), b"x")
    assert "basic.publish" in error.reply_text
