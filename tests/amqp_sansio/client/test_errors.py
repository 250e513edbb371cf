"""The shared exception classes, error_for_close, Message and ConfirmTracker."""

from __future__ import annotations

import pickle

import attrs
import pytest

from amqp_sansio import (
    BasicDeliver,
    BasicGetOk,
    BasicProperties,
    BasicReturn,
    ChannelClosed,
    FieldValue,
    Int64,
    QueueDeclare,
    RemoteProtocolError,
    client,
)
from amqp_sansio.client import (
    AMQPError,
    ChannelClosedError,
    ConfirmTracker,
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionTimeoutError,
    ConsumerCancelledError,
    Message,
    MessageReturnedError,
    PublishNackedError,
    PublishOutcomeUnknownError,
    error_for_close,
    error_from,
)

CHANNEL_CODES = {
    311: client.ContentTooLarge,
    312: client.NoRoute,
    313: client.NoConsumers,
    403: client.AccessRefused,
    404: client.NotFound,
    405: client.ResourceLocked,
    406: client.PreconditionFailed,
}
CONNECTION_CODES = {
    320: client.ConnectionForced,
    402: client.InvalidPath,
    501: client.FrameError,
    502: client.AMQPSyntaxError,
    503: client.CommandInvalid,
    504: client.ChannelError,
    505: client.UnexpectedFrame,
    506: client.ResourceError,
    530: client.NotAllowed,
    540: client.AMQPNotImplemented,
    541: client.InternalError,
}


@pytest.mark.parametrize(("code", "cls"), sorted(CHANNEL_CODES.items()))
def test_channel_codes(code: int, cls: type[ChannelClosedError]) -> None:
    error = error_for_close(code, "TEXT - why", 50, 10, connection=False)
    assert type(error) is cls
    assert isinstance(error, ChannelClosedError)
    assert (error.reply_code, error.reply_text) == (code, "TEXT - why")
    assert (error.class_id, error.method_id) == (50, 10)
    assert str(error) == f"{code} TEXT - why"


@pytest.mark.parametrize(("code", "cls"), sorted(CONNECTION_CODES.items()))
def test_connection_codes(code: int, cls: type[ConnectionClosedError]) -> None:
    error = error_for_close(code, "TEXT", connection=True)
    assert type(error) is cls
    assert isinstance(error, ConnectionClosedError)
    assert error.reply_code == code


def test_codes_without_a_subclass_get_the_base_class() -> None:
    assert type(error_for_close(200, "", connection=False)) is ChannelClosedError
    assert type(error_for_close(200, "", connection=True)) is ConnectionClosedError
    # RabbitMQ refuses a login with 403 on connection.close: not a channel error.
    refused = error_for_close(403, "ACCESS_REFUSED - Login was refused", connection=True)
    assert type(refused) is ConnectionClosedError
    assert type(error_for_close(599, "odd", connection=False)) is ChannelClosedError


def test_hierarchy() -> None:
    for cls in (
        ChannelClosedError,
        ConnectionClosedError,
        ConnectionLostError,
        ConnectionTimeoutError,
        PublishNackedError,
        PublishOutcomeUnknownError,
        MessageReturnedError,
        ConsumerCancelledError,
    ):
        assert issubclass(cls, AMQPError)
    # An unknown outcome is neither a nack nor a connection error a caller might retry blindly.
    assert not issubclass(PublishOutcomeUnknownError, PublishNackedError)
    assert not issubclass(PublishOutcomeUnknownError, ConnectionClosedError)
    assert issubclass(ConnectionTimeoutError, TimeoutError)
    assert not issubclass(ChannelClosedError, ConnectionClosedError)


def _message() -> Message:
    return Message(
        body=b"b",
        properties=BasicProperties(message_id="m"),
        exchange="x",
        routing_key="k",
    )


@pytest.mark.parametrize(
    "error",
    [
        error_for_close(404, "NOT_FOUND - no queue 'q'", 50, 10, connection=False),
        error_for_close(320, "CONNECTION_FORCED - bye", connection=True),
        PublishNackedError(7),
        PublishOutcomeUnknownError(9),
        ConsumerCancelledError("ctag"),
        MessageReturnedError(3, 312, "NO_ROUTE", _message()),
        ConnectionLostError("gone"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_pickle(error: AMQPError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_error_messages() -> None:
    assert "7" in str(PublishNackedError(7))
    assert "ctag" in str(ConsumerCancelledError("ctag"))
    returned = MessageReturnedError(None, 312, "NO_ROUTE", _message())
    assert "312 NO_ROUTE" in str(returned)
    assert "'k'" in str(returned)
    assert repr(error_for_close(404, "x", 50, 10, connection=False)) == (
        "NotFound('x', reply_code=404, class_id=50, method_id=10)"
    )


def test_error_from_a_close_event_or_a_protocol_error() -> None:
    closed = ChannelClosed(
        channel=3,
        reply_code=404,
        reply_text="NOT_FOUND - no queue",
        class_id=50,
        method_id=10,
        by_peer=True,
    )
    error = error_from(closed, connection=False)
    assert type(error) is client.NotFound
    assert (error.reply_code, error.class_id, error.method_id) == (404, 50, 10)
    assert str(error) == str(error_for_close(404, "NOT_FOUND - no queue", 50, 10, connection=False))
    broken = RemoteProtocolError("frame-end is not 0xCE", reply_code=501)
    assert type(error_from(broken, connection=True)) is client.FrameError


# --- Message ----------------------------------------------------------------------------------

PROPS = BasicProperties(content_type="text/plain")


def test_message_from_deliver() -> None:
    method = BasicDeliver(
        consumer_tag="c", delivery_tag=9, redelivered=True, exchange="x", routing_key="k"
    )
    msg = Message.from_content(3, method, PROPS, bytearray(b"multi-frame"))
    assert msg.body == b"multi-frame"
    assert type(msg.body) is bytes
    assert (msg.delivery_tag, msg.redelivered, msg.consumer_tag) == (9, True, "c")
    assert (msg.exchange, msg.routing_key, msg.channel) == ("x", "k", 3)
    assert msg.message_count is None
    assert msg.properties is PROPS


def test_message_from_get_ok() -> None:
    method = BasicGetOk(delivery_tag=1, exchange="", routing_key="q", message_count=4)
    msg = Message.from_content(1, method, PROPS, b"x")
    assert (msg.message_count, msg.consumer_tag, msg.delivery_tag) == (4, None, 1)


def test_message_from_return() -> None:
    method = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="q")
    msg = Message.from_content(1, method, PROPS, b"x")
    assert (msg.delivery_tag, msg.consumer_tag, msg.routing_key) == (0, None, "q")


def test_message_subclass_fields_get_their_defaults() -> None:
    @attrs.define(kw_only=True, slots=True, weakref_slot=False)
    class Tagged(Message):
        note: str = "none"

    method = BasicDeliver(consumer_tag="c", delivery_tag=2, exchange="", routing_key="q")
    msg = Tagged.from_content(1, method, PROPS, b"x")
    assert msg == Tagged(
        body=b"x",
        properties=PROPS,
        exchange="",
        routing_key="q",
        delivery_tag=2,
        consumer_tag="c",
        channel=1,
    )
    assert msg.note == "none"

    @attrs.define(kw_only=True, slots=True, weakref_slot=False)
    class Listed(Message):
        notes: list[str] = attrs.field(factory=list)

    with pytest.raises(TypeError, match=r"Listed\.notes: from_content needs a plain default"):
        Listed.from_content(1, method, PROPS, b"x")


def _received_properties(headers: dict[str, FieldValue]) -> BasicProperties:
    """Properties as a consumer gets them: decoded from the octets of a content header."""
    out = bytearray()
    BasicProperties(headers=headers).encode(out)
    return BasicProperties.decode(bytes(out), 0)[0]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"x-stream-offset": Int64(7)}, 7),  # RabbitMQ's own table
        ({"x-stream-offset": Int64(2**63 - 1)}, 2**63 - 1),
        ({"x-stream-offset": Int64(-1)}, -1),
        ({"app": "a", "x-stream-offset": Int64(7)}, 7),  # with the application's headers
        ({"x-stream-offset": 7}, 7),  # a smaller int type (not RabbitMQ's, but an int)
        ({"x-stream-offset": "7"}, None),
        ({"x-stream-offset": True}, None),
        ({"x-stream-offsets": Int64(7)}, None),
        ({}, None),
    ],
)
def test_message_stream_offset(headers: dict[str, FieldValue], expected: int | None) -> None:
    method = BasicDeliver(consumer_tag="c", delivery_tag=1, exchange="", routing_key="s")
    received = Message.from_content(1, method, _received_properties(headers), b"x")
    assert received.stream_offset == expected
    # and when the application built the properties itself (nothing to read octets from)
    built = Message.from_content(1, method, BasicProperties(headers=headers or None), b"x")
    assert built.stream_offset == expected


def test_message_stream_offset_leaves_a_malformed_table_to_headers() -> None:
    # the octets look like RabbitMQ's table but the size is wrong: the headers decode refuses it
    raw = b"\x00\x00\x00\x1a\x0fx-stream-offsetl" + bytes(8) + b"S"
    props = BasicProperties.decode(b"\x20\x00" + raw, 0)[0]
    method = BasicDeliver(consumer_tag="c", delivery_tag=1, exchange="", routing_key="s")
    with pytest.raises(RemoteProtocolError, match="malformed"):
        _ = Message.from_content(1, method, props, b"x").stream_offset


def test_message_from_a_method_without_content() -> None:
    with pytest.raises(TypeError, match="QueueDeclare"):
        Message.from_content(1, QueueDeclare(queue="q"), PROPS, b"")


# --- ConfirmTracker ---------------------------------------------------------------------------


def test_tracker_plain_acks_and_nacks() -> None:
    tracker = ConfirmTracker()
    assert tracker.confirmed((1, 2)) == [(1, None), (2, None)]
    outcomes = tracker.nacked((3,))
    assert [(n, type(e)) for n, e in outcomes] == [(3, PublishNackedError)]


def test_tracker_return_then_ack_is_a_returned_error() -> None:
    tracker = ConfirmTracker()
    method = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="q")
    error = tracker.returned(1, 2, method, PROPS, b"body")
    assert error.publish_number == 2
    assert error.message.body == b"body"
    outcomes = tracker.confirmed((1, 2, 3))
    assert outcomes == [(1, None), (2, error), (3, None)]
    assert tracker.confirmed((4,)) == [(4, None)]  # nothing kept


def test_tracker_return_outside_confirm_mode_is_not_kept() -> None:
    tracker = ConfirmTracker()
    method = BasicReturn(reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="q")
    error = tracker.returned(1, None, method, PROPS, b"")
    assert error.publish_number is None
    assert tracker.confirmed((1,)) == [(1, None)]


def test_tracker_lost() -> None:
    tracker = ConfirmTracker()
    outcomes = tracker.lost((5, 6))
    assert [n for n, _ in outcomes] == [5, 6]
    # Unknown, never a nack nor the loss itself: the broker may have routed them.
    for _, error in outcomes:
        assert isinstance(error, PublishOutcomeUnknownError)
        assert isinstance(error.cause, ConnectionLostError)
    assert "unknown outcome" in str(outcomes[0][1])


def test_unknown_outcome_pickles_its_cause() -> None:
    error = PublishOutcomeUnknownError(
        9, error_for_close(320, "CONNECTION_FORCED", connection=True)
    )
    copy = pickle.loads(pickle.dumps(error))
    assert copy.publish_number == 9
    assert type(copy.cause) is type(error.cause)
    assert copy.__cause__ is copy.cause
    assert str(copy) == str(error)
    assert "CONNECTION_FORCED" in str(error)
