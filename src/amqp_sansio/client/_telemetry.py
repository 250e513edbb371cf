"""OpenTelemetry spans and metrics for every client adapter, written once.

Imported only when tracing is on (see :mod:`._instrument`). The adapters call four hooks, each
behind one ``if telemetry is not None``: :meth:`ConnectionTelemetry.publish` around the
core's publish, :meth:`~ConnectionTelemetry.receive` around ``basic.get``,
:meth:`~ConnectionTelemetry.process` when a consumer hands a message to the application and
:meth:`~ConnectionTelemetry.settle` around ``basic.ack``/``nack``/``reject``.

The names follow the OpenTelemetry semantic conventions for messaging and RabbitMQ at
version :data:`SEMCONV_VERSION` (marked "development" there): see ``docs/tracing.md`` for the
span names, kinds and attributes, and the metrics.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, TypeVar, final

import attrs
from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, StatusCode

from .. import BasicAck, BasicNack, BasicProperties, BasicReject, MessageReceived
from ._errors import PublishOutcomeUnknownError
from ._instrument import SEMCONV_VERSION

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from types import TracebackType

    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Span, SpanContext, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from .. import BasicGet, FieldTable, Method
    from ._errors import AMQPError
    from ._message import Message

__all__ = [
    "SCHEMA_URL",
    "SEMCONV_VERSION",
    "ConnectionTelemetry",
    "Instrumentation",
    "Processing",
]

T = TypeVar("T")

SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
_SCOPE: Final = "amqp_sansio"

# Attribute names (semantic conventions 1.44.0, messaging and RabbitMQ).
SYSTEM: Final = "messaging.system"
OPERATION_NAME: Final = "messaging.operation.name"
OPERATION_TYPE: Final = "messaging.operation.type"
DESTINATION: Final = "messaging.destination.name"
ANONYMOUS: Final = "messaging.destination.anonymous"
TEMPORARY: Final = "messaging.destination.temporary"
ROUTING_KEY: Final = "messaging.rabbitmq.destination.routing_key"
DELIVERY_TAG: Final = "messaging.rabbitmq.message.delivery_tag"
MESSAGE_ID: Final = "messaging.message.id"
CONVERSATION_ID: Final = "messaging.message.conversation_id"
BODY_SIZE: Final = "messaging.message.body.size"
BATCH_COUNT: Final = "messaging.batch.message_count"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"

#: The buckets the conventions advise for the duration histograms, in seconds.
_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
#: Unsettled deliveries remembered for their settle spans; beyond, the oldest are forgotten.
_UNSETTLED_LIMIT: Final = 65536

_NO_PROPERTIES: Final = BasicProperties()

_SETTLE_NAMES: Final[dict[type[Method], str]] = {
    BasicAck: "ack",
    BasicNack: "nack",
    BasicReject: "reject",
}


@final
class _HeaderGetter(Getter["FieldTable"]):
    """Reads propagation fields from AMQP headers (a long string arrives as ``str`` or, from
    some peers, as ``bytes``)."""

    def get(self, carrier: FieldTable, key: str) -> list[str] | None:
        value = carrier.get(key)
        if isinstance(value, bytes):
            return [value.decode("utf-8", "replace")]
        if isinstance(value, str):
            return [value]
        return None

    def keys(self, carrier: FieldTable) -> list[str]:
        return list(carrier)


_GETTER: Final = _HeaderGetter()


def _anonymity(name: str) -> str | None:
    """Which attribute marks a queue or routing key as not a real destination name."""
    if name.startswith("amq.gen-"):
        return ANONYMOUS
    if name.startswith("amq.rabbitmq.reply-to"):
        return TEMPORARY
    return None


def send_destination(exchange: str, routing_key: str) -> str:
    """``messaging.destination.name`` of a publish: ``{exchange}:{routing key}``, whichever
    of them is not empty, or ``amq.default``."""
    if exchange and routing_key:
        return f"{exchange}:{routing_key}"
    return exchange or routing_key or "amq.default"


def consume_destination(exchange: str, routing_key: str, queue: str) -> str:
    """``messaging.destination.name`` of a delivery or get: ``{exchange}:{routing key}:{queue}``
    without the empty parts, and the queue once when it is the routing key."""
    if queue == routing_key:
        queue = ""
    if exchange:
        if routing_key:
            return f"{exchange}:{routing_key}:{queue}" if queue else f"{exchange}:{routing_key}"
        return f"{exchange}:{queue}" if queue else exchange
    if routing_key:
        return f"{routing_key}:{queue}" if queue else routing_key
    return queue or "amq.default"


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def _fail(span: Span, attributes: dict[str, AttributeValue], exc: BaseException) -> None:
    error = _error_type(exc)
    attributes[ERROR_TYPE] = error
    span.set_attribute(ERROR_TYPE, error)
    span.set_status(StatusCode.ERROR, str(exc) or error)


@final
class Instrumentation:
    """The tracer, the meter's instruments and the propagator: one per :func:`instrument`
    call (or per ``connect()`` given providers), shared by its connections."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        propagator: TextMapPropagator | None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ours = version("amqp-sansio")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            ours = ""
        self.tracer = trace.get_tracer(_SCOPE, ours, tracer_provider, schema_url=SCHEMA_URL)
        meter = metrics.get_meter(_SCOPE, ours, meter_provider, schema_url=SCHEMA_URL)
        self.duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of messaging operation initiated by a producer or consumer "
            "client.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        self._propagator = propagator

    @property
    def propagator(self) -> TextMapPropagator:
        """The propagator given to :func:`instrument`, else the global one now."""
        return self._propagator if self._propagator is not None else propagate.get_global_textmap()

    def for_connection(self, host: str, port: int) -> ConnectionTelemetry:
        return ConnectionTelemetry(self, host, port)


@final
class ConnectionTelemetry:
    """The hooks of one connection: the server it talks to, and the deliveries handed to the
    application that wait for their settle span."""

    def moved_to(self, host: str, port: int, /) -> None:
        self._server[SERVER_ADDRESS] = host
        self._server[SERVER_PORT] = port

    def __init__(self, instrumentation: Instrumentation, host: str, port: int) -> None:
        self.instrumentation = instrumentation
        self._server: Final[dict[str, AttributeValue]] = {
            SYSTEM: "rabbitmq",
            SERVER_ADDRESS: host,
            SERVER_PORT: port,
        }
        #: Confirm-mode publishes waiting for the broker: (channel, publish number) -> the send
        #: span, its attributes and when it started.
        self._confirming: dict[tuple[int, int], tuple[Span, dict[str, AttributeValue], float]] = {}
        #: (channel, delivery tag) -> destination, creation context, message id, correlation id.
        self._unsettled: dict[
            tuple[int, int], tuple[str, SpanContext | None, str | None, str | None]
        ] = {}

    def _common(self, name: str, kind: str, destination: str | None) -> dict[str, AttributeValue]:
        attributes = dict(self._server)
        attributes[OPERATION_NAME] = name
        attributes[OPERATION_TYPE] = kind
        if destination is not None:
            attributes[DESTINATION] = destination
        return attributes

    def _record(
        self, attributes: Mapping[str, AttributeValue], started: float, *, processing: bool = False
    ) -> None:
        metric = (
            self.instrumentation.process_duration if processing else (self.instrumentation.duration)
        )
        metric.record(time.perf_counter() - started, _metric_attributes(attributes))

    def _creation_context(self, headers: FieldTable | None) -> tuple[Context, SpanContext | None]:
        if not headers:
            return otel_context.Context(), None
        extracted = self.instrumentation.propagator.extract(headers, getter=_GETTER)
        span_context = trace.get_current_span(extracted).get_span_context()
        return extracted, (span_context if span_context.is_valid else None)

    # --- send -----------------------------------------------------------------------------------

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        properties: BasicProperties | None,
        body_size: int,
        send: Callable[[BasicProperties], T],
    ) -> T:
        """``send(properties)`` (the core's publish) inside a "send" span whose context is
        injected into a copy of *properties*' headers: the message's creation context. In
        confirm mode (*send* returns the publish number) the span ends at the broker's confirm
        (:meth:`confirmed`), else at once."""
        destination = send_destination(exchange, routing_key)
        attributes = self._common("publish", "send", destination)
        if routing_key:
            attributes[ROUTING_KEY] = routing_key
        marker = _anonymity(routing_key) if not exchange else None
        if marker is not None:
            attributes[marker] = True
        if properties is not None:
            if properties.message_id:
                attributes[MESSAGE_ID] = properties.message_id
            if properties.correlation_id:
                attributes[CONVERSATION_ID] = properties.correlation_id
        attributes[BODY_SIZE] = body_size
        name = "publish" if marker is not None else f"publish {destination}"
        instrumentation = self.instrumentation
        started = time.perf_counter()
        span = instrumentation.tracer.start_span(
            name, kind=SpanKind.PRODUCER, attributes=attributes
        )
        if properties is None:
            properties = _NO_PROPERTIES
        # A no-op tracer's span has no context worth sending (and injecting costs more than
        # the rest of this method).
        if span.get_span_context().is_valid:
            carrier: dict[str, str] = {}
            instrumentation.propagator.inject(carrier, context=trace.set_span_in_context(span))
            if carrier:
                headers = dict(properties.headers or {})
                headers.update(carrier)
                properties = attrs.evolve(properties, headers=headers)
        # The span is not made current around send(): the core's publish creates no spans.
        try:
            result = send(properties)
        except BaseException as exc:
            _fail(span, attributes, exc)
            self._end_send(span, attributes, started, counted=False)
            raise
        instrumentation.sent.add(1, _metric_attributes(attributes))
        if isinstance(result, int) and not isinstance(result, bool):
            self._confirming[channel, result] = (span, attributes, started)
        else:
            self._end_send(span, attributes, started)
        return result

    def _end_send(
        self,
        span: Span,
        attributes: dict[str, AttributeValue],
        started: float,
        *,
        counted: bool = True,
    ) -> None:
        span.end()
        measured = _metric_attributes(attributes)
        if not counted:
            self.instrumentation.sent.add(1, measured)
        self.instrumentation.duration.record(time.perf_counter() - started, measured)

    def confirmed(self, channel: int, outcomes: list[tuple[int, AMQPError | None]]) -> None:
        """The broker acked (None) or failed (nacked, returned) these publishes: their send
        spans end."""
        confirming = self._confirming
        for number, error in outcomes:
            entry = confirming.pop((channel, number), None)
            if entry is not None:
                span, attributes, started = entry
                if error is not None:
                    _fail(span, attributes, error)
                self._end_send(span, attributes, started)

    def channel_ended(self, channel: int, error: AMQPError) -> None:
        """The channel or connection is gone because of *error*: its unconfirmed publishes
        end with the error their callers get, :class:`PublishOutcomeUnknownError`."""
        confirming = self._confirming
        for key in [key for key in confirming if key[0] == channel]:
            span, attributes, started = confirming.pop(key)
            _fail(span, attributes, PublishOutcomeUnknownError(key[1], error))
            self._end_send(span, attributes, started)

    # --- receive (basic.get) ----------------------------------------------------------------------

    def receive(self, channel: int, method: BasicGet) -> Receiving:
        """A "receive" span for a ``basic.get`` now being sent; end it with the reply."""
        return Receiving(self, channel, method)

    # --- process (a consumer hands a delivery to the application) --------------------------------

    def process(self, queue: str, message: Message, *, no_ack: bool) -> Processing:
        """A "process" span from now until :meth:`Processing.end`, current meanwhile: its
        parent is the message's creation context, or the span already current (then the
        creation context is a link)."""
        return Processing(self, queue, message, no_ack)

    def remember(
        self,
        channel: int,
        delivery_tag: int,
        properties: BasicProperties,
        destination: str,
        creation: SpanContext | None,
    ) -> None:
        """Keep what the settle span of a delivery needs until it is settled."""
        unsettled = self._unsettled
        if len(unsettled) >= _UNSETTLED_LIMIT:
            del unsettled[next(iter(unsettled))]
        unsettled[channel, delivery_tag] = (
            destination,
            creation,
            properties.message_id,
            properties.correlation_id,
        )

    # --- settle ----------------------------------------------------------------------------------

    def settle(self, channel: int, method: Method) -> Settling | None:
        """A "settle" span for ``basic.ack``, ``nack`` or ``reject`` (None for any other
        method)."""
        name = _SETTLE_NAMES.get(type(method))
        if name is None:
            return None
        assert isinstance(method, BasicAck | BasicNack | BasicReject)
        tag = method.delivery_tag
        multiple = not isinstance(method, BasicReject) and method.multiple
        unsettled = self._unsettled
        if multiple:
            keys = [key for key in list(unsettled) if key[0] == channel and key[1] <= tag]
        else:
            keys = [(channel, tag)]
        records = [record for key in keys if (record := unsettled.pop(key, None)) is not None]
        return Settling(self, name, tag, records, multiple)

    def _span(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, AttributeValue],
        links: Iterable[SpanContext],
        context: Context | None = None,
    ) -> Span:
        return self.instrumentation.tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            links=[Link(link) for link in links],
        )


def _metric_attributes(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    """The span's attributes the metrics carry (the low-cardinality ones)."""
    measured = {
        SYSTEM: attributes[SYSTEM],
        SERVER_ADDRESS: attributes[SERVER_ADDRESS],
        SERVER_PORT: attributes[SERVER_PORT],
        OPERATION_NAME: attributes[OPERATION_NAME],
        OPERATION_TYPE: attributes[OPERATION_TYPE],
    }
    destination = attributes.get(DESTINATION)
    if destination is not None:
        measured[DESTINATION] = destination
    error = attributes.get(ERROR_TYPE)
    if error is not None:
        measured[ERROR_TYPE] = error
    return measured


def _span_name(operation: str, destination: str, anonymous: bool) -> str:
    return operation if anonymous else f"{operation} {destination}"


@final
class Receiving:
    """The "receive" span of one ``basic.get``: a context manager; :meth:`got` takes the
    reply."""

    def __init__(self, telemetry: ConnectionTelemetry, channel: int, method: BasicGet) -> None:
        self._telemetry = telemetry
        self._channel = channel
        self._queue = method.queue
        self._no_ack = method.no_ack
        self._attributes = telemetry._common("get", "receive", method.queue or None)
        marker = _anonymity(method.queue)
        if marker is not None:
            self._attributes[marker] = True
        self._anonymous = marker is not None
        self._started = time.perf_counter()
        self._span = telemetry._span(
            _span_name("get", method.queue, self._anonymous),
            SpanKind.CLIENT,
            self._attributes,
            (),
        )

    def got(self, reply: object) -> None:
        """The reply: a ``basic.get-ok`` message (a :class:`MessageReceived`) or empty."""
        if not isinstance(reply, MessageReceived):
            return
        span = self._span
        method = reply.method
        exchange: str = getattr(method, "exchange", "")
        routing_key: str = getattr(method, "routing_key", "")
        destination = consume_destination(exchange, routing_key, self._queue)
        attributes = self._attributes
        attributes[DESTINATION] = destination
        properties = reply.properties
        delivery_tag: int = getattr(method, "delivery_tag", 0)
        update: dict[str, AttributeValue] = {
            DESTINATION: destination,
            DELIVERY_TAG: delivery_tag,
            BODY_SIZE: len(reply.body),
        }
        if routing_key:
            update[ROUTING_KEY] = routing_key
        if isinstance(properties, BasicProperties):
            if properties.message_id:
                update[MESSAGE_ID] = properties.message_id
            if properties.correlation_id:
                update[CONVERSATION_ID] = properties.correlation_id
            _, creation = self._telemetry._creation_context(properties.headers)
            if creation is not None:
                span.add_link(creation)
        else:
            creation = None
        span.set_attributes(update)
        if not self._anonymous:
            span.update_name(f"get {destination}")
        self._telemetry.instrumentation.consumed.add(1, _metric_attributes(attributes))
        if not self._no_ack and isinstance(properties, BasicProperties):
            self._telemetry.remember(
                self._channel,
                delivery_tag,
                properties,
                destination,
                creation,
            )

    def __enter__(self) -> Receiving:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            _fail(self._span, self._attributes, exc)
        self._span.end()
        self._telemetry._record(self._attributes, self._started)


@final
class Processing:
    """The "process" span of one delivery, current from :meth:`ConnectionTelemetry.process`
    until :meth:`end`."""

    __slots__ = ("_attributes", "_context", "_done", "_span", "_started", "_telemetry", "_token")

    def __init__(
        self, telemetry: ConnectionTelemetry, queue: str, message: Message, no_ack: bool
    ) -> None:
        self._telemetry = telemetry
        properties = message.properties
        destination = consume_destination(message.exchange, message.routing_key, queue)
        attributes = self._attributes = telemetry._common("consume", "process", destination)
        marker = _anonymity(queue)
        if marker is not None:
            attributes[marker] = True
        if message.routing_key:
            attributes[ROUTING_KEY] = message.routing_key
        attributes[DELIVERY_TAG] = message.delivery_tag
        if properties.message_id:
            attributes[MESSAGE_ID] = properties.message_id
        if properties.correlation_id:
            attributes[CONVERSATION_ID] = properties.correlation_id
        attributes[BODY_SIZE] = len(message.body)
        extracted, creation = telemetry._creation_context(properties.headers)
        # The creation context is the parent unless the application already has a span
        # current; it is a link either way.
        parent = None
        if creation is not None and not trace.get_current_span().get_span_context().is_valid:
            parent = extracted
        self._started = time.perf_counter()
        span = self._span = telemetry._span(
            _span_name("consume", destination, marker is not None),
            SpanKind.CONSUMER,
            attributes,
            () if creation is None else (creation,),
            context=parent,
        )
        self._done = False
        # A no-op tracer's span is not worth making current (attaching costs more than the
        # rest); end() then only ends it.
        self._context: Context | None = None
        self._token: object | None = None
        if span.get_span_context().is_valid:
            self._context = trace.set_span_in_context(span)
            self._token = otel_context.attach(self._context)
        telemetry.instrumentation.consumed.add(1, _metric_attributes(attributes))
        if not no_ack:
            telemetry.remember(
                message.channel, message.delivery_tag, properties, destination, creation
            )

    def end(self, exc: BaseException | None = None) -> None:
        """The application asked for the next message, or left the consumer."""
        if self._done:
            return
        self._done = True
        token, self._token = self._token, None
        try:
            if token is None:
                return
            # Only where it was attached: a consumer read through asyncio.wait_for (a task of
            # its own) or from another thread leaves the span current in that context only.
            if otel_context.get_current() is self._context:
                otel_context.detach(token)  # type: ignore[arg-type]  # attach()'s own token
        finally:
            if exc is not None:
                _fail(self._span, self._attributes, exc)
            self._span.end()
            self._telemetry._record(self._attributes, self._started, processing=True)


@final
class Settling:
    """The "settle" span of one ``basic.ack``/``nack``/``reject``: a context manager."""

    def __init__(
        self,
        telemetry: ConnectionTelemetry,
        name: str,
        tag: int,
        records: list[tuple[str, SpanContext | None, str | None, str | None]],
        multiple: bool,
    ) -> None:
        self._telemetry = telemetry
        destination = records[0][0] if records else None
        attributes = self._attributes = telemetry._common(name, "settle", destination)
        attributes[DELIVERY_TAG] = tag
        if multiple:
            attributes[BATCH_COUNT] = len(records)
        elif records:
            _, _, message_id, conversation_id = records[0]
            if message_id:
                attributes[MESSAGE_ID] = message_id
            if conversation_id:
                attributes[CONVERSATION_ID] = conversation_id
        self._started = time.perf_counter()
        self._span = telemetry._span(
            name if destination is None else f"{name} {destination}",
            SpanKind.CLIENT,
            attributes,
            [creation for _, creation, _, _ in records if creation is not None],
        )

    def __enter__(self) -> Settling:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            _fail(self._span, self._attributes, exc)
        self._span.end()
        self._telemetry._record(self._attributes, self._started)
