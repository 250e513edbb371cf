"""``python -m amqp_broker``: the ``amqp-broker`` command (see :func:`amqp_broker.main`)."""

from __future__ import annotations

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m amqp_broker"))
