"""The generated 0-9-1 method table: freshness, round trips, and agreement with pamqp and pika."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_sansio import LocalProtocolError, Method, RemoteProtocolError, Role
from amqp_sansio._frames import encode_content
from amqp_sansio._generated import spec_0_9_1 as spec
from tests.support import ROOT
from tests.support.strategies import methods, properties

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from amqp_sansio._method import Buffer
    from amqp_sansio._table import FieldValue

ALL_METHODS = sorted(spec.METHODS.values(), key=lambda c: c.INDEX)


def method_frame(channel: int, method: Method) -> bytes:
    payload = bytearray()
    method.encode(payload)
    return struct.pack(">BHI", 1, channel, len(payload)) + bytes(payload) + b"\xce"


# --- the generator -----------------------------------------------------------------------------


def test_checked_in_module_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, "tools/gen_spec.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_fails_on_a_stale_module(tmp_path: Path) -> None:
    for part in ("tools", "spec"):
        shutil.copytree(ROOT / part, tmp_path / part)
    generated = tmp_path / "src" / "amqp_sansio" / "_generated"
    generated.mkdir(parents=True)
    source = (ROOT / "src/amqp_sansio/_generated/spec_0_9_1.py").read_text()
    (generated / "spec_0_9_1.py").write_text(
        source.replace("FRAME_END: Final = 206", "FRAME_END: Final = 207")
    )
    result = subprocess.run(
        [sys.executable, "tools/gen_spec.py", "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "stale" in result.stdout
    assert "spec_0_9_1.py" in result.stdout


# --- the table itself --------------------------------------------------------------------------


def test_method_table_is_complete_and_keyed_by_index() -> None:
    assert len(spec.METHODS) == 66  # 0-9-1 + RabbitMQ's extensions + the access class
    for index, cls in spec.METHODS.items():
        assert index == cls.CLASS_ID << 16 | cls.METHOD_ID == cls.INDEX
        assert cls.__name__ in spec.__all__


def test_directions_come_from_the_chassis() -> None:
    assert {Role.SERVER} == spec.ConnectionStart.SENT_BY
    assert {Role.CLIENT} == spec.ConnectionStartOk.SENT_BY
    assert {Role.CLIENT} == spec.QueueDeclare.SENT_BY
    assert {Role.SERVER} == spec.BasicDeliver.SENT_BY
    # RabbitMQ's extensions: the broker acks, nacks and cancels too
    assert {Role.CLIENT, Role.SERVER} == spec.BasicAck.SENT_BY
    assert {Role.CLIENT, Role.SERVER} == spec.BasicNack.SENT_BY
    assert {Role.CLIENT, Role.SERVER} == spec.BasicCancel.SENT_BY
    assert {Role.CLIENT, Role.SERVER} == spec.ConnectionClose.SENT_BY
    assert {Role.CLIENT} == spec.AccessRequest.SENT_BY
    # errata applied by the generator: the XML has these backwards or missing
    assert {Role.CLIENT} == spec.ConnectionUpdateSecret.SENT_BY
    assert {Role.SERVER} == spec.ConnectionUpdateSecretOk.SENT_BY
    assert (spec.BasicRecoverOk,) == spec.BasicRecover.RESPONSES
    assert spec.BasicRecover().expects_reply()


def test_responses_and_flags() -> None:
    assert (spec.QueueDeclareOk,) == spec.QueueDeclare.RESPONSES
    assert (spec.BasicGetOk, spec.BasicGetEmpty) == spec.BasicGet.RESPONSES
    assert (spec.ConnectionStartOk,) == spec.ConnectionStart.RESPONSES
    assert spec.BasicPublish.RESPONSES == ()
    assert spec.BasicPublish.HAS_CONTENT
    assert spec.BasicDeliver.HAS_CONTENT
    assert not spec.BasicAck.HAS_CONTENT
    assert spec.QueueDeclare.SYNCHRONOUS
    assert not spec.BasicPublish.SYNCHRONOUS
    assert spec.QueueDeclare(queue="q").expects_reply()
    assert not spec.QueueDeclare(queue="q", nowait=True).expects_reply()
    assert spec.BasicQos().expects_reply()
    assert not spec.BasicAck().expects_reply()


def test_defaults_come_from_rabbitmq_json() -> None:
    declare = spec.QueueDeclare()
    assert (declare.ticket, declare.queue, declare.durable, declare.arguments) == (0, "", False, {})
    assert spec.BasicNack().requeue is True
    assert spec.ConnectionOpen().virtual_host == "/"
    assert spec.ConnectionStart(server_properties={}).mechanisms == b"PLAIN"
    with pytest.raises(TypeError):
        spec.ChannelClose()  # type: ignore[call-arg]  # reply_code has no default


def test_reply_codes_know_hard_from_soft() -> None:
    assert spec.ReplyCode.NOT_FOUND.is_soft
    assert not spec.ReplyCode.NOT_FOUND.is_hard
    assert spec.ReplyCode.FRAME_ERROR.is_hard
    assert not spec.ReplyCode.FRAME_ERROR.is_soft
    assert spec.ReplyCode.CONNECTION_FORCED.is_hard
    assert spec.ReplyCode.PRECONDITION_FAILED.value == 406
    assert not spec.ReplyCode.REPLY_SUCCESS.is_hard
    assert not spec.ReplyCode.REPLY_SUCCESS.is_soft


def test_constants() -> None:
    assert (spec.FRAME_METHOD, spec.FRAME_HEADER, spec.FRAME_BODY, spec.FRAME_HEARTBEAT) == (
        1,
        2,
        3,
        8,
    )
    assert (spec.FRAME_END, spec.FRAME_MIN_SIZE, spec.PROTOCOL_VERSION) == (206, 4096, (0, 9, 1))


def test_credentials_are_not_in_repr() -> None:
    start_ok = spec.ConnectionStartOk(client_properties={}, response=b"\x00guest\x00s3cret")
    assert "s3cret" not in repr(start_ok)
    assert "<redacted>" in repr(start_ok)
    assert "s3cret" not in repr(spec.ConnectionSecureOk(response=b"s3cret"))
    assert "s3cret" not in repr(spec.ConnectionUpdateSecret(new_secret=b"s3cret", reason="r"))


# --- exact bytes -------------------------------------------------------------------------------


def test_queue_declare_bytes() -> None:
    out = bytearray()
    spec.QueueDeclare(queue="q1", durable=True, auto_delete=True, arguments={"x-a": 1}).encode(out)
    assert bytes(out) == (
        b"\x00\x32\x00\x0a"  # queue.declare
        b"\x00\x00"  # ticket
        b"\x02q1"
        b"\x0a"  # durable | auto-delete, low bit first
        b"\x00\x00\x00\x06\x03x-ab\x01"  # {"x-a": int8 1}
    )


def test_basic_deliver_bytes() -> None:
    out = bytearray()
    spec.BasicDeliver(
        consumer_tag="ctag", delivery_tag=2**64 - 1, redelivered=True, exchange="", routing_key="rk"
    ).encode(out)
    assert bytes(out) == b"\x00\x3c\x00\x3c\x04ctag" + b"\xff" * 8 + b"\x01\x00\x02rk"


def test_properties_flag_word() -> None:
    out = bytearray()
    spec.BasicProperties(content_type="text/plain", delivery_mode=2, cluster_id="").encode(out)
    assert bytes(out) == b"\x90\x04" + b"\x0atext/plain" + b"\x02" + b"\x00"
    decoded, end = spec.BasicProperties.decode(b"\x00\x00", 0)
    assert decoded == spec.BasicProperties()
    assert end == 2


def test_properties_reject_unknown_flags() -> None:
    with pytest.raises(ValueError, match="unknown property flags 0x0002"):
        spec.BasicProperties.decode(b"\x00\x02", 0)
    with pytest.raises(ValueError, match="unknown property flags 0x8000"):
        spec.BasicProperties.decode(b"\x00\x01\x80\x00", 0)
    # an empty continuation word is legal
    assert spec.BasicProperties.decode(b"\x00\x01\x00\x00", 0) == (spec.BasicProperties(), 4)


# --- round trips over the full value ranges ----------------------------------------------------


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda c: c.NAME)
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_method_round_trip(cls: type[Method], data: st.DataObject) -> None:
    method = data.draw(methods(cls))
    out = bytearray(b"junk")
    method.encode(out)
    assert out[4:8] == struct.pack(">HH", cls.CLASS_ID, cls.METHOD_ID)
    out += b"trailing"
    decoded, end = cls.decode(bytes(out), 8)
    assert decoded == method
    assert end == len(out) - len(b"trailing")
    # every decoder works on bytearray and memoryview too
    assert cls.decode(out, 8) == (decoded, end)
    assert cls.decode(memoryview(out), 8) == (decoded, end)


@settings(max_examples=200)
@given(props=properties(spec.BasicProperties))
def test_properties_round_trip(props: spec.BasicProperties) -> None:
    out = bytearray(b"xx")
    props.encode(out)
    assert spec.BasicProperties.decode(memoryview(out), 2) == (props, len(out))


# --- independent codecs: pamqp and pika --------------------------------------------------------

# Values both peers handle the same way: pamqp validates names, pika can't encode floats,
# and neither keeps Python types for every field-table code.
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789-_.:", max_size=40)
portable_values: st.SearchStrategy[FieldValue] = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.text(alphabet="abcxyz ", max_size=10),
)
portable_tables = st.dictionaries(names, portable_values, max_size=4)
CROSS_CHECKED = [c for c in ALL_METHODS if c.CLASS_ID != 30]  # pamqp has no access class
# pamqp warns when it builds basic.recover-async, which 0-9-1 deprecates
PAMQP_DEPRECATION = pytest.mark.filterwarnings(
    "ignore:This command is deprecated:DeprecationWarning"
)


# pamqp refuses to build a method whose reserved fields differ from these
PAMQP_RESERVED: dict[str, object] = {
    "ticket": 0,
    "capabilities": "",
    "insist": False,
    "known_hosts": "",
    "cluster_id": "",
    "out_of_band": "0",
    "channel_id": b"0",
}


def portable(cls: type[Method], *, reserved: bool = False) -> st.SearchStrategy[Method]:
    def value(name: str, kind: str) -> st.SearchStrategy[object]:
        if reserved and name in PAMQP_RESERVED:
            return st.just(PAMQP_RESERVED[name])
        if kind == "shortstr":
            return names
        if kind == "table":
            return portable_tables
        if kind == "longstr":
            return st.text(alphabet="abc\x00", max_size=20).map(str.encode)
        return {
            "bit": st.booleans(),
            "octet": st.integers(0, 255),
            "short": st.integers(0, 2**16 - 1),
            "long": st.integers(0, 2**32 - 1),
            # pamqp reads basic.reject's delivery tag as signed; our own round trips cover 2**64-1
            "longlong": st.integers(0, 2**63 - 1),
        }[kind]

    return st.builds(cls, **{name: value(name, kind) for name, kind in cls.FIELDS})


def peer_value(value: object) -> object:
    """Normalise a peer's decoded value to our Python types."""
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return {
            (k.decode() if isinstance(k, bytes) else k): peer_value(v) for k, v in value.items()
        }
    return value


def ours_as_peer(kind: str, value: object) -> object:
    # pamqp and pika hand out longstr fields as str
    return value.decode() if kind == "longstr" and isinstance(value, bytes) else value


@PAMQP_DEPRECATION
@pytest.mark.parametrize("cls", CROSS_CHECKED, ids=lambda c: c.NAME)
@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pamqp_decodes_what_we_encode(cls: type[Method], data: st.DataObject) -> None:
    from pamqp import frame as pamqp_frame

    method = data.draw(portable(cls))
    raw = method_frame(3, method)
    consumed, channel, theirs = pamqp_frame.unmarshal(raw)
    assert (consumed, channel) == (len(raw), 3)
    for name, kind in cls.FIELDS:
        their_name = "exchange_type" if (cls, name) == (spec.ExchangeDeclare, "type") else name
        expected = ours_as_peer(kind, getattr(method, name))
        assert ours_as_peer(kind, peer_value(getattr(theirs, their_name))) == expected, name


@PAMQP_DEPRECATION
@pytest.mark.parametrize("cls", CROSS_CHECKED, ids=lambda c: c.NAME)
@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_we_decode_what_pamqp_encodes(cls: type[Method], data: st.DataObject) -> None:
    from pamqp import commands as pamqp_commands
    from pamqp import frame as pamqp_frame

    method = data.draw(portable(cls, reserved=True))
    kwargs = {
        ("exchange_type" if (cls, name) == (spec.ExchangeDeclare, "type") else name): (
            ours_as_peer(kind, getattr(method, name))
        )
        for name, kind in cls.FIELDS
    }
    raw = pamqp_frame.marshal(pamqp_commands.INDEX_MAPPING[cls.INDEX](**kwargs), 5)
    # not byte-equal to ours in general: pamqp sorts table keys
    assert raw[:3] == b"\x01\x00\x05"
    decoded, end = cls.decode(raw, 11)
    assert (decoded, end) == (method, len(raw) - 1)


# pika 1.4.4's Connection.UpdateSecret.decode stores the secret in `mechanisms` (a pika bug)
PIKA_CHECKED = [c for c in ALL_METHODS if c is not spec.ConnectionUpdateSecret]


@pytest.mark.parametrize("cls", PIKA_CHECKED, ids=lambda c: c.NAME)
@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pika_agrees_both_ways(cls: type[Method], data: st.DataObject) -> None:
    import pika.spec

    method = data.draw(portable(cls))
    ours = bytearray()
    method.encode(ours)
    pika_cls = pika.spec.methods[cls.INDEX]
    theirs = pika_cls.__new__(pika_cls)  # some of pika's __init__s require arguments
    theirs.decode(bytes(ours[4:]), 0)
    for name, kind in cls.FIELDS:
        their_name = "global_qos" if name == "global_" else name
        expected = ours_as_peer(kind, getattr(method, name))
        assert ours_as_peer(kind, peer_value(getattr(theirs, their_name))) == expected, name
    # pika picks other int types for table values, so compare decoded, not bytes
    assert cls.decode(b"".join(theirs.encode()), 0)[0] == method


@settings(max_examples=100)
@given(
    props=st.builds(
        spec.BasicProperties,
        content_type=st.none() | names,
        headers=st.none() | portable_tables,
        delivery_mode=st.none() | st.sampled_from([1, 2]),
        priority=st.none() | st.integers(0, 9),
        correlation_id=st.none() | names,
        message_id=st.none() | names,
        timestamp=st.none() | st.integers(0, 2**32),
        app_id=st.none() | names,
    )
)
def test_properties_agree_with_pika(props: spec.BasicProperties) -> None:
    import pika.spec

    ours = bytearray()
    props.encode(ours)
    theirs = pika.spec.BasicProperties()
    theirs.decode(bytes(ours), 0)
    for name, _ in spec.BasicProperties.FIELDS:
        assert peer_value(getattr(theirs, name)) == getattr(props, name), name
    assert spec.BasicProperties.decode(b"".join(theirs.encode()), 0)[0] == props


# --- lazily decoded headers ----------------------------------------------------------------------

HEADERS_WIRE = b"".join(
    [
        b"\x00\x00\x00\x1a",  # 26 octets of entries
        b"\x01ll" + struct.pack(">q", 7),  # int64, as RabbitMQ sends ints
        b"\x01ff" + struct.pack(">f", 0.5),  # float32, which our encoder would widen to d
        b"\x01sS" + struct.pack(">I", 1) + b"x",
    ]
)


def props_wire(table: bytes) -> bytes:
    return b"\x30\x00" + table + b"\x02"  # headers and delivery_mode 2


def test_received_headers_are_decoded_when_first_read() -> None:
    props, end = spec.BasicProperties.decode(props_wire(HEADERS_WIRE), 0)
    assert end == len(props_wire(HEADERS_WIRE))
    assert props.delivery_mode == 2
    headers = props.headers
    assert headers == {"l": 7, "f": 0.5, "s": "x"}
    assert props.headers is headers  # decoded once, then kept
    headers["new"] = True  # the caller's dict from now on: encoding follows it
    out = bytearray()
    props.encode(out)
    assert spec.BasicProperties.decode(bytes(out), 0)[0].headers == {**headers}


def test_unread_headers_are_sent_on_exactly_as_received() -> None:
    wire = props_wire(HEADERS_WIRE)
    props, _ = spec.BasicProperties.decode(wire, 0)
    out = bytearray()
    props.encode(out)
    assert bytes(out) == wire  # int64 and float32 keep their wire types
    assert props.headers == {"l": 7, "f": 0.5, "s": "x"}


def test_decoded_headers_compare_and_show_like_constructed_ones() -> None:
    props, _ = spec.BasicProperties.decode(props_wire(HEADERS_WIRE), 0)
    built = spec.BasicProperties(headers={"s": "x", "l": 7, "f": 0.5}, delivery_mode=2)
    assert repr(props) == repr(spec.BasicProperties(headers=props.headers, delivery_mode=2))
    fresh, _ = spec.BasicProperties.decode(props_wire(HEADERS_WIRE), 0)
    assert fresh == built
    assert fresh != spec.BasicProperties(headers={}, delivery_mode=2)
    with pytest.raises(TypeError):
        hash(fresh)


def test_setting_headers_replaces_the_received_ones() -> None:
    props, _ = spec.BasicProperties.decode(props_wire(HEADERS_WIRE), 0)
    props.headers = None
    out = bytearray()
    props.encode(out)
    assert bytes(out) == b"\x10\x00\x02"


BAD_TABLE = b"\x00\x00\x00\x03\x01kZ"  # unknown field type Z


def test_malformed_headers_raise_on_every_read() -> None:
    """The frame is accepted (its table fits); the table is refused when it is used."""
    props, end = spec.BasicProperties.decode(props_wire(BAD_TABLE), 0)
    assert end == len(props_wire(BAD_TABLE))
    message = "basic property headers received from the peer is malformed: field table: "
    for _ in range(2):
        with pytest.raises(RemoteProtocolError, match=message + "unknown field type 'Z'") as info:
            _ = props.headers
        assert info.value.reply_code == 502
    with pytest.raises(RemoteProtocolError):
        _ = props == spec.BasicProperties(headers={}, delivery_mode=2)
    assert "headers=<malformed field table of 7 octets: field table: unknown field type" in repr(
        props
    )


def test_malformed_headers_are_not_sent_on() -> None:
    props, _ = spec.BasicProperties.decode(props_wire(BAD_TABLE), 0)
    out = bytearray(b"kept")
    with pytest.raises(LocalProtocolError, match="headers received from the peer is malformed"):
        encode_content(out, 1, spec.BasicPublish(), props, b"body", 4096)
    assert out == b"kept"


def test_headers_table_longer_than_the_buffer() -> None:
    with pytest.raises(ValueError, match="the headers table runs 1 octets past the end"):
        spec.BasicProperties.decode(b"\x20\x00\x00\x00\x00\x02\x01", 0)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_properties_decode_from_any_buffer(kind: Callable[[bytes], Buffer]) -> None:
    props, _ = spec.BasicProperties.decode(kind(props_wire(HEADERS_WIRE)), 0)
    assert props.headers == {"l": 7, "f": 0.5, "s": "x"}
