"""Turning OpenTelemetry on: :func:`instrument`, :func:`uninstrument`, and what each adapter's
``connect()`` asks for its connection (:func:`connection_telemetry`).

This module imports nothing from OpenTelemetry: :mod:`._telemetry` (which does) is imported
only once tracing is asked for, so the ``otel`` extra stays optional and a connection without
it pays one ``is None`` test per publish, delivery and settlement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol, Self, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import TracerProvider

    from .. import BasicGet, BasicProperties, Method
    from ._errors import AMQPError
    from ._message import Message
    from ._telemetry import Instrumentation

T = TypeVar("T")

__all__ = [
    "SEMCONV_VERSION",
    "Processing",
    "Receiving",
    "Settling",
    "Telemetry",
    "connection_telemetry",
    "instrument",
    "is_instrumented",
    "uninstrument",
]

#: The version of the OpenTelemetry semantic conventions (messaging, RabbitMQ) the spans and
#: metrics follow; see docs/tracing.md.
SEMCONV_VERSION: Final = "1.44.0"


class Receiving(Protocol):
    """The "receive" span of one ``basic.get`` (a context manager around the request)."""

    def got(self, reply: object, /) -> None:
        """The reply arrived: a ``basic.get-ok`` message, or ``get-empty``."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...


class Settling(Protocol):
    """The "settle" span of one ack, nack or reject (a context manager around sending it)."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...


class Processing(Protocol):
    """The "process" span of one delivery handed to the application."""

    def end(self, exc: BaseException | None = None, /) -> None:
        """The application asked for the next message or left the consumer."""


class Telemetry(Protocol):
    """The hooks an adapter calls when tracing is on (see ``_telemetry.ConnectionTelemetry``):
    the spans, the metrics and the propagation are all behind them."""

    def moved_to(self, host: str, port: int, /) -> None:
        """Recovery reconnected to another node: later spans and metrics name it
        (``server.address``, ``server.port``)."""

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        properties: BasicProperties | None,
        body_size: int,
        send: Callable[[BasicProperties], T],
        /,
    ) -> T:
        """``send(properties)`` in a "send" span, its context injected in the headers; in
        confirm mode (*send* returned a publish number) the span ends at :meth:`confirmed`."""

    def confirmed(self, channel: int, outcomes: list[tuple[int, AMQPError | None]], /) -> None:
        """The broker settled these confirm-mode publishes (None: acked)."""

    def channel_ended(self, channel: int, error: AMQPError, /) -> None:
        """The channel (or the connection) ended because of *error*: its unconfirmed
        publishes end (their outcome unknown)."""

    def receive(self, channel: int, method: BasicGet, /) -> Receiving:
        """A ``basic.get`` is being sent on *channel*."""

    def process(self, queue: str, message: Message, /, *, no_ack: bool) -> Processing:
        """A consumer of *queue* hands *message* to the application."""

    def settle(self, channel: int, method: Method, /) -> Settling | None:
        """*method* is being sent: a "settle" span when it is an ack, nack or reject."""


#: What instrument() set up for the connections opened afterwards; None: tracing off.
_GLOBAL: list[Instrumentation] = []


def _build(
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
    propagator: TextMapPropagator | None,
) -> Instrumentation:
    try:
        from ._telemetry import Instrumentation
    except ImportError as exc:  # pragma: no cover - the otel extra is in the dev group
        raise ImportError(
            "tracing needs OpenTelemetry's API: pip install 'amqp-sansio[otel]'"
        ) from exc
    return Instrumentation(tracer_provider, meter_provider, propagator)


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    propagator: TextMapPropagator | None = None,
) -> None:
    """Trace and measure every connection opened from now on, in all three adapters.

    *tracer_provider* and *meter_provider* default to OpenTelemetry's global ones (as set by
    ``trace.set_tracer_provider``), *propagator* to the global one at the time of each
    publish and delivery (``propagate.set_global_textmap``; W3C trace context unless
    configured otherwise). Calling it again replaces the settings; connections already open
    keep theirs.

    :raises ImportError: ``opentelemetry-api`` is not installed (the ``otel`` extra).
    """
    _GLOBAL[:] = [_build(tracer_provider, meter_provider, propagator)]


def uninstrument() -> None:
    """Stop tracing connections opened from now on (open ones keep tracing until closed)."""
    _GLOBAL.clear()


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return bool(_GLOBAL)


def connection_telemetry(
    host: str,
    port: int,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> Telemetry | None:
    """What a connection to *host*:*port* records: the providers given to ``connect()`` (either
    one turns tracing on for this connection), else :func:`instrument`'s settings, else None
    (tracing off, nothing imported)."""
    if tracer_provider is not None or meter_provider is not None:
        instrumentation = _build(tracer_provider, meter_provider, None)
    elif _GLOBAL:
        instrumentation = _GLOBAL[0]
    else:
        return None
    return instrumentation.for_connection(host, port)
