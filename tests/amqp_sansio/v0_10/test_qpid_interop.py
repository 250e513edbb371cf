"""Both roles against qpid-python 1.36, an independent AMQP 0-10 implementation, over loopback.

qpid-python runs under Python 2.7 in a subprocess (``tests/support/qpid.py`` installs it); the
tests skip, saying so, only where no Python 2.7 exists.

* Our client role, driven by a minimal socket loop, against qpid's ``delegates.Server`` with a
  session delegate playing a tiny broker (``tests/support/py2/qpid_server_0_10.py2``): ANONYMOUS,
  attach, declare, transfers with properties, a query result, a subscription with message
  credit (nothing delivered past it), accept, sync, an execution exception ending the session,
  a second session detached cleanly, close.
* qpid's ``Connection`` client (``tests/support/py2/qpid_client_0_10.py2``) against our server role
  with :class:`MiniBroker`: the same conversation from the other side, qpid's auto-sync session
  waiting for every command's completion.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from amqp_sansio.v0_10 import (
    AcceptMode,
    CommandsCompleted,
    Connection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    CreditUnit,
    DeliveryProperties,
    ErrorCode,
    ExceptionRaised,
    FlowMode,
    MessageProperties,
    MessageReceived,
    QueueDeclare,
    QueueQuery,
    QueueQueryResult,
    ResultReceived,
    Role,
    SessionEnded,
    SessionOpened,
    TypeCode,
    Typed,
)
from tests.support.qpid import require_qpid, start_py2
from tests.support.v0_10_peers import MiniBroker, SocketDriver

if TYPE_CHECKING:
    from collections.abc import Callable

    from amqp_sansio.v0_10 import Event

SUPPORT = Path(__file__).resolve().parents[2] / "support" / "py2"


def completed(ids: int | list[int]) -> Callable[[list[Event]], bool]:
    wanted = {ids} if isinstance(ids, int) else set(ids)

    def check(events: list[Event]) -> bool:
        done = set()
        for e in events:
            if isinstance(e, CommandsCompleted):
                done |= set(e.commands)
        return wanted <= done

    return check


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.communicate()


def test_our_client_against_qpids_server() -> None:
    require_qpid()
    server = start_py2(SUPPORT / "qpid_server_0_10.py2")
    with contextlib.ExitStack() as stack:
        stack.callback(_stop, server)
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("PORT "), line + (server.stderr.read() if server.stderr else "")
        port = int(line.split()[1])
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        stack.callback(sock.close)
        conn = Connection(Role.CLIENT, ConnectionConfig(client_properties={"test": "interop"}))
        driver = SocketDriver(sock, conn)
        opened = driver.pump(lambda ev: any(isinstance(e, ConnectionOpened) for e in ev))
        assert isinstance(opened[-1], ConnectionOpened)

        session = conn.attach("s1")
        driver.pump(lambda ev: any(isinstance(e, SessionOpened) for e in ev))
        declare = session.send(QueueDeclare(queue="q1"))
        sync = session.sync()
        driver.pump(completed([declare, sync]))

        for n in range(3):
            session.transfer(
                "",
                f"body {n}".encode(),
                headers=[
                    DeliveryProperties(routing_key="q1", delivery_mode=2),
                    MessageProperties(
                        content_type="text/plain", application_headers={"n": n, "who": "us"}
                    ),
                ],
            )
        query = session.send(QueueQuery(queue="q1"), sync=True)
        events = driver.pump(lambda ev: any(isinstance(e, ResultReceived) for e in ev))
        result = next(e for e in events if isinstance(e, ResultReceived))
        assert result.command_id == query
        assert isinstance(result.request, QueueQuery)
        assert isinstance(result.value, QueueQueryResult)
        assert (result.value.queue, result.value.message_count) == ("q1", 3)
        assert result.value.arguments == {"exists": Typed(TypeCode.BOOLEAN, True)}

        session.subscribe("q1", "d", accept_mode=AcceptMode.EXPLICIT)
        session.set_flow_mode("d", FlowMode.CREDIT)
        session.flow("d", CreditUnit.BYTE)
        session.flow("d", CreditUnit.MESSAGE, 2)

        def messages(n: int) -> Callable[[list[Event]], bool]:
            return lambda ev: sum(isinstance(e, MessageReceived) for e in ev) >= n

        got = [e for e in driver.pump(messages(2)) if isinstance(e, MessageReceived)]
        # two messages of credit: a short wait shows the third is not sent
        with pytest.raises(TimeoutError):
            driver.pump(messages(1), timeout=0.5)
        session.accept([m.command_id for m in got])
        session.flow("d", CreditUnit.MESSAGE, 1)
        got += [e for e in driver.pump(messages(1)) if isinstance(e, MessageReceived)]
        session.accept(got[-1].command_id)
        assert [m.body for m in got] == [b"body 0", b"body 1", b"body 2"]
        assert [m.transfer.destination for m in got] == ["d"] * 3
        props = [m.message_properties for m in got]
        assert [p.application_headers for p in props if p is not None] == [
            {"n": Typed(TypeCode.INT64, n), "who": Typed(TypeCode.STR16, "us")} for n in range(3)
        ]
        sync = session.sync()
        driver.pump(completed(sync))

        failing = session.send(QueueDeclare(queue="missing", passive=True), sync=True)
        events = driver.pump(lambda ev: any(isinstance(e, SessionEnded) for e in ev))
        raised = next(e for e in events if isinstance(e, ExceptionRaised))
        assert raised.by_peer
        assert raised.exception.error_code == ErrorCode.NOT_FOUND
        assert raised.exception.command_id == failing
        assert raised.request == QueueDeclare(queue="missing", passive=True)
        ended = next(e for e in events if isinstance(e, SessionEnded))
        assert ended.by_peer
        assert events.index(raised) < events.index(ended)

        second = conn.attach("s2")
        driver.pump(lambda ev: any(isinstance(e, SessionOpened) for e in ev))
        second.send(QueueDeclare(queue="q2"))
        driver.pump(completed(second.sync()))
        second.detach()
        last = driver.pump(lambda ev: any(isinstance(e, SessionEnded) for e in ev))[-1]
        assert isinstance(last, SessionEnded)
        assert (last.by_peer, last.code, last.incomplete_commands) == (False, 0, ())

        conn.close()
        closed = driver.pump(lambda ev: any(isinstance(e, ConnectionClosed) for e in ev))[-1]
        assert isinstance(closed, ConnectionClosed)
        assert not closed.by_peer
        sock.close()
        out, err = server.communicate(timeout=30)
    log_line = next((line for line in out.splitlines() if line.startswith("LOG ")), None)
    assert log_line is not None, out + err
    log = json.loads(log_line[4:])
    assert log["errors"] == []
    assert log["timeout"] == 0  # our answer to request-timeout: no state kept after detach
    assert log["mechanism"] == "ANONYMOUS"
    assert log["client_properties"]["test"] == "interop"
    assert log["client_properties"]["product"] == "amqp-sansio"
    accepted = sorted(n for low, high in log["accepted"] for n in range(low, high + 1))
    assert accepted == sorted(m.command_id for m in got)
    assert log["commands"].count("message_transfer") == 3
    assert "execution_sync" in log["commands"]


def test_qpids_client_against_our_server() -> None:
    require_qpid()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(30)
    port = listener.getsockname()[1]
    broker = MiniBroker()
    errors: list[BaseException] = []
    conn = Connection(Role.SERVER)

    def serve() -> None:
        try:
            sock, _ = listener.accept()
            with sock:
                broker.serve(sock, conn)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = start_py2(SUPPORT / "qpid_client_0_10.py2", "127.0.0.1", str(port))
    try:
        out, err = client.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        client.kill()
        out, err = client.communicate()
        pytest.fail(f"qpid's client hung:\n{out}\n{err}")
    thread.join(30)
    listener.close()
    assert not errors, errors
    assert client.returncode == 0, out + err
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[7:])
    assert result["query"] == {"queue": "q1", "message_count": 3, "arguments": {"exists": True}}
    assert result["past_credit"] is None  # nothing delivered beyond two messages of credit
    assert result["bodies"] == ["body 0", "body 1", "body 2"]
    assert result["headers"] == [{"n": n, "who": "qpid"} for n in range(3)]
    assert result["routing_keys"] == ["q1"] * 3
    assert result["exception"] == {"error_code": 404, "description": "no queue missing"}
    assert result["session_closed"] is True
    assert result["second_closed"] is True
    assert result["connection_closed"] is True
    # What our server saw: every transfer it delivered accepted, three declares.
    accepted = [
        (channel, n)
        for channel, ranges in broker.accepted
        for low, high in ranges
        for n in range(low, high + 1)
    ]
    assert sorted(accepted) == sorted(broker.delivered)
    assert len(broker.delivered) == 3
    assert broker.commands.count("queue.declare") == 3
    assert conn.state.value == "CLOSED"
