"""amqp_blocking's 0-10 client against the embedded broker (the shared scenarios, and 0-10 to
0-9-1 and back through one broker) and against qpid-python's own server delegate."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_sansio.v0_10.client import NotFoundError, Properties
from tests.support import scenarios_0_10_blocking as scenarios
from tests.support.broker_0_10 import brokers_in_thread
from tests.support.qpid_server import qpid_server

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.support.broker_0_10 import Ports


@pytest.fixture(scope="module")
def ports() -> Iterator[Ports]:
    with brokers_in_thread(1) as found:
        yield found[0]


def run(ports: Ports, scenario: Callable[[amqp_blocking.Session010], None]) -> None:
    with amqp_blocking.connect_0_10(ports.url()) as conn, conn.session() as session:
        scenario(session)


def test_topology_and_messages(ports: Ports) -> None:
    run(ports, scenarios.topology_and_messages)


def test_errors_end_the_session(ports: Ports) -> None:
    # connect() with protocol="0-10" (and a URL saying so) is connect_0_10()
    with amqp_blocking.connect(ports.url() + "?protocol=0-10", protocol="0-10") as conn:
        assert isinstance(conn, amqp_blocking.Connection010)
        with conn.session() as session:
            scenarios.errors_end_the_session(session)


def test_alternate_in_use(ports: Ports) -> None:
    run(ports, scenarios.alternate_in_use)


def test_published_here_consumed_there(ports: Ports) -> None:
    with (
        amqp_blocking.connect_0_10(ports.url()) as conn,
        conn.session() as session,
        amqp_blocking.connect(ports.url("0-9-1")) as conn091,
        conn091.channel() as channel,
    ):
        scenarios.published_here_consumed_there(session, channel)


def test_subscription_get_times_out(ports: Ports) -> None:
    with amqp_blocking.connect_0_10(ports.url()) as conn, conn.session() as session:
        queue = scenarios.unique("q")
        session.queue_declare(queue, auto_delete=True)
        sub = session.subscribe(queue)
        with pytest.raises(TimeoutError):
            sub.get(timeout=0.05)
        session.transfer("", b"late", routing_key=queue)
        message = sub.get(timeout=10)
        assert message is not None
        assert message.body == b"late"
        message.accept()


def test_against_qpids_server_delegate() -> None:
    with qpid_server() as (port, log):
        with amqp_blocking.connect_0_10(f"amqp://guest:guest@127.0.0.1:{port}/") as conn:
            with conn.session("s1") as session:
                session.queue_declare("q1")
                for n in range(3):
                    session.transfer(
                        "", b"m%d" % n, routing_key="q1", properties=Properties(headers={"n": n})
                    )
                assert session.queue_query("q1").message_count == 3
                sub = session.subscribe("q1", prefetch=2)
                for n in range(3):
                    message = sub.get(timeout=10)
                    assert message is not None
                    assert (message.body, message.headers) == (b"m%d" % n, {"n": n})
                    message.accept()
                session.sync()
            with conn.session("s2") as session, pytest.raises(NotFoundError):
                session.queue_declare("missing", passive=True)
        assert log()["accepted"]


def test_heartbeats_keep_an_idle_connection(ports: Ports) -> None:
    # heartbeat 1 s: the broker drops a client silent for 2 s; the I/O thread keeps this one
    with amqp_blocking.connect_0_10(ports.url() + "?heartbeat=1") as conn:
        assert conn.heartbeat == 1
        with conn.session() as session:
            time.sleep(2.5)
            queue = scenarios.unique("hb")
            session.queue_declare(queue, auto_delete=True)
            assert session.queue_query(queue).queue == queue


def test_credit_and_unsynced_transfers_are_written_without_another_call(ports: Ports) -> None:
    # Output queued outside a writing call (an unsynced transfer, the credit a take grants
    # back, accepts) is written by the I/O thread, not by this thread's next call.
    with (
        amqp_blocking.connect_0_10(ports.url()) as conn,
        conn.session() as session,
        amqp_blocking.connect_0_10(ports.url()) as observer_conn,
        observer_conn.session() as observer,
    ):
        queue = scenarios.unique("written")
        observer.queue_declare(queue, auto_delete=True)
        session.transfer("", b"one", routing_key=queue, sync=False)
        session.transfer("", b"two", routing_key=queue, sync=False)
        for _ in range(1000):  # waits for the I/O thread; asserts no time
            if observer.queue_query(queue).message_count == 2:
                break
            time.sleep(0.01)
        assert observer.queue_query(queue).message_count == 2
        # One message of credit: the second arrives once the first's credit was written,
        # which get() does not do.
        sub = observer.subscribe(queue, prefetch=1)
        for body in (b"one", b"two"):
            message = sub.get(timeout=10)
            assert message is not None
            assert message.body == body
            message.accept()
