"""OpenTelemetry in the client layer: spans and metrics checked against the semantic conventions
the code pins (1.44.0), with the SDK's in-memory exporter and metric reader, through RabbitMQ
and the embedded broker, across the three adapters and across libraries (pika with
``opentelemetry-instrumentation-pika``, both ways)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Final

import pika
import pytest
import trio
from opentelemetry import trace
from opentelemetry.instrumentation.pika import PikaInstrumentor
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.propagators.textmap import (
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio import BasicProperties
from amqp_sansio.client import (
    SEMCONV_VERSION,
    ConnectionParameters,
    NotFound,
    instrument,
    uninstrument,
)
from tests.support.scenarios import unique

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.context import Context
    from pika.adapters.blocking_connection import BlockingChannel

    from amqp_broker import BrokerThread

_TIMEOUT: Final = 30.0


class Otel:
    """A tracer provider and a meter provider that keep what they get in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        found = [span for span in self.spans() if span.name == name]
        assert len(found) == 1, (name, [span.name for span in self.spans()])
        return found[0]

    def points(self, metric: str) -> list[tuple[dict[str, object], float]]:
        """(attributes, value or count) of each data point of *metric*."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, object], float]] = []
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name != metric:
                        continue
                    for point in item.data.data_points:
                        value = (
                            point.count
                            if isinstance(point, HistogramDataPoint)
                            else getattr(point, "value", 0)
                        )
                        found.append((dict(point.attributes or {}), value))
        return found


@pytest.fixture
def otel() -> Iterator[Otel]:
    kit = Otel()
    try:
        yield kit
    finally:
        uninstrument()
        kit.tracer_provider.shutdown()
        kit.meter_provider.shutdown()


def _server(url: str) -> dict[str, object]:
    params = ConnectionParameters.from_url(url)
    return {
        "messaging.system": "rabbitmq",
        "server.address": params.host,
        "server.port": params.port,
    }


def _child_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.parent is not None, child.name
    assert parent.context is not None
    return (
        child.context is not None
        and child.context.trace_id == parent.context.trace_id
        and child.parent.span_id == parent.context.span_id
    )


def _links_to(span: ReadableSpan, target: ReadableSpan) -> bool:
    assert target.context is not None
    return any(link.context.span_id == target.context.span_id for link in span.links)


# --- names and attributes ---------------------------------------------------------------------


def test_span_names_kinds_and_attributes(otel: Otel, amqp_broker: BrokerThread) -> None:
    url = amqp_broker.url
    assert SEMCONV_VERSION == "1.44.0"
    server = _server(url)

    async def main() -> None:
        async with (
            amqp_trio.connect(
                url, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
            ) as conn,
            conn.channel() as ch,
        ):
            await ch.queue_declare("q")
            await ch.exchange_declare("x", "direct")
            await ch.queue_bind("q", "x", routing_key="k")
            props = BasicProperties(message_id="m-1", correlation_id="c-1", headers={"a": 1})
            await ch.basic_publish(b"12345", exchange="x", routing_key="k", properties=props)
            got = await ch.basic_get("q")
            assert got is not None
            assert got.properties.headers is not None
            assert got.properties.headers["a"] == 1  # the caller's headers, plus traceparent
            assert "traceparent" in got.properties.headers
            assert props.headers == {"a": 1}  # the caller's properties are not changed
            await got.nack(requeue=True)
            async with ch.basic_consume("q") as consumer:
                async for message in consumer:
                    await message.reject(requeue=False)
                    break
            await ch.basic_publish(b"", routing_key="")  # the default exchange, no key
            reply = await ch.queue_declare("", exclusive=True)
            await ch.basic_publish(b"", routing_key=reply.queue)
            await ch.basic_get(reply.queue, no_ack=True)
            await ch.basic_get(reply.queue)  # empty

    trio.run(main)
    publish = otel.span("publish x:k")
    assert publish.kind is SpanKind.PRODUCER
    assert dict(publish.attributes or {}) == {
        **server,
        "messaging.operation.name": "publish",
        "messaging.operation.type": "send",
        "messaging.destination.name": "x:k",
        "messaging.rabbitmq.destination.routing_key": "k",
        "messaging.message.id": "m-1",
        "messaging.message.conversation_id": "c-1",
        "messaging.message.body.size": 5,
    }
    gets = [span for span in otel.spans() if span.name == "get x:k:q"]
    assert [span.kind for span in gets] == [SpanKind.CLIENT]
    assert dict(gets[0].attributes or {}) == {
        **server,
        "messaging.operation.name": "get",
        "messaging.operation.type": "receive",
        "messaging.destination.name": "x:k:q",
        "messaging.rabbitmq.destination.routing_key": "k",
        "messaging.rabbitmq.message.delivery_tag": 1,
        "messaging.message.id": "m-1",
        "messaging.message.conversation_id": "c-1",
        "messaging.message.body.size": 5,
    }
    assert _links_to(gets[0], publish)
    nack = otel.span("nack x:k:q")
    assert nack.kind is SpanKind.CLIENT
    assert dict(nack.attributes or {}) == {
        **server,
        "messaging.operation.name": "nack",
        "messaging.operation.type": "settle",
        "messaging.destination.name": "x:k:q",
        "messaging.rabbitmq.message.delivery_tag": 1,
        "messaging.message.id": "m-1",
        "messaging.message.conversation_id": "c-1",
    }
    assert _links_to(nack, publish)
    process = otel.span("consume x:k:q")
    assert process.kind is SpanKind.CONSUMER
    assert dict(process.attributes or {}) == {
        **server,
        "messaging.operation.name": "consume",
        "messaging.operation.type": "process",
        "messaging.destination.name": "x:k:q",
        "messaging.rabbitmq.destination.routing_key": "k",
        "messaging.rabbitmq.message.delivery_tag": 2,
        "messaging.message.id": "m-1",
        "messaging.message.conversation_id": "c-1",
        "messaging.message.body.size": 5,
    }
    assert _child_of(process, publish)  # no span was current: the creation context is parent
    assert _links_to(process, publish)
    reject = otel.span("reject x:k:q")
    assert _child_of(reject, process)  # settled while processing
    assert otel.span("publish amq.default").attributes == {
        **server,
        "messaging.operation.name": "publish",
        "messaging.operation.type": "send",
        "messaging.destination.name": "amq.default",
        "messaging.message.body.size": 0,
    }
    # A server-named queue is anonymous: not in span names.
    anonymous = [span for span in otel.spans() if span.name in ("publish", "get")]
    assert [span.name for span in anonymous] == ["publish", "get", "get"]
    for span in anonymous:
        assert (span.attributes or {})["messaging.destination.anonymous"] is True
    assert "messaging.rabbitmq.message.delivery_tag" not in (anonymous[2].attributes or {})

    # The metrics: counts per operation and destination, durations of each operation.
    sent = otel.points("messaging.client.sent.messages")
    assert ({**server, "messaging.operation.name": "publish", "messaging.operation.type": "send",
             "messaging.destination.name": "x:k"}, 1) in sent  # fmt: skip
    consumed = {
        (str(a["messaging.operation.name"]), str(a["messaging.destination.name"])): value
        for a, value in otel.points("messaging.client.consumed.messages")
    }
    assert consumed[("get", "x:k:q")] == 1
    assert consumed[("consume", "x:k:q")] == 1
    durations = {
        str(a["messaging.operation.name"])
        for a, _ in otel.points("messaging.client.operation.duration")
    }
    assert durations == {"publish", "get", "nack", "reject"}
    [(attributes, count)] = otel.points("messaging.process.duration")
    assert (attributes["messaging.operation.type"], count) == ("process", 1)


def test_processing_inside_an_application_span_links_the_creation_context(
    otel: Otel, amqp_broker: BrokerThread
) -> None:
    tracer = otel.tracer_provider.get_tracer("app")
    with amqp_blocking.connect(
        amqp_broker.url, tracer_provider=otel.tracer_provider
    ) as conn, conn.channel() as ch:  # fmt: skip
        ch.queue_declare("q")
        ch.basic_publish(b"x", routing_key="q")
        with tracer.start_as_current_span("app"), ch.consume("q", timeout=_TIMEOUT) as consumer:
            for message in consumer:
                current = trace.get_current_span()
                message.ack()
                break
    app, publish, process = otel.span("app"), otel.span("publish q"), otel.span("consume q")
    assert process.context is not None
    assert current.get_span_context().span_id == process.context.span_id
    assert _child_of(process, app)
    assert _links_to(process, publish)
    assert _child_of(otel.span("ack q"), process)


# --- propagation across brokers, adapters and libraries ----------------------------------------


def test_a_trace_continues_across_the_three_adapters(otel: Otel, amqp_url: str) -> None:
    instrument(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    first, second = unique("otel-a"), unique("otel-b")
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(first)
        ch.queue_declare(second)
        try:
            ch.basic_publish(b"from blocking", routing_key=first)

            async def relay() -> None:  # asyncio consumes and publishes on, while processing
                async with (
                    amqp_asyncio.connect(amqp_url) as aconn,
                    aconn.channel() as ach,
                    ach.basic_consume(first) as consumer,
                ):
                    async for message in consumer:
                        await ach.basic_publish(b"from asyncio", routing_key=second)
                        await message.ack()
                        break

            asyncio.run(asyncio.wait_for(relay(), _TIMEOUT))

            async def last() -> None:
                with trio.fail_after(_TIMEOUT):
                    async with (
                        amqp_trio.connect(amqp_url) as tconn,
                        tconn.channel() as tch,
                        tch.basic_consume(second) as consumer,
                    ):
                        async for message in consumer:
                            assert message.body == b"from asyncio"
                            await message.ack()
                            break

            trio.run(last)
        finally:
            ch.queue_delete(first)
            ch.queue_delete(second)
    hops = [
        otel.span(f"publish {first}"),
        otel.span(f"consume {first}"),
        otel.span(f"publish {second}"),
        otel.span(f"consume {second}"),
    ]
    for child, parent in zip(hops[1:], hops, strict=False):
        assert _child_of(child, parent), (child.name, parent.name)
    assert len({span.context.trace_id for span in hops if span.context}) == 1


def _pika_channel(url: str) -> tuple[pika.BlockingConnection, BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    return connection, connection.channel()


def test_a_trace_continues_from_pika_to_us(otel: Otel, amqp_url: str) -> None:
    queue = unique("otel-pika-in")
    connection, channel = _pika_channel(amqp_url)
    try:
        PikaInstrumentor.instrument_channel(channel, tracer_provider=otel.tracer_provider)
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"from pika")
        with (
            amqp_blocking.connect(amqp_url, tracer_provider=otel.tracer_provider) as conn,
            conn.channel() as ch,
            ch.consume(queue, timeout=_TIMEOUT) as consumer,
        ):
            for message in consumer:
                assert message.body == b"from pika"
                message.ack()
                break
    finally:
        channel.queue_delete(queue)
        connection.close()
    [pika_publish] = [span for span in otel.spans() if span.kind is SpanKind.PRODUCER]
    assert pika_publish.instrumentation_scope is not None
    assert pika_publish.instrumentation_scope.name.startswith("opentelemetry.instrumentation.pika")
    assert _child_of(otel.span(f"consume {queue}"), pika_publish)


def test_a_trace_continues_from_us_to_pika(otel: Otel, amqp_url: str) -> None:
    queue = unique("otel-pika-out")
    connection, channel = _pika_channel(amqp_url)
    received: list[bytes] = []
    try:
        channel.queue_declare(queue)

        async def publish() -> None:
            async with amqp_trio.connect(
                amqp_url, tracer_provider=otel.tracer_provider
            ) as conn, conn.channel() as ch:  # fmt: skip
                await ch.basic_publish(b"to pika", routing_key=queue)

        trio.run(publish)

        def on_message(
            ch: object, method: pika.spec.Basic.Deliver, props: object, body: bytes
        ) -> None:
            received.append(body)
            channel.basic_ack(method.delivery_tag)

        channel.basic_consume(queue, on_message)
        PikaInstrumentor.instrument_channel(channel, tracer_provider=otel.tracer_provider)
        while not received:
            connection.process_data_events(time_limit=1)
    finally:
        channel.queue_delete(queue)
        connection.close()
    assert received == [b"to pika"]
    [pika_consume] = [span for span in otel.spans() if span.kind is SpanKind.CONSUMER]
    assert _child_of(pika_consume, otel.span(f"publish {queue}"))


# --- turning it on and off ----------------------------------------------------------------------


class _Custom(TextMapPropagator):
    """A propagator of our own: one header, ``x-trace``, holding trace and span id."""

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        values = getter.get(carrier, "x-trace")
        if not values:
            return context or trace.set_span_in_context(trace.INVALID_SPAN)
        trace_id, span_id = (int(part, 16) for part in values[0].split("-"))
        parent = trace.NonRecordingSpan(
            trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(1))
        )
        return trace.set_span_in_context(parent, context)

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        span_context = trace.get_current_span(context).get_span_context()
        setter.set(carrier, "x-trace", f"{span_context.trace_id:032x}-{span_context.span_id:016x}")

    @property
    def fields(self) -> set[str]:
        return {"x-trace"}


def test_the_configured_propagator_writes_the_headers(
    otel: Otel, amqp_broker: BrokerThread
) -> None:
    instrument(tracer_provider=otel.tracer_provider, propagator=_Custom())
    with amqp_blocking.connect(amqp_broker.url) as conn, conn.channel() as ch:
        ch.queue_declare("q")
        ch.basic_publish(b"x", routing_key="q")
        with ch.consume("q", timeout=_TIMEOUT) as consumer:
            for message in consumer:
                headers = message.properties.headers or {}
                message.ack()
                break
    assert set(headers) == {"x-trace"}  # no traceparent: the global propagator is not used
    assert _child_of(otel.span("consume q"), otel.span("publish q"))


def test_off_unless_asked(otel: Otel, amqp_broker: BrokerThread) -> None:
    with amqp_blocking.connect(amqp_broker.url) as conn, conn.channel() as ch:
        assert conn._telemetry is None
        ch.queue_declare("q")
        ch.basic_publish(b"x", routing_key="q")
        message = ch.basic_get("q", no_ack=True)
        assert message is not None
        assert message.properties.headers is None  # nothing injected
    instrument(tracer_provider=otel.tracer_provider)
    with amqp_blocking.connect(amqp_broker.url) as conn:
        assert conn._telemetry is not None
    uninstrument()
    with amqp_blocking.connect(amqp_broker.url) as conn:
        assert conn._telemetry is None
    assert otel.spans() == []


def test_no_opentelemetry_import_until_asked() -> None:
    script = textwrap.dedent(
        """
        import sys
        import amqp_asyncio, amqp_blocking, amqp_trio
        import amqp_sansio.client
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_docs_example_passes(pytester: pytest.Pytester) -> None:
    import re

    from tests.support import ROOT

    page = (ROOT / "docs" / "tracing.md").read_text(encoding="utf-8")
    [example] = [
        block
        for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL)
        if "def test_" in block
    ]
    pytester.makepyfile(test_doc=example)
    result = pytester.runpytest("-p", "pytest_amqp_sansio", "-W", "error")
    result.assert_outcomes(passed=1)


def test_failures_and_batches(otel: Otel, amqp_broker: BrokerThread) -> None:
    server = _server(amqp_broker.url)
    with amqp_blocking.connect(
        amqp_broker.url, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
    ) as conn:
        with conn.channel() as ch, pytest.raises(NotFound):
            ch.basic_get("missing")
        with conn.channel() as ch:
            ch.queue_declare("q")
            for n in range(3):
                ch.basic_publish(f"{n}".encode(), routing_key="q")
            tags = [message.delivery_tag for message in _get_all(ch, "q", 3)]
            ch.basic_ack(tags[-1], multiple=True)
    failed = otel.span("get missing")
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "amqp_sansio.client.NotFound"
    assert ({**server, "messaging.operation.name": "get", "messaging.operation.type": "receive",
             "messaging.destination.name": "missing", "error.type": "amqp_sansio.client.NotFound"},
            1) in otel.points("messaging.client.operation.duration")  # fmt: skip
    ack = otel.span("ack q")
    assert (ack.attributes or {})["messaging.batch.message_count"] == 3
    publishes = [span for span in otel.spans() if span.name == "publish q"]
    assert {link.context.span_id for link in ack.links} == {
        span.context.span_id for span in publishes if span.context
    }


def _get_all(ch: amqp_blocking.Channel, queue: str, count: int) -> list[amqp_blocking.Message]:
    got: list[amqp_blocking.Message] = []
    while len(got) < count:
        message = ch.basic_get(queue)
        if message is not None:
            got.append(message)
    return got


def test_a_consumer_read_through_wait_for(
    otel: Otel, amqp_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    # Each __anext__ runs in a task of its own: the process span is current there only, and
    # ending it from the next task is no error.
    async def main() -> None:
        async with (
            amqp_asyncio.connect(amqp_broker.url, tracer_provider=otel.tracer_provider) as conn,
            conn.channel() as ch,
        ):
            await ch.queue_declare("q")
            for body in (b"1", b"2"):
                await ch.basic_publish(body, routing_key="q")
            async with ch.basic_consume("q", no_ack=True) as consumer:
                for _ in range(2):
                    await asyncio.wait_for(consumer.__anext__(), _TIMEOUT)

    asyncio.run(main())
    assert [span.name for span in otel.spans()].count("consume q") == 2
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


def test_no_op_providers(amqp_broker: BrokerThread) -> None:
    # What an application gets with OpenTelemetry's API alone: nothing recorded, nothing
    # injected, and the adapters work as without tracing.
    instrument(tracer_provider=trace.NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
    try:
        with amqp_blocking.connect(amqp_broker.url) as conn, conn.channel() as ch:
            ch.queue_declare("q")
            ch.basic_publish(b"x", routing_key="q")
            with ch.consume("q", timeout=_TIMEOUT) as consumer:
                for message in consumer:
                    assert message.properties.headers is None
                    assert not trace.get_current_span().get_span_context().is_valid
                    message.ack()
                    break
            assert ch.basic_get("q") is None
    finally:
        uninstrument()


@pytest.mark.parametrize(
    ("exchange", "routing_key", "queue", "sent", "consumed"),
    [
        ("x", "k", "q", "x:k", "x:k:q"),
        ("x", "q", "q", "x:q", "x:q"),
        ("", "q", "q", "q", "q"),
        ("", "k", "q", "k", "k:q"),
        ("x", "", "q", "x", "x:q"),
        ("x", "", "", "x", "x"),
        ("", "", "q", "amq.default", "q"),
        ("", "", "", "amq.default", "amq.default"),
    ],
)
def test_destination_names(
    exchange: str, routing_key: str, queue: str, sent: str, consumed: str
) -> None:
    # RabbitMQ's rules in semantic conventions 1.44.0 (docs/messaging/rabbitmq.md)
    from amqp_sansio.client._telemetry import consume_destination, send_destination

    assert send_destination(exchange, routing_key) == sent
    assert consume_destination(exchange, routing_key, queue) == consumed


def test_a_trace_continues_to_and_from_aio_pika(otel: Otel, amqp_url: str) -> None:
    import aio_pika
    from opentelemetry.instrumentation.aio_pika import AioPikaInstrumentor

    first, second = unique("otel-aio-in"), unique("otel-aio-out")
    instrumentor = AioPikaInstrumentor()
    instrumentor.instrument(tracer_provider=otel.tracer_provider)  # patches aio-pika globally
    try:

        async def main() -> None:
            connection = await aio_pika.connect(amqp_url)
            async with connection:
                channel = await connection.channel()
                queues = [await channel.declare_queue(name) for name in (first, second)]
                try:
                    # aio-pika (instrumented) publishes; we consume
                    await channel.default_exchange.publish(
                        aio_pika.Message(b"from aio-pika"), routing_key=first
                    )
                    async with (
                        amqp_asyncio.connect(
                            amqp_url, tracer_provider=otel.tracer_provider
                        ) as conn,
                        conn.channel() as ch,
                        ch.basic_consume(first) as consumer,
                    ):
                        async for message in consumer:
                            await message.ack()
                            break
                        # we publish; aio-pika (instrumented) consumes
                        await ch.basic_publish(b"to aio-pika", routing_key=second)
                    got = asyncio.get_running_loop().create_future()

                    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                        await message.ack()
                        if not got.done():
                            got.set_result(message.body)

                    await queues[1].consume(on_message)
                    assert await asyncio.wait_for(got, _TIMEOUT) == b"to aio-pika"
                finally:
                    for queue in queues:
                        await queue.delete(if_unused=False, if_empty=False)

        asyncio.run(main())
    finally:
        instrumentor.uninstrument()
    ours = otel.span(f"publish {second}")
    [aio_pikas] = [
        span for span in otel.spans() if span.kind is SpanKind.PRODUCER and span is not ours
    ]
    assert aio_pikas.instrumentation_scope is not None
    assert aio_pikas.instrumentation_scope.name.startswith("opentelemetry.instrumentation.aio_pika")
    assert _child_of(otel.span(f"consume {first}"), aio_pikas)
    [theirs] = [
        span
        for span in otel.spans()
        if span.kind is SpanKind.CONSUMER and span.name != f"consume {first}"
    ]
    assert _child_of(theirs, ours)
