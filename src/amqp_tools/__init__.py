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


def _point_home() -> None:
    # repr, pickling and the docs then name amqp_tools.X rather than the private module.
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith("amqp_tools._"):
            obj.__module__ = __name__


_point_home()
