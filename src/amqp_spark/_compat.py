"""What the installed PySpark's Python data source API offers, decided once at import.

PySpark 4.0 and 4.1 have batch reads and writes and streaming reads, but not
``pyspark.sql.streaming.datasource``: no read limits (``latestOffset()`` takes no arguments),
no ``SupportsTriggerAvailableNow`` and no ``reportLatestOffset``. Those came with 4.2.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

import pyspark

from ._errors import AmqpOptionError

__all__ = [
    "ADMISSION_CONTROL",
    "ARROW_STREAM_WRITER",
    "PYSPARK_VERSION",
    "DataSourceStreamArrowWriter",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "ReadMinRows",
    "SupportsTriggerAvailableNow",
    "parse_version",
    "require_admission_control",
    "require_pyspark",
]


def parse_version(text: str) -> tuple[int, int]:
    """``"4.1.4"`` (or ``"4.2.0.dev1"``) as ``(4, 1)``."""
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"cannot read a PySpark version from {text!r}")
    return int(match[1]), int(match[2])


#: The installed PySpark's ``(major, minor)``, read once from ``pyspark.__version__``.
PYSPARK_VERSION: Final = parse_version(pyspark.__version__)

#: Read limits, admission control and AvailableNow for Python streaming sources (4.2+).
ADMISSION_CONTROL: Final = PYSPARK_VERSION >= (4, 2)

#: Arrow stream writers (``DataSourceStreamArrowWriter``, for ``writeStream``): 4.1+.
ARROW_STREAM_WRITER: Final = PYSPARK_VERSION >= (4, 1)

if TYPE_CHECKING or ARROW_STREAM_WRITER:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
else:
    # PySpark 4.0: the data source refuses writeStream before this class is used
    from pyspark.sql.datasource import DataSourceStreamWriter as DataSourceStreamArrowWriter

if TYPE_CHECKING or ADMISSION_CONTROL:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
else:
    # Older PySpark never passes a limit nor asks for AvailableNow: the readers keep the
    # methods, and these stand-ins keep the class hierarchy and isinstance checks valid.
    class ReadLimit:
        """Stand-in: PySpark < 4.2 has no read limits."""

    class ReadAllAvailable(ReadLimit):
        """Stand-in: PySpark < 4.2 always reads everything available."""

    class ReadMaxRows(ReadLimit):
        """Stand-in: never passed by PySpark < 4.2."""

    class ReadMaxBytes(ReadLimit):
        """Stand-in: never passed by PySpark < 4.2."""

    class ReadMinRows(ReadLimit):
        """Stand-in: never passed by PySpark < 4.2."""

    class SupportsTriggerAvailableNow:
        """Stand-in: PySpark < 4.2 does not call ``prepareForTriggerAvailableNow``."""


def _installed() -> str:
    return ".".join(map(str, PYSPARK_VERSION))


def require_pyspark(feature: str, version: tuple[int, int]) -> None:
    """Refuse ``feature`` (what the user asked for) unless PySpark >= ``version``."""
    if version > PYSPARK_VERSION:
        needed = ".".join(map(str, version))
        raise NotImplementedError(
            f"amqp data source: {feature} needs PySpark >= {needed}; PySpark {_installed()} "
            "is installed"
        )


def require_admission_control(feature: str) -> None:
    """Refuse ``feature`` (an option name) when the installed PySpark cannot honour it."""
    if not ADMISSION_CONTROL:
        raise AmqpOptionError(
            feature,
            f"needs PySpark >= 4.2 (per-trigger limits on stream queues: admission control); "
            f"PySpark {_installed()} is installed",
        )
