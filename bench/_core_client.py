"""``core``: a bare blocking socket loop over ``amqp_sansio.Connection``, no adapter.

It is the floor the adapters (amqp_trio, amqp_asyncio, amqp_blocking) are held against: the
same core, the same windows and acks, but no tasks, locks, waiters, per-message event objects
of an adapter's own or consumer iterators. One blocking socket, ``sendall`` of what the core
queued after each call an application would make (one write per publish, as the adapters do),
``recv`` into ``receive_data`` and ``next_event`` until ``NEED_DATA``.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from amqp_sansio import (
    NEED_DATA,
    BasicAck,
    BasicConsume,
    BasicProperties,
    BasicPublish,
    BasicQos,
    ChannelClosed,
    ChannelOpened,
    ConfirmSelect,
    Connection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    MessageReceived,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    QueueDeclare,
    Role,
)

if TYPE_CHECKING:
    from amqp_sansio import Event, Method

__all__ = ["CoreClient", "CoreError"]

_READ = 1 << 18
_NO_PROPERTIES = BasicProperties()


class CoreError(Exception):
    """The broker closed the channel or connection, or nacked a publish."""


class CoreClient:
    """One connection, one open channel; every call blocks until done."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        config = ConnectionConfig(
            username=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            virtual_host=unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
            heartbeat=0,
        )
        self.sock = socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 5672), timeout=timeout
        )
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.core = Connection(Role.CLIENT, config)
        self.flush()
        self._until(ConnectionOpened)
        self.channel = self.open_channel()

    # -- plumbing ---------------------------------------------------------------------------

    def flush(self) -> None:
        data = self.core.data_to_send()
        if data:
            self.sock.sendall(data)

    def read(self) -> None:
        data = self.sock.recv(_READ)
        if not data:
            raise CoreError("the broker closed the connection")
        self.core.receive_data(data)

    def events(self) -> list[Event]:
        """Read once (blocking) and return every event the read completed."""
        self.read()
        out: list[Event] = []
        next_event = self.core.next_event
        while (event := next_event()) is not NEED_DATA:
            assert not isinstance(event, type(NEED_DATA))
            if isinstance(event, (ConnectionClosed, ChannelClosed)):
                raise CoreError(f"closed by the broker: {event}")
            out.append(event)
        self.flush()
        return out

    def _until(self, kind: type[Event]) -> Event:
        while True:
            for event in self.events():
                if isinstance(event, kind):
                    return event

    def open_channel(self) -> int:
        channel = self.core.open_channel()
        self.flush()
        while True:
            for event in self.events():
                if isinstance(event, ChannelOpened) and event.channel == channel:
                    return channel

    def call(self, method: Method, channel: int | None = None) -> Method:
        """Send a synchronous method, return its reply (other events are dropped)."""
        number = self.channel if channel is None else channel
        self.core.send_method(number, method)
        self.flush()
        while True:
            for event in self.events():
                if isinstance(event, MethodReceived) and event.request is method:
                    return event.method

    def close(self) -> None:
        """Close the connection (the broker's close-ok awaited, briefly) and the socket."""
        try:
            self.core.close()
            self.flush()
            self.sock.settimeout(5.0)
            while True:
                data = self.sock.recv(_READ)
                if not data:
                    break
                self.core.receive_data(data)
                while (event := self.core.next_event()) is not NEED_DATA:
                    if isinstance(event, ConnectionClosed):
                        return
        except OSError:
            pass
        finally:
            self.sock.close()

    # -- the three benchmark operations -------------------------------------------------------

    def publish(self, queue: str, count: int, body: bytes) -> None:
        """*count* publishes to the default exchange, a write each, then a round trip."""
        publish = self.core.publish
        data_to_send = self.core.data_to_send
        sendall = self.sock.sendall
        channel = self.channel
        method = BasicPublish(routing_key=queue)
        for _ in range(count):
            publish(channel, method, _NO_PROPERTIES, body)
            sendall(data_to_send())
        self.call(QueueDeclare(queue=queue, passive=True))

    def confirm_select(self) -> None:
        self.call(ConfirmSelect())

    def publish_confirmed(self, queue: str, count: int, body: bytes, window: int) -> None:
        """*count* publishes in confirm mode, at most *window* unconfirmed, until all are."""
        core = self.core
        publish = core.publish
        data_to_send = core.data_to_send
        sendall = self.sock.sendall
        channel = self.channel
        method = BasicPublish(routing_key=queue)
        confirmed = 0
        for sent in range(1, count + 1):
            publish(channel, method, _NO_PROPERTIES, body)
            sendall(data_to_send())
            while sent - confirmed >= window:
                confirmed += self._confirms()
        while confirmed < count:
            confirmed += self._confirms()

    def _confirms(self) -> int:
        done = 0
        for event in self.events():
            if type(event) is PublishConfirmed:
                done += len(event.publish_numbers)
            elif type(event) is PublishNacked:
                raise CoreError(f"nacked: {event.publish_numbers[:5]}...")
        return done

    def consume(self, queue: str, count: int, prefetch: int, ack_every: int) -> tuple[int, int]:
        """Consume *count* messages, a ``multiple`` ack every *ack_every*; (messages, octets)."""
        core = self.core
        channel = self.channel
        self.call(BasicQos(prefetch_count=prefetch))
        core.send_method(channel, BasicConsume(queue=queue, consumer_tag="core-bench"))
        self.flush()
        received = octets = 0
        next_event = core.next_event
        send_method = core.send_method
        read = self.read
        flush = self.flush
        while received < count:
            read()
            while (event := next_event()) is not NEED_DATA:
                if type(event) is MessageReceived:
                    received += 1
                    octets += len(event.body)
                    if received % ack_every == 0 or received == count:
                        tag = event.method.delivery_tag  # type: ignore[attr-defined]
                        send_method(channel, BasicAck(delivery_tag=tag, multiple=True))
                elif isinstance(event, (ConnectionClosed, ChannelClosed)):
                    raise CoreError(f"closed by the broker: {event}")
            flush()
        return received, octets
