"""The generated 0-9 and 0-8 method tables: what they share with 0-9-1, round trips of every
class of their own, every method through a frame reader with the version's ids, and the
generator's freshness check for each module."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_sansio import AMQP_0_8, AMQP_0_9, AMQP_0_9_1, MessageContent, ProtocolSpec
from amqp_sansio._frames import FrameReader, MethodFrame, ProtocolVersion
from amqp_sansio._generated import spec_0_8, spec_0_9, spec_0_9_1
from amqp_sansio.testing import method_frame
from tests.support import ROOT
from tests.support.strategies import methods, properties

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

    from amqp_sansio._method import ContentProperties, Method

MODULES = {"0-8": spec_0_8, "0-9": spec_0_9}
SPECS = {"0-8": AMQP_0_8, "0-9": AMQP_0_9}
BASE = set(spec_0_9_1.METHODS.values())


def own_methods(module: ModuleType) -> list[type[Method]]:
    table: dict[int, type[Method]] = module.METHODS
    return sorted((c for c in table.values() if c not in BASE), key=lambda c: c.INDEX)


def own_properties(module: ModuleType) -> list[type[ContentProperties]]:
    table: dict[int, type[ContentProperties]] = module.PROPERTIES
    return [c for c in table.values() if c is not spec_0_9_1.BasicProperties]


OWN = [(name, cls) for name, module in MODULES.items() for cls in own_methods(module)]
OWN_PROPERTIES = [(n, cls) for n, module in MODULES.items() for cls in own_properties(module)]


# --- the tables -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "total", "shared", "classes"),
    [
        # 0-8: 12 classes (RabbitMQ's reading adds queue.unbind and the recover trio)
        (spec_0_8, 93, 48, {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120}),
        # 0-9: 0-8's classes with message instead of test, and channel resume/ping/pong/ok
        (spec_0_9, 101, 47, {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120}),
    ],
)
def test_tables_and_what_they_share(
    module: ModuleType, total: int, shared: int, classes: set[int]
) -> None:
    table: dict[int, type[Method]] = module.METHODS
    assert len(table) == total
    assert sum(cls in BASE for cls in table.values()) == shared
    assert {index >> 16 for index in table} == classes
    names = {cls.NAME for cls in table.values()}
    assert len(names) == total  # one class per meaning
    for cls in table.values():
        assert getattr(module, cls.__name__) is cls
        for reply in cls.RESPONSES:  # replies come from the same table
            assert reply in table.values()
        if cls in BASE:
            assert getattr(spec_0_9_1, cls.__name__) is cls


def test_names_follow_one_convention() -> None:
    # 0-8 spells "routing key", "no local", "soft error"; Python names are the same as 0-9-1's
    assert dict(spec_0_8.BasicDeliver.FIELDS) == dict(spec_0_9_1.BasicDeliver.FIELDS)
    assert dict(spec_0_8.BasicConsume.FIELDS)["no_local"] == "bit"
    assert spec_0_8.ChannelAlert.NAME == "channel.alert"
    assert spec_0_8.FileProperties.FIELDS[0] == ("content_type", "shortstr")
    assert spec_0_8.TunnelProperties.CLASS_ID == 110
    assert spec_0_9.StreamProperties.CLASS_ID == 80
    assert spec_0_8.PROTOCOL_VERSION == (8, 0, 0)
    assert spec_0_9.PROTOCOL_VERSION == (0, 9, 0)
    assert spec_0_8.FRAME_OOB_METHOD == 4


def test_a_spec_refuses_replies_from_another_table() -> None:
    methods = dict(spec_0_8.METHODS)
    methods[spec_0_8.ChannelOpen.INDEX] = spec_0_9_1.ChannelOpen  # answered by 0-9-1's open-ok
    del methods[spec_0_8.ChannelOpenOk.INDEX]
    with pytest.raises(ValueError, match="reply ChannelOpenOk is not in the method table"):
        ProtocolSpec(
            ProtocolVersion.AMQP_0_8,
            header=AMQP_0_8.header,
            start_version=(8, 0),
            methods=methods,
            properties=spec_0_8.PROPERTIES,
        )


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "cls"), OWN, ids=lambda v: getattr(v, "NAME", v))
@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_method_round_trip(version: str, cls: type[Method], data: st.DataObject) -> None:
    method = data.draw(methods(cls))
    out = bytearray(b"junk")
    method.encode(out)
    assert out[4:8] == struct.pack(">HH", cls.CLASS_ID, cls.METHOD_ID)
    out += b"trailing"
    decoded, end = cls.decode(bytes(out), 8)
    assert decoded == method
    assert end == len(out) - len(b"trailing")
    assert cls.decode(out, 8) == (decoded, end)
    assert cls.decode(memoryview(out), 8) == (decoded, end)


@pytest.mark.parametrize(
    ("version", "cls"), OWN_PROPERTIES, ids=lambda v: getattr(v, "__name__", v)
)
@settings(max_examples=50)
@given(data=st.data())
def test_properties_round_trip(
    version: str, cls: type[ContentProperties], data: st.DataObject
) -> None:
    props = data.draw(properties(cls))
    out = bytearray(b"xx")
    props.encode(out)
    assert cls.decode(memoryview(out), 2) == (props, len(out))


#: A value of each wire type, for building one instance of every class.
SAMPLE: dict[str, object] = {
    "bit": True,
    "octet": 7,
    "short": 300,
    "long": 70000,
    "longlong": 2**40,
    "timestamp": 2**33,
    "shortstr": "s",
    "longstr": b"l",
    "table": {"k": "v"},
    "content": MessageContent(data=b"c", reference=True),
}


@pytest.mark.parametrize("version", ["0-8", "0-9", "0-9-1"])
def test_all_methods_through_a_reader_with_the_version_s_ids(version: str) -> None:
    spec = {**SPECS, "0-9-1": AMQP_0_9_1}[version]
    reader = FrameReader(methods=spec.methods, properties=spec.properties)
    for index, cls in spec.methods.items():
        method = spec.make(cls.NAME, **{name: SAMPLE[kind] for name, kind in cls.FIELDS})
        frame = method_frame(1, method, protocol=spec)
        assert struct.unpack_from(">I", frame, 7)[0] == index
        reader.feed(frame)
        decoded = reader.next_frame()
        assert isinstance(decoded, MethodFrame)
        assert decoded.method == method


# --- exact bytes ------------------------------------------------------------------------------


def test_message_content_is_a_flag_octet_and_a_long_string() -> None:
    fields = {name: 0 for name, kind in spec_0_9.MessageAppend.FIELDS}
    assert fields == {"reference": 0, "bytes": 0}  # longstr fields, no content
    for content, flag in ((MessageContent(data=b"ab"), 0), (MessageContent(b"r1", True), 1)):
        props = {name: b"" for name, kind in spec_0_9.MessageTransfer.FIELDS if kind == "longstr"}
        transfer = AMQP_0_9.make(
            "message.transfer",
            **{n: False for n, k in spec_0_9.MessageTransfer.FIELDS if k == "bit"},
            **{n: 0 for n, k in spec_0_9.MessageTransfer.FIELDS if k in ("short", "octet")},
            **{n: 0 for n, k in spec_0_9.MessageTransfer.FIELDS if k in ("longlong", "timestamp")},
            **{n: "" for n, k in spec_0_9.MessageTransfer.FIELDS if k == "shortstr"},
            **props,
            application_headers={},
            body=content,
        )
        out = bytearray()
        transfer.encode(out)
        assert out.endswith(bytes([flag]) + b"\x00\x00\x00\x02" + content.data)
        bad = out[:-7] + b"\x02" + out[-6:]
        with pytest.raises(ValueError, match="content flag 2: neither 0"):
            spec_0_9.MessageTransfer.decode(bytes(bad), 4)


def test_0_8_close_and_recover_ids() -> None:
    close = spec_0_9_1.ConnectionClose(reply_code=200, reply_text="", class_id=0, method_id=0)
    assert method_frame(0, close, protocol=AMQP_0_8)[7:11] == b"\x00\x0a\x00\x3c"
    assert method_frame(0, close)[7:11] == b"\x00\x0a\x00\x32"
    assert spec_0_8.BasicRecover.INDEX == 60 << 16 | 110
    assert spec_0_9.BasicRecover.INDEX == 60 << 16 | 100


# --- the generator ----------------------------------------------------------------------------


def test_check_names_the_stale_version_module(tmp_path: Path) -> None:
    stale = "spec_0_8"
    for part in ("tools", "spec"):
        shutil.copytree(ROOT / part, tmp_path / part)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)  # ruff formats the modules by its settings
    generated = tmp_path / "src" / "amqp_sansio" / "_generated"
    shutil.copytree(ROOT / "src" / "amqp_sansio" / "_generated", generated)
    module = generated / f"{stale}.py"
    module.write_text(module.read_text().replace("FRAME_END: Final = 206", "FRAME_END: Final = 0"))
    result = subprocess.run(
        [sys.executable, "tools/gen_spec.py", "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert f"{stale}.py" in result.stdout
    assert "spec_0_9_1.py" not in result.stdout


def test_the_spec_coverage_page_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, "tools/gen_spec_coverage.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
