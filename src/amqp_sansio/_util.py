"""Small helpers shared by the public modules."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["Buffer", "fix_module_names"]

#: Anything the decoders read from: they index and slice, never copy the whole input.
Buffer: TypeAlias = bytes | bytearray | memoryview


def fix_module_names(module: str, namespace: dict[str, object], names: list[str]) -> None:
    """Make re-exported classes and functions say where users import them from.

    ``repr``, pickling, tracebacks and autodoc then show ``amqp_sansio.QueueDeclare`` rather than
    a private path. Only objects defined in a private module of *module*'s own top-level package
    are renamed (``amqp_trio._channel.Channel`` becomes ``amqp_trio.Channel``,
    ``amqp_sansio.client._errors.NotFound`` becomes ``amqp_sansio.client.NotFound``; the shared
    exceptions ``amqp_trio`` re-exports keep ``amqp_sansio.client``).
    """
    package = module.partition(".")[0]
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) or callable(obj):
            current = getattr(obj, "__module__", "")
            if isinstance(current, str) and _is_private_module_of(current, package):
                obj.__module__ = module


def _is_private_module_of(module: str, package: str) -> bool:
    """Whether *module* is *package* or below it with a private part (``amqp_sansio._events``,
    ``amqp_sansio.client._errors``)."""
    head, _, rest = module.partition(".")
    return head == package and any(part.startswith("_") for part in rest.split("."))
