"""amqp_trio's 0-10 client against the embedded broker (the shared scenarios, and 0-10 to
0-9-1 and back through one broker) and against qpid-python's own server delegate."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

import amqp_trio
from amqp_sansio.v0_10.client import NotFoundError, Properties
from tests.support import scenarios_0_10
from tests.support.broker_0_10 import brokers_in_thread
from tests.support.qpid_server import qpid_server

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from tests.support.broker_0_10 import Ports


@pytest.fixture(scope="module")
def ports() -> Iterator[Ports]:
    with brokers_in_thread(1) as found:
        yield found[0]


def run(ports: Ports, scenario: Callable[[amqp_trio.Session010], Awaitable[None]]) -> None:
    async def main() -> None:
        async with (
            amqp_trio.connect_0_10(ports.url()) as conn,
            conn.session() as session,
        ):
            with trio.fail_after(30):
                await scenario(session)

    trio.run(main)


def test_topology_and_messages(ports: Ports) -> None:
    run(ports, scenarios_0_10.topology_and_messages)


def test_errors_end_the_session(ports: Ports) -> None:
    # connect() with protocol="0-10" (and a URL saying so) is connect_0_10()
    async def main() -> None:
        url = ports.url() + "?protocol=0-10"
        async with amqp_trio.connect(url, protocol="0-10") as conn:
            assert isinstance(conn, amqp_trio.Connection010)
            async with conn.session() as session:
                await scenarios_0_10.errors_end_the_session(session)

    trio.run(main)


def test_alternate_in_use(ports: Ports) -> None:
    run(ports, scenarios_0_10.alternate_in_use)


def test_published_here_consumed_there(ports: Ports) -> None:
    async def main() -> None:
        async with (
            amqp_trio.connect_0_10(ports.url()) as conn,
            conn.session() as session,
            amqp_trio.connect(ports.url("0-9-1")) as conn091,
            conn091.channel() as channel,
        ):
            with trio.fail_after(30):
                await scenarios_0_10.published_here_consumed_there(session, channel)

    trio.run(main)


def test_against_qpids_server_delegate() -> None:
    async def main(port: int) -> None:
        async with amqp_trio.connect_0_10(f"amqp://guest:guest@127.0.0.1:{port}/") as conn:
            async with conn.session("s1") as session:
                await session.queue_declare("q1")
                for n in range(3):
                    await session.transfer(
                        "", b"m%d" % n, routing_key="q1", properties=Properties(headers={"n": n})
                    )
                assert (await session.queue_query("q1")).message_count == 3
                sub = await session.subscribe("q1", prefetch=2)
                for n in range(3):
                    message = await sub.get()
                    assert message is not None
                    assert (message.body, message.headers) == (b"m%d" % n, {"n": n})
                    message.accept()
                await session.sync()
            async with conn.session("s2") as session:
                with pytest.raises(NotFoundError):
                    await session.queue_declare("missing", passive=True)

    with qpid_server() as (port, log):
        trio.run(main, port)
    assert log()["accepted"]
