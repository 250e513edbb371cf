"""Helpers of the 0-10 package's public modules."""

from __future__ import annotations

__all__ = ["fix_module_names"]


def fix_module_names(
    module: str, namespace: dict[str, object], names: list[str], *, package: str | None = None
) -> None:
    """Make the classes and functions re-exported by *module* say where users import them from.

    ``amqp_sansio._util.fix_module_names`` renames objects of a top-level package's private
    modules (``amqp_sansio._x``); this does the same for a sub-package's private modules
    (``amqp_sansio.v0_10._connection.Connection`` becomes ``amqp_sansio.v0_10.Connection``):
    the private modules of *package* (default: *module* itself).
    """
    private = (package or module) + "._"
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) or callable(obj):
            current = getattr(obj, "__module__", "")
            if isinstance(current, str) and current.startswith(private):
                obj.__module__ = module
