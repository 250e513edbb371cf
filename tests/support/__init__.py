"""Code the tests of several packages share: scenarios run against every broker and adapter,
hypothesis strategies for the codec, the fuzz corpus, and where the repository's files are."""

from __future__ import annotations

from pathlib import Path
from typing import Final

#: The repository's top folder.
ROOT: Final = Path(__file__).resolve().parents[2]
#: Captured and hand-made wire data the tests read.
FIXTURES: Final = ROOT / "tests" / "fixtures"
#: Bytes recorded from RabbitMQ 3.10 by ``tools/capture_rabbitmq.py``.
RABBITMQ_CAPTURES: Final = FIXTURES / "rabbitmq"
