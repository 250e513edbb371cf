"""AMQP 0-10 with ``amqp_sansio.v0_10``: a session from attach to detach, both ends our core.

    python examples/amqp_0_10_session.py [COUNT]

The server is a few dozen lines of queue-keeping around the server role of the core, in a
thread; the client drives its core over a blocking socket. Neither knows anything about the
wire: each feeds ``receive_data``, handles ``next_event()``, and writes ``data_to_send()``.

The client attaches a session, declares a queue (the sync bit: the server reports the command
complete at once), publishes COUNT messages, asks ``queue.query`` for a result, subscribes in
window mode with a window of two messages, accepts each message it gets (the core reports
every received transfer complete, which gives the window back), syncs, detaches and closes.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections import deque
from typing import TYPE_CHECKING

from amqp_sansio.v0_10 import (
    NEED_DATA,
    AcceptMode,
    AuthenticationRequested,
    CommandReceived,
    CommandsCompleted,
    Connection,
    ConnectionClosed,
    ConnectionOpened,
    ConnectionState,
    CreditUnit,
    DeliveryProperties,
    FlowMode,
    LocalProtocolError,
    MessageProperties,
    MessageReceived,
    MessageSubscribe,
    QueueDeclare,
    QueueQuery,
    QueueQueryResult,
    ResultReceived,
    Role,
    SessionEnded,
    SessionOpened,
    VirtualHostRequested,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_sansio.v0_10 import Event, Struct


def pump(sock: socket.socket, conn: Connection, until: Callable[[Event], bool]) -> list[Event]:
    """Write, read and handle events until one satisfies *until*; return the events seen."""
    seen: list[Event] = []
    while True:
        while (event := conn.next_event()) is not NEED_DATA:
            seen.append(event)
            if until(event):
                flush(sock, conn)
                return seen
        flush(sock, conn)  # what we asked for, and what the core answered by itself
        conn.receive_data(sock.recv(65536))


def flush(sock: socket.socket, conn: Connection) -> None:
    data = conn.data_to_send()
    if data:
        sock.sendall(data)


def serve(sock: socket.socket) -> None:
    """A tiny broker on the server role: queues, routing by routing key, subscriptions."""
    conn = Connection(Role.SERVER)
    queues: dict[str, deque[tuple[tuple[Struct, ...], bytes]]] = {}
    subscriptions: dict[str, str] = {}  # destination -> queue (one session here)
    with sock:
        while conn.state not in (ConnectionState.CLOSED, ConnectionState.ERROR):
            flush(sock, conn)
            chunk = sock.recv(65536)
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                if isinstance(event, AuthenticationRequested):
                    conn.accept_authentication()
                elif isinstance(event, VirtualHostRequested):
                    conn.accept_virtual_host()
                elif isinstance(event, MessageReceived):
                    dp = event.delivery_properties
                    key = "" if dp is None else dp.routing_key or ""
                    queues.setdefault(key, deque()).append((event.headers, event.body))
                    conn.session(event.channel).complete(event.command_id)
                elif isinstance(event, CommandReceived):
                    session = conn.session(event.channel)
                    command = event.command
                    if isinstance(command, QueueDeclare):
                        queues.setdefault(command.queue or "", deque())
                    elif isinstance(command, MessageSubscribe):
                        subscriptions[command.destination or ""] = command.queue or ""
                    if isinstance(command, QueueQuery):
                        count = len(queues.get(command.queue or "", ()))
                        result = QueueQueryResult(queue=command.queue, message_count=count)
                        session.send_result(event.command_id, result)
                    else:
                        session.complete(event.command_id)  # it took effect
            for session in conn.sessions.values():  # deliver what the credit allows
                for destination, name in subscriptions.items():
                    queue = queues.get(name)
                    while queue:
                        headers, body = queue[0]
                        try:
                            session.transfer(
                                destination, body, headers=headers, accept_mode=AcceptMode.EXPLICIT
                            )
                        except LocalProtocolError:  # no credit left: wait for completions
                            break
                        queue.popleft()
            if not chunk:
                break
        flush(sock, conn)


def main(count: int) -> None:
    client_sock, server_sock = socket.socketpair()
    server = threading.Thread(target=serve, args=(server_sock,), daemon=True)
    server.start()
    conn = Connection(Role.CLIENT)
    with client_sock:
        opened = pump(client_sock, conn, lambda e: isinstance(e, ConnectionOpened))[-1]
        assert isinstance(opened, ConnectionOpened)
        print(f"connected: max frame size {opened.max_frame_size}")

        session = conn.attach("example")
        pump(client_sock, conn, lambda e: isinstance(e, SessionOpened))
        declare = session.send(QueueDeclare(queue="tasks", auto_delete=True), sync=True)
        pump(
            client_sock, conn, lambda e: isinstance(e, CommandsCompleted) and declare in e.commands
        )
        print("declared queue 'tasks'")

        for n in range(count):
            session.transfer(
                "",
                f"task {n}".encode(),
                headers=[
                    DeliveryProperties(routing_key="tasks"),
                    MessageProperties(content_type="text/plain"),
                ],
            )
        query = session.send(QueueQuery(queue="tasks"))
        events = pump(client_sock, conn, lambda e: isinstance(e, ResultReceived))
        result = next(e for e in events if isinstance(e, ResultReceived))
        assert result.command_id == query
        assert isinstance(result.value, QueueQueryResult)
        print(f"published {count} messages; queue.query says {result.value.message_count}")

        session.subscribe("tasks", "worker", accept_mode=AcceptMode.EXPLICIT)
        session.set_flow_mode("worker", FlowMode.WINDOW)
        session.flow("worker", CreditUnit.MESSAGE, 2)  # at most two unsettled transfers
        session.flow("worker", CreditUnit.BYTE)  # and any number of octets
        received = 0
        while received < count:
            for event in pump(client_sock, conn, lambda e: isinstance(e, MessageReceived)):
                if isinstance(event, MessageReceived):
                    received += 1
                    print(f"received {event.body.decode()!r} (command {event.command_id})")
                    session.accept(event.command_id)

        synced = session.sync()
        pump(client_sock, conn, lambda e: isinstance(e, CommandsCompleted) and synced in e.commands)
        print("synced: the server completed every command")
        session.detach()
        pump(client_sock, conn, lambda e: isinstance(e, SessionEnded))
        print("detached")
        conn.close()
        closed = pump(client_sock, conn, lambda e: isinstance(e, ConnectionClosed))[-1]
        assert isinstance(closed, ConnectionClosed)
        print(f"closed: {closed.reply_code}")
    server.join(5)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
