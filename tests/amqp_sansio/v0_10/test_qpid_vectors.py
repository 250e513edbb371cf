"""Vectors from an independent encoder: qpid-python 1.36's frames for every control, command and
coded struct (``tests/fixtures/v0_10/qpid_vectors.json``, written by
``tools/qpid_vectors_0_10.py``). Our reader decodes each to the values qpid encoded, and our
writer encodes those values back to the same octets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, cast
from uuid import UUID

import pytest

from amqp_sansio.v0_10._framing import (
    AssemblyReader,
    FrameReader,
    encode_command,
    encode_control,
)
from amqp_sansio.v0_10._generated.spec_0_10 import COMMANDS, CONTROLS, STRUCTS, TypeCode
from amqp_sansio.v0_10._types import (
    Array,
    ByteRanges,
    Command,
    Control,
    SequenceSet,
    Struct,
    Typed,
    UnknownStruct,
    Value,
)

if TYPE_CHECKING:
    from amqp_sansio.v0_10._framing import Assembly

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "v0_10" / "qpid_vectors.json"
#: JSON as the vector script writes it.
Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]
VECTORS: list[dict[str, Json]] = json.loads(FIXTURE.read_text())
TYPE_NAMES = {int(code): code.name.lower().replace("_", "-") for code in TypeCode}


def label(vector: dict[str, Json]) -> str:
    return f"{vector['name']}:{vector['label']}"


def to_json(value: Value | SequenceSet | ByteRanges, type_name: str) -> Json:
    """Our decoded value in the form the vector script writes qpid's values."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {"datetime": value} if type_name == "datetime" else value
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes):
        return {"bin": value.hex()}
    if isinstance(value, UUID):
        return {"uuid": value.bytes.hex()}
    if isinstance(value, SequenceSet):
        return {"seqset": [[low, high] for low, high in value.ranges]}
    if isinstance(value, Typed):
        return {"code": value.code, "value": to_json(value.value, TYPE_NAMES[value.code])}
    if isinstance(value, dict):
        return {"map": {k: to_json(v, "") for k, v in value.items()}}
    if isinstance(value, list):
        return {"list": [to_json(v, "") for v in value]}
    if isinstance(value, Array):
        element = TYPE_NAMES[value.code]
        return {
            "array": {"code": value.code, "values": [to_json(v, element) for v in value.values]}
        }
    if isinstance(value, UnknownStruct):
        return {"unknown": value.code, "data": value.data.hex()}
    if isinstance(value, Struct):
        return {
            "struct": value.NAME.rpartition(".")[2].replace("-", "_"),
            "code": value.CODE,
            "fields": {
                name.rstrip("_"): to_json(getattr(value, name), kind) for name, kind in value.FIELDS
            },
        }
    raise TypeError(f"no JSON form for {value!r}")


def expected_header(entry: Json) -> Json:
    """The vector's header entry; the struct qpid's ops does not know is kept as octets."""
    assert isinstance(entry, dict)
    if entry.get("struct") != "unknown":
        return entry
    fields = entry["fields"]
    assert isinstance(fields, dict)
    text = cast("dict[str, str]", fields["a"])["str"].encode()
    b = cast("int", fields["b"])
    data = b"\x03\x00" + bytes([len(text)]) + text + b.to_bytes(4, "big")
    return {"unknown": entry["code"], "data": data.hex()}


def read_assemblies(data: bytes) -> list[Assembly]:
    frames = FrameReader()
    assemblies = AssemblyReader()
    frames.feed(data)
    out = []
    while (frame := frames.next_frame()) is not None:
        assembly = assemblies.receive(frame)
        if assembly is not None:
            out.append(assembly)
    assert frames.buffered == 0
    return out


@pytest.mark.parametrize("vector", VECTORS, ids=label)
def test_decode_gives_qpids_values_and_encode_gives_its_octets(vector: dict[str, Json]) -> None:
    frames = bytes.fromhex(cast("str", vector["frames"]))
    (assembly,) = read_assemblies(frames)
    op = assembly.op
    assert vector["name"] == op.NAME
    assert assembly.channel == vector["channel"]
    fields = {name.rstrip("_"): to_json(getattr(op, name), kind) for name, kind in op.FIELDS}
    assert fields == vector["fields"]
    out = bytearray()
    max_frame_size = cast("int", vector["max_frame_size"])
    if vector["kind"] == "control":
        assert isinstance(op, Control)
        encode_control(out, assembly.channel, op, max_frame_size)
    else:
        assert isinstance(op, Command)
        assert assembly.sync == vector["sync"]
        headers = vector["headers"]
        if headers is None:
            assert assembly.headers is None
        else:
            assert isinstance(headers, list)
            assert assembly.headers is not None
            got = [to_json(h, "struct32") for h in assembly.headers]
            assert got == [expected_header(h) for h in headers]
        body = vector["body"]
        assert assembly.body == (None if body is None else bytes.fromhex(cast("str", body)))
        encode_command(
            out,
            assembly.channel,
            op,
            max_frame_size,
            sync=assembly.sync,
            headers=assembly.headers,
            body=assembly.body,
        )
    assert out.hex() == frames.hex()


def test_every_generated_control_command_and_coded_struct_has_vectors() -> None:
    names = {(v["name"], v["label"]) for v in VECTORS}
    for cls in (*CONTROLS.values(), *COMMANDS.values()):
        assert (cls.NAME, "empty") in names, cls.NAME
        assert (cls.NAME, "full") in names, cls.NAME
    labels = {cast("str", v["label"]) for v in VECTORS}
    for struct_cls in STRUCTS.values():
        qpid_name = struct_cls.NAME.rpartition(".")[2].replace("-", "_")
        assert f"header {qpid_name} full" in labels, struct_cls.NAME
        assert f"header {qpid_name} empty" in labels, struct_cls.NAME


def test_qpid_normalises_sequence_sets_as_we_do() -> None:
    vector = next(v for v in VECTORS if v["label"] == "completed, touching ranges merged")
    merged = [[0, 3], [5, 6], [10, 10]]
    assert vector["fields"] == {"commands": {"seqset": merged}, "timely_reply": True}
    ours = SequenceSet([(5, 6), (0, 1), (2, 3), (10, 10)])
    assert [list(r) for r in ours.ranges] == merged
    wrapping = next(v for v in VECTORS if v["label"] == "completed, wrapping")
    expected = SequenceSet([(0xFFFFFFFE, 0xFFFFFFFF), (0, 2)])
    assert wrapping["fields"] == {
        "commands": {"seqset": [list(r) for r in expected.ranges]},
        "timely_reply": True,
    }
