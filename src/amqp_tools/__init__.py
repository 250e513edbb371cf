"""amqp_tools: the command-line tools, and the pieces of ``amqp-decode`` for reuse.

* ``amqp-decode`` (:func:`decode_main`) prints the AMQP inside pcap and pcapng captures. It
  needs scapy, the ``tools`` extra: ``pip install 'amqp-sansio[tools]'``.
* ``amqp-publish`` (:func:`publish_main`) and ``amqp-consume`` (:func:`consume_main`) take the
  options of rabbitmq-c's ``amqp-tools`` and run on :mod:`amqp_blocking`.

The decoder is three layers, each usable alone: a capture reader (scapy) yields
:class:`TcpSegment` values; :class:`TcpReassembler` turns them into each direction's octets in
sequence order; and a protocol decoder, picked by the protocol header a connection starts with,
turns those octets into frames. See ``docs/tools.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._consume_cli import consume_main
    from ._decode_cli import decode_main
    from ._publish_cli import publish_main
    from ._reassembly import (
        Endpoint,
        Side,
        StreamChunk,
        StreamGap,
        TcpConnection,
        TcpReassembler,
        TcpSegment,
    )

# Each name loads its own module when first used: ``amqp-publish --help`` reads its options
# without importing the decoders (every AMQP version's tables) or the client.
_LAZY: Final = {
    "consume_main": "._consume_cli",
    "decode_main": "._decode_cli",
    "publish_main": "._publish_cli",
    **dict.fromkeys(
        (
            "Endpoint",
            "Side",
            "StreamChunk",
            "StreamGap",
            "TcpConnection",
            "TcpReassembler",
            "TcpSegment",
        ),
        "._reassembly",
    ),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(module, __name__), name)
    # repr, pickling and the docs then name amqp_tools.X rather than the private module.
    if getattr(value, "__module__", "").startswith("amqp_tools._"):
        value.__module__ = __name__
    globals()[name] = value
    return value


__all__ = [
    "Endpoint",
    "Side",
    "StreamChunk",
    "StreamGap",
    "TcpConnection",
    "TcpReassembler",
    "TcpSegment",
    "consume_main",
    "decode_main",
    "publish_main",
]
