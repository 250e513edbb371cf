"""The executor's stream consumer: one consumer driven on the core in the calling thread.

An executor reads one offset range with one consumer and nothing else on its connection, so
it needs none of ``amqp_blocking``'s I/O thread, locks and routing: it takes the socket and
the core from :func:`amqp_blocking.connect_core` and pumps them itself: about a quarter less
CPU per message than a consumer of ``amqp_blocking.connect`` (``bench/spark.py --executor``).

Heartbeats are off on these connections: Spark suspends the reader while it consumes a
batch, and a suspended reader cannot answer them. ``readTimeoutMs`` bounds a silent broker.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final, final

import attrs

import amqp_blocking
from amqp_sansio import (
    NEED_DATA,
    BasicAck,
    BasicConsume,
    BasicDeliver,
    BasicQos,
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionLost,
    ConsumerCancelled,
    HeartbeatTimeout,
    MessageReceived,
    ProtocolError,
    RemoteProtocolError,
)
from amqp_sansio.client import (
    AMQPError,
    ConnectionLostError,
    ConsumerCancelledError,
    HeartbeatTimeoutError,
    Message,
    error_from,
)

if TYPE_CHECKING:
    from types import TracebackType

    from amqp_sansio import Event, FieldValue, Sentinel
    from amqp_sansio.client import ConnectionParameters

__all__ = ["RangeConsumer"]

logger = logging.getLogger("amqp_spark")

_READ_SIZE: Final = 256 * 1024
_CONSUMER_TAG: Final = "amqp_spark-range"
# How long close() waits for the broker's close-ok before dropping the socket.
_CLOSE_WAIT_S: Final = 2.0


@final
class RangeConsumer:
    """A connection with one stream consumer on one channel; use it as a context manager.

    :meth:`consume` starts the consumer, :meth:`get` returns its next delivery, :meth:`ack`
    gives credit. Every error the broker reports is raised as the adapters raise it
    (:func:`amqp_sansio.client.error_from`).
    """

    def __init__(self, params: ConnectionParameters, role: str) -> None:
        name = f"{params.connection_name or 'amqp_spark'} {role}"
        opened = amqp_blocking.connect_core(attrs.evolve(params, heartbeat=0), connection_name=name)
        self._sock = opened.sock
        self._core = opened.core
        self._address = params.address
        self._timeout = params.connection_timeout
        self._channel = 0
        self._closed = False

    def __enter__(self) -> RangeConsumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def consume(self, queue: str, offset: FieldValue, prefetch: int) -> None:
        """Open the channel, set the prefetch (a stream consumer's credit) and consume
        ``queue`` from ``x-stream-offset`` ``offset``."""
        self._channel = self._core.open_channel()
        self._flush()
        deadline = time.monotonic() + self._timeout
        while True:
            event = self._next_event(deadline)
            if event is None:
                raise TimeoutError(f"the broker did not open a channel within {self._timeout} s")
            if type(event) is ChannelOpened:
                break
            self._check(event)
        self._core.send_method(self._channel, BasicQos(prefetch_count=prefetch))
        self._core.send_method(
            self._channel,
            BasicConsume(
                queue=queue, consumer_tag=_CONSUMER_TAG, arguments={"x-stream-offset": offset}
            ),
        )
        self._flush()

    def get(self, timeout: float) -> Message | None:
        """The next delivery, or None when none arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            event = self._next_event(deadline)
            if event is None:
                return None
            if type(event) is MessageReceived:
                assert isinstance(event, MessageReceived)
                method = event.method
                if type(method) is BasicDeliver:
                    assert isinstance(method, BasicDeliver)
                    if method.consumer_tag == _CONSUMER_TAG:
                        return Message.from_content(
                            event.channel, method, event.properties, event.body
                        )
                continue
            self._check(event)

    def ack(self, delivery_tag: int) -> None:
        """Acknowledge every delivery up to ``delivery_tag`` (credit for as many more)."""
        self._core.send_method(self._channel, BasicAck(delivery_tag=delivery_tag, multiple=True))
        self._flush()

    def close(self) -> None:
        """Close the connection (never rejecting a delivery: a stream queue would answer a
        reject by closing the connection) and the socket."""
        if self._closed:
            return
        self._closed = True
        try:
            self._core.close(200, "Normal shutdown")
            self._flush()
            deadline = time.monotonic() + _CLOSE_WAIT_S
            while (event := self._next_event(deadline)) is not None:
                if type(event) is ConnectionClosed or type(event) is ConnectionLost:
                    break
        except (AMQPError, ProtocolError, OSError) as exc:
            logger.debug("closing the range connection: %s", exc)
        finally:
            self._sock.close()

    # --- the pump ---------------------------------------------------------------------------

    def _next_event(self, deadline: float) -> Event | None:
        """The core's next event, reading the socket until ``deadline`` (None: time is up)."""
        core = self._core
        while True:
            try:
                event: Event | Sentinel = core.next_event()
            except RemoteProtocolError as exc:
                self._flush_quietly()
                raise error_from(exc, connection=True) from exc
            if event is not NEED_DATA:
                return event
            self._flush()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(_READ_SIZE)
            except TimeoutError:
                return None
            core.receive_data(data)  # b"" at end of stream: the core reports ConnectionLost

    def _check(self, event: Event) -> None:
        """Raise what an event other than a delivery means for the consumer."""
        cls = type(event)
        if cls is ChannelClosed or cls is ConnectionClosed:
            assert isinstance(event, ChannelClosed | ConnectionClosed)
            whole = cls is ConnectionClosed
            if whole:
                self._flush_quietly()  # the close-ok the core made
            raise error_from(event, connection=whole)
        if cls is ConnectionLost:
            raise ConnectionLostError("the broker closed the socket")
        if cls is HeartbeatTimeout:  # the adapters' error (this pump turns heartbeats off)
            raise HeartbeatTimeoutError(self._address, self._core.heartbeat)
        if cls is ConsumerCancelled:
            raise ConsumerCancelledError(_CONSUMER_TAG)
        # consume-ok, qos-ok, connection.blocked and the like need nothing here

    def _flush(self) -> None:
        data = self._core.data_to_send()
        if data:
            self._sock.settimeout(None)
            self._sock.sendall(data)

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except OSError:
            logger.debug("could not send the close-ok", exc_info=True)
