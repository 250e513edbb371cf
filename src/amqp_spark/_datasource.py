"""``AmqpDataSource``: the ``amqp`` format for ``spark.read``, ``spark.readStream``,
``df.write`` and ``df.writeStream``."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from pyspark.errors import AnalysisException, PySparkNotImplementedError
from pyspark.sql.datasource import DataSource

from ._compat import PYSPARK_VERSION, require_admission_control, require_pyspark
from ._errors import AmqpOptionError
from ._options import parse_options
from ._queue_reader import QueueStreamReader
from ._schema import output_columns, source_schema
from ._stream_reader import StreamQueueBatchReader, StreamQueueStreamReader
from ._writer import AmqpBatchWriter, AmqpStreamWriter, plan_write

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
        SimpleDataSourceStreamReader,
    )
    from pyspark.sql.types import StructType

    from ._options import AmqpOptions
    from ._schema import OutputColumn
    from ._writer import WritePlan

__all__ = ["AmqpDataSource", "register"]


@final
class AmqpDataSource(DataSource):
    """RabbitMQ queues as a Spark data source, over AMQP 0-9-1 (``format("amqp")``).

    - ``queueType=stream``: exactly-once ``readStream`` (the checkpoint stores stream
      offsets; partitions are offset ranges read on executors) and batch ``read`` of an offset
      range.
    - ``queueType=classic|quorum``: at-least-once ``readStream``, consumed on the driver, each
      batch acknowledged only after Spark committed it.
    - ``write``/``writeStream``: publishing with confirms from every task, at-least-once.

    Every option is checked here, when Spark creates the source, so a bad option fails
    ``load()``/``save()``/``start()`` with :class:`AmqpOptionError` naming it. Nothing
    connects before data is read or written.
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        #: The options, parsed and checked (``self.options`` keeps Spark's raw strings).
        self.amqp_options: AmqpOptions = parse_options(options)

    @classmethod
    def name(cls) -> str:
        """The format name: ``"amqp"``."""
        return "amqp"

    def schema(self) -> StructType:
        """The message columns (see :func:`amqp_spark.source_schema`).

        Spark asks for it only to read (``load()`` without ``.schema(...)``), never to write,
        so the options a read needs are checked here: ``load()`` fails, not the query later.
        """
        self._require_queue()
        return source_schema(self.amqp_options.source.include_headers_json)

    def _columns(self, schema: StructType) -> tuple[OutputColumn, ...]:
        try:
            return output_columns(schema)
        except ValueError as exc:
            raise AmqpOptionError("schema", str(exc)) from None

    def _require_queue(self) -> str:
        source = self.amqp_options.source
        if not source.reads():
            raise AmqpOptionError(
                "queue",
                'is required for reading: .option("queue", "a,b"), load("a"), or '
                '.option("superStream", "name")',
            )
        if source.queue_type is None:
            raise AmqpOptionError(
                "queueType",
                "is required for reading (AMQP 0-9-1 cannot ask the broker): add "
                '.option("queueType", "stream"), "classic" or "quorum"',
            )
        return source.queue_type

    def reader(self, schema: StructType) -> DataSourceReader:
        """Batch ``spark.read``: stream queues only (reading a classic queue consumes it)."""
        if self._require_queue() != "stream":
            raise AmqpOptionError(
                "queueType",
                "spark.read needs a stream queue: reading a classic or quorum queue removes its "
                "messages; use spark.readStream for those",
            )
        return StreamQueueBatchReader(self.amqp_options, self._columns(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Stream queues get the exactly-once reader; the others fall back to
        :meth:`simpleStreamReader` (Spark calls it when this raises "not implemented")."""
        if self._require_queue() != "stream":
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        if self.amqp_options.source.ending_offsets is not None:
            raise AmqpOptionError("endingOffsets", "applies to spark.read, not spark.readStream")
        self._check_admission_control()
        return StreamQueueStreamReader(self.amqp_options, self._columns(schema))

    def _check_admission_control(self) -> None:
        source = self.amqp_options.source
        for option, value in (
            ("maxMessagesPerTrigger", source.max_messages_per_trigger),
            ("maxBytesPerTrigger", source.max_bytes_per_trigger),
            ("minMessagesPerTrigger", source.min_messages_per_trigger),
        ):
            if value is not None:
                require_admission_control(option)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        """Classic and quorum queues: the driver-side at-least-once reader."""
        if self._require_queue() == "stream":
            raise AmqpOptionError("queueType", "stream queues are read by streamReader")
        return QueueStreamReader(self.amqp_options, self._columns(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Batch ``df.write``: an Arrow writer publishing with confirms."""
        if overwrite:
            raise AmqpOptionError("mode", "the amqp sink can only append to an exchange")
        return AmqpBatchWriter(self.amqp_options, self._write_plan(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``df.writeStream``: an Arrow writer publishing each micro-batch with confirms.

        ``outputMode("append")`` publishes new rows; ``outputMode("complete")`` (``overwrite``)
        publishes the whole result table every micro-batch: messages cannot be overwritten, so
        consumers see each version of it.
        """
        require_pyspark("writeStream (an Arrow stream writer)", (4, 1))
        return AmqpStreamWriter(self.amqp_options, self._write_plan(schema))

    def _write_plan(self, schema: StructType) -> WritePlan:
        try:
            return plan_write(schema, self.amqp_options.sink)
        except ValueError as exc:
            raise AmqpOptionError("schema", str(exc)) from None


def register(spark: SparkSession) -> None:
    """Register :class:`AmqpDataSource` with a session (``format("amqp")``).

    Not needed when the ``pyspark_amqp`` module is importable: Spark finds it by itself.
    """
    try:
        spark.dataSource.register(AmqpDataSource)
    except AnalysisException as exc:
        # PySpark 4.0 refuses to replace the source it found through pyspark_amqp; 4.1+ do not
        if exc.getCondition() != "DATA_SOURCE_ALREADY_EXISTS" or PYSPARK_VERSION >= (4, 1):
            raise
