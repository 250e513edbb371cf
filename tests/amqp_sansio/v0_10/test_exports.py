"""The public surface of amqp_sansio.v0_10: names exist, classes are final, modules point home."""

from __future__ import annotations

import enum
import pickle
from typing import TYPE_CHECKING

import pytest

import amqp_sansio.v0_10
import amqp_sansio.v0_10.framing
import amqp_sansio.v0_10.testing
from amqp_sansio import v0_10

if TYPE_CHECKING:
    import types

PUBLIC = [amqp_sansio.v0_10, amqp_sansio.v0_10.framing, amqp_sansio.v0_10.testing]
BASES = {v0_10.Compound, v0_10.Struct, v0_10.Control, v0_10.Command}


@pytest.mark.parametrize("module", PUBLIC, ids=lambda m: m.__name__)
def test_all_names_exist_and_are_unique(module: types.ModuleType) -> None:
    names = module.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module", PUBLIC, ids=lambda m: m.__name__)
def test_public_classes_are_final(module: types.ModuleType) -> None:
    for name in module.__all__:
        obj = getattr(module, name)
        if not isinstance(obj, type) or obj in BASES:
            continue
        if issubclass(obj, (BaseException, enum.Enum)):
            continue
        if getattr(obj, "_is_protocol", False):
            continue  # an interface the user implements (ServerSide010)
        assert getattr(obj, "__final__", False), f"{module.__name__}.{name} is not @final"


def test_classes_name_their_public_module() -> None:
    assert v0_10.Connection.__module__ == "amqp_sansio.v0_10"
    assert v0_10.MessageTransfer.__module__ == "amqp_sansio.v0_10"
    assert v0_10.SessionOpened.__module__ == "amqp_sansio.v0_10"
    assert amqp_sansio.v0_10.framing.FrameReader.__module__ == "amqp_sansio.v0_10.framing"
    assert amqp_sansio.v0_10.framing.decode_map.__module__ == "amqp_sansio.v0_10.framing"
    assert repr(v0_10.QueueDeclare(queue="q")).startswith("QueueDeclare(")


def test_the_shared_infrastructure_is_the_0_9_1_cores() -> None:
    assert v0_10.RemoteProtocolError is amqp_sansio.RemoteProtocolError
    assert v0_10.NEED_DATA is amqp_sansio.NEED_DATA
    assert v0_10.Role is amqp_sansio.Role
    # the two families use the same flat names, each in its own namespace
    assert v0_10.QueueDeclare.__module__ == "amqp_sansio.v0_10"
    assert amqp_sansio.QueueDeclare.__module__ == "amqp_sansio"


def test_values_and_commands_pickle() -> None:
    values = [
        v0_10.QueueDeclare(queue="q", arguments={"x": v0_10.Typed(v0_10.TypeCode.INT64, 1)}),
        v0_10.SequenceSet([(1, 3)]),
        v0_10.Array.of(["a"]),
        v0_10.UnknownStruct(0x0999, b"\x00"),
    ]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value
