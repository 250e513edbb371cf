"""The public surface: every exported name exists, classes are final, modules point home."""

from __future__ import annotations

import enum
import pickle
from typing import TYPE_CHECKING

import pytest

import amqp_sansio
import amqp_sansio.framing
import amqp_sansio.testing
import amqp_tools

if TYPE_CHECKING:
    import types

PUBLIC_MODULES = [amqp_sansio, amqp_sansio.framing, amqp_sansio.testing, amqp_tools]


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_all_names_exist_and_are_unique(module: types.ModuleType) -> None:
    names = module.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_public_classes_are_final(module: types.ModuleType) -> None:
    # Base classes meant for subclassing, enums and exceptions are exempt (as in trio).
    exempt = {amqp_sansio.Method, amqp_sansio.ContentProperties}
    for name in module.__all__:
        obj = getattr(module, name)
        if not isinstance(obj, type) or obj in exempt:
            continue
        if issubclass(obj, (BaseException, enum.Enum)):
            continue
        assert getattr(obj, "__final__", False), f"{module.__name__}.{name} is not @final"


def test_classes_name_their_public_module() -> None:
    assert amqp_sansio.QueueDeclare.__module__ == "amqp_sansio"
    assert amqp_sansio.Int64.__module__ == "amqp_sansio"
    assert amqp_sansio.framing.FrameReader.__module__ == "amqp_sansio.framing"
    assert repr(amqp_sansio.BasicAck(delivery_tag=1)).startswith("BasicAck(")


def test_methods_pickle_through_their_public_name() -> None:
    method = amqp_sansio.QueueDeclare(queue="q", arguments={"x-max-length": 1})
    assert pickle.loads(pickle.dumps(method)) == method
