"""The installed PySpark's version, for the older-PySpark runs (``make pytest-spark-4.0``).

Skips are not allowed in this project except here: a test of a feature PySpark < 4.2 lacks
is skipped on those releases with the reason saying which feature and which version.
"""

from __future__ import annotations

import pytest

from amqp_spark._compat import ADMISSION_CONTROL, ARROW_STREAM_WRITER, PYSPARK_VERSION

__all__ = ["INSTALLED", "NEEDS_PYSPARK_4_1", "NEEDS_PYSPARK_4_2"]

INSTALLED = ".".join(map(str, PYSPARK_VERSION))

#: Per-trigger limits (admission control), AvailableNow and the lag report need PySpark 4.2.
NEEDS_PYSPARK_4_2 = pytest.mark.skipif(
    not ADMISSION_CONTROL,
    reason=f"per-trigger limits, AvailableNow and the lag report need PySpark >= 4.2 "
    f"(installed: {INSTALLED})",
)

#: ``writeStream`` needs an Arrow stream writer: PySpark 4.1.
NEEDS_PYSPARK_4_1 = pytest.mark.skipif(
    not ARROW_STREAM_WRITER,
    reason=f"writeStream (an Arrow stream writer) needs PySpark >= 4.1 (installed: {INSTALLED})",
)
