"""Minimal socket loops around the AMQP 0-10 core, for tests against real peers.

* :class:`SocketDriver` runs one :class:`~amqp_sansio.v0_10.Connection` over a blocking socket:
  write what the core queued, read, feed, collect events, until a condition holds.
* :class:`MiniBroker` is a tiny broker on the server role: queues, routing by routing key,
  subscriptions delivered within the core's credit, results, an exception for a passive
  declare of a missing queue. It completes every command once it took effect.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, final

from amqp_sansio.v0_10 import (
    NEED_DATA,
    AuthenticationRequested,
    CommandReceived,
    Connection,
    ConnectionState,
    ErrorCode,
    LocalProtocolError,
    MessageAccept,
    MessageCancel,
    MessageReceived,
    MessageSubscribe,
    QueueDeclare,
    QueueQuery,
    QueueQueryResult,
    Session,
    SessionState,
    VirtualHostRequested,
)

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from amqp_sansio.v0_10 import Event, Struct

__all__ = ["MiniBroker", "SocketDriver"]


@final
class SocketDriver:
    """A connection and its socket; :meth:`pump` moves octets until a condition holds."""

    def __init__(self, sock: socket.socket, conn: Connection) -> None:
        self.sock = sock
        self.conn = conn
        self.events: list[Event] = []
        self.eof = False
        sock.settimeout(0.05)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(
        self,
        until: Callable[[list[Event]], bool],
        *,
        timeout: float = 10.0,
        on_event: Callable[[Event], None] | None = None,
    ) -> list[Event]:
        """Run until ``until(events)`` holds for the events seen in this call; return them.

        :raises TimeoutError: it did not hold within *timeout* seconds.
        """
        seen: list[Event] = []
        deadline = time.monotonic() + timeout
        while True:
            self.flush()
            if until(seen):
                return seen
            if self.eof or time.monotonic() > deadline:
                raise TimeoutError(f"gave up waiting; events so far: {seen}")
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            self.conn.receive_data(data)
            if not data:
                self.eof = True
            while (event := self.conn.next_event()) is not NEED_DATA:
                seen.append(event)
                self.events.append(event)
                if on_event is not None:
                    on_event(event)


@final
class MiniBroker:
    """Queues and subscriptions behind our server role (one connection at a time)."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[tuple[tuple[Struct, ...], bytes]]] = {}
        # (channel, destination) -> (queue, accept mode, acquire mode)
        self.subscriptions: dict[tuple[int, str], tuple[str, int, int]] = {}
        self.accepted: list[tuple[int, tuple[tuple[int, int], ...]]] = []
        self.delivered: list[tuple[int, int]] = []  # (channel, command id) of our transfers
        self.commands: list[str] = []

    def handle(self, conn: Connection, event: Event) -> None:
        if isinstance(event, AuthenticationRequested):
            conn.accept_authentication()
        elif isinstance(event, VirtualHostRequested):
            conn.accept_virtual_host()
        elif isinstance(event, MessageReceived):
            session = conn.session(event.channel)
            dp = event.delivery_properties
            queue = self.queues.get("" if dp is None else dp.routing_key or "")
            if queue is not None:
                queue.append((event.headers, event.body))
            session.complete(event.command_id)
        elif isinstance(event, CommandReceived):
            self.command(conn.session(event.channel), event)
        self.deliver(conn)

    def command(self, session: Session, event: CommandReceived) -> None:
        command = event.command
        self.commands.append(command.NAME)
        if isinstance(command, QueueDeclare):
            name = command.queue or ""
            if name not in self.queues and command.passive:
                session.raise_exception(
                    ErrorCode.NOT_FOUND, f"no queue {name}", command_id=event.command_id
                )
                return
            self.queues.setdefault(name, deque())
        elif isinstance(command, QueueQuery):
            name = command.queue or ""
            queue = self.queues.get(name)
            subscribers = sum(1 for q, _, _ in self.subscriptions.values() if q == name)
            result = QueueQueryResult(
                queue=name,
                message_count=0 if queue is None else len(queue),
                subscriber_count=subscribers,
                arguments={"exists": queue is not None},
            )
            session.send_result(event.command_id, result)
            return
        elif isinstance(command, MessageSubscribe):
            self.subscriptions[(session.channel, command.destination or "")] = (
                command.queue or "",
                command.accept_mode or 0,
                command.acquire_mode or 0,
            )
        elif isinstance(command, MessageCancel):
            self.subscriptions.pop((session.channel, command.destination or ""), None)
        elif isinstance(command, MessageAccept) and command.transfers is not None:
            self.accepted.append((session.channel, command.transfers.ranges))
        if session.state is SessionState.ATTACHED:
            session.complete(event.command_id)

    def deliver(self, conn: Connection) -> None:
        if conn.state is not ConnectionState.OPEN:
            return
        for (channel, destination), (name, accept, acquire) in list(self.subscriptions.items()):
            session = conn.sessions.get(channel)
            queue = self.queues.get(name)
            if session is None or session.state is not SessionState.ATTACHED or not queue:
                continue
            while queue:
                headers, body = queue[0]
                try:
                    sent = session.transfer(
                        destination,
                        body,
                        headers=headers,
                        accept_mode=accept,
                        acquire_mode=acquire,
                    )
                except LocalProtocolError:  # out of credit: nothing was written
                    break
                queue.popleft()
                self.delivered.append((channel, sent))

    def serve(self, sock: socket.socket, conn: Connection, *, timeout: float = 30.0) -> None:
        """Serve one connection until it is closed or lost."""
        driver = SocketDriver(sock, conn)

        def done(events: list[Event]) -> bool:
            return driver.eof or conn.state in (ConnectionState.CLOSED, ConnectionState.ERROR)

        driver.pump(done, timeout=timeout, on_event=lambda e: self.handle(conn, e))
        driver.flush()
