"""The public surface: every exported name exists, classes are final, modules point home."""

from __future__ import annotations

import ast
import enum
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import amqp_asyncio
import amqp_blocking
import amqp_kombu
import amqp_sansio
import amqp_sansio.client
import amqp_sansio.client.exports
import amqp_sansio.framing
import amqp_sansio.testing
import amqp_tools
import amqp_trio

if TYPE_CHECKING:
    import types

PUBLIC_MODULES = [
    amqp_sansio,
    amqp_sansio.framing,
    amqp_sansio.testing,
    amqp_sansio.client,
    amqp_sansio.client.exports,
    amqp_trio,
    amqp_asyncio,
    amqp_blocking,
    amqp_kombu,
    amqp_tools,
]
ADAPTERS = [amqp_trio, amqp_asyncio, amqp_blocking]
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_all_names_exist_and_are_unique(module: types.ModuleType) -> None:
    names = module.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_public_classes_are_final(module: types.ModuleType) -> None:
    # Base classes meant for subclassing, protocols, enums and exceptions are exempt (as in trio).
    exempt = {
        amqp_sansio.Method,
        amqp_sansio.ContentProperties,
        amqp_sansio.MessageReceived,  # ConnectionConfig.message_class subclasses it
        amqp_sansio.client.Message,
        amqp_sansio.client.AsyncMessage,
        amqp_sansio.client.PublisherCounts,
        amqp_sansio.client.PublishTicketState,
        amqp_kombu.Transport,  # kombu transports are subclassed (SSLTransport)
    }
    for name in module.__all__:
        obj = getattr(module, name)
        if not isinstance(obj, type) or obj in exempt:
            continue
        if issubclass(obj, (BaseException, enum.Enum)) or getattr(obj, "_is_protocol", False):
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


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda m: m.__name__)
def test_adapters_reexport_the_one_list(adapter: types.ModuleType) -> None:
    shared = amqp_sansio.client.exports.__all__
    assert set(shared) <= set(adapter.__all__)
    assert len(adapter.__all__) == len(set(adapter.__all__))
    for name in shared:
        assert getattr(adapter, name) is getattr(amqp_sansio.client, name), name
    assert set(shared) <= set(amqp_sansio.client.__all__)


def test_client_layer_names_its_public_module() -> None:
    assert amqp_sansio.client.NotFound.__module__ == "amqp_sansio.client"
    assert amqp_sansio.client.Router.__module__ == "amqp_sansio.client"
    assert amqp_trio.NotFound.__module__ == "amqp_sansio.client"
    assert amqp_trio.Channel.__module__ == "amqp_trio"
    assert amqp_blocking.Channel.__module__ == "amqp_blocking"


def _private_sansio_imports(path: Path) -> list[str]:
    """The imports in *path* that reach a private module or name of amqp_sansio."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            names = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] != "amqp_sansio":
                continue
            private = [part for part in parts[1:] if part.startswith("_")]
            private += [name for name in names if name.startswith("_")]
            if private:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {module} {private}")
    return found


def test_sibling_packages_import_only_public_amqp_sansio_names() -> None:
    siblings = [p for p in SRC.iterdir() if p.is_dir() and p.name != "amqp_sansio"]
    assert {"amqp_trio", "amqp_asyncio", "amqp_blocking", "amqp_spark"} <= {
        p.name for p in siblings
    }
    found = [
        hit
        for package in siblings
        for path in package.rglob("*.py")
        for hit in _private_sansio_imports(path)
    ]
    assert found == []
