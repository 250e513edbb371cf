"""amqp_trio's request/reply hand-off: on a plain socket a request is written by its caller
without a scheduling round, the reader hands the reply to the parked caller in one wake-up
(the caller's task is rescheduled with it), and the writer is not woken for replies that
queue nothing. Cancellation around the hand-off loses no reply and confuses no later call.
Counted in task steps, never in time."""

from __future__ import annotations

import socket
from typing import Final, final

import pytest
import trio
import trio.testing

import amqp_trio
from amqp_sansio import QueueDeclare
from amqp_sansio.client import ConnectionLostError
from amqp_trio import ServerConnection
from amqp_trio._waiter import Waiter

from .test_memory import accept, declare_ok, expect, reply, until_channel_closed

pytestmark = pytest.mark.trio

URL: Final = "amqp://guest:guest@memory/?connection_timeout=5000"


def _socket_streams() -> tuple[trio.SocketStream, trio.SocketStream]:
    client_sock, server_sock = socket.socketpair()
    return (
        trio.SocketStream(trio.socket.from_stdlib_socket(client_sock)),
        trio.SocketStream(trio.socket.from_stdlib_socket(server_sock)),
    )


@final
class StepCounter(trio.abc.Instrument):
    """Counts the steps of each task while installed."""

    def __init__(self) -> None:
        self.steps: dict[trio.lowlevel.Task, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task] = self.steps.get(task, 0) + 1


async def test_a_request_and_its_reply_cost_the_caller_one_step_and_the_writer_none() -> None:
    calls = 10

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        for n in range(calls + 1):
            declare = await expect(conn, QueueDeclare)
            await reply(conn, declare.channel, declare_ok(f"q{n}"))
        assert await until_channel_closed(conn) == []

    client, server = _socket_streams()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream, script, server)
        async with amqp_trio.connect_stream(client, URL) as conn, conn.channel() as ch:
            await ch.queue_declare("q0")  # the first output after the channel's open-ok
            await trio.testing.wait_all_tasks_blocked()
            counter = StepCounter()
            me = trio.lowlevel.current_task()
            assert conn._nursery is not None
            writer = next(t for t in conn._nursery.child_tasks if "run_writer" in t.name)
            trio.lowlevel.add_instrument(counter)
            try:
                for n in range(1, calls + 1):
                    assert (await ch.queue_declare(f"q{n}")).queue == f"q{n}"
            finally:
                trio.lowlevel.remove_instrument(counter)
            # One wake-up per call (the reply), none for writing the request.
            assert counter.steps[me] == calls
            assert writer not in counter.steps
        nursery.cancel_scope.cancel()


async def test_a_caller_cancelled_while_parked_drops_the_late_reply_on_a_socket() -> None:
    release = trio.Event()

    async def script(conn: ServerConnection) -> None:
        await accept(conn)
        first = await expect(conn, QueueDeclare)
        await release.wait()
        await reply(conn, first.channel, declare_ok("first"))
        second = await expect(conn, QueueDeclare)
        await reply(conn, second.channel, declare_ok("second"))
        assert await until_channel_closed(conn) == []

    client, server = _socket_streams()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(amqp_trio.serve_stream, script, server)
        async with amqp_trio.connect_stream(client, URL) as conn, conn.channel() as ch:
            with trio.CancelScope() as scope:

                async def cancel_when_parked() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
                    release.set()

                nursery.start_soon(cancel_when_parked)
                await ch.queue_declare("first")
            assert scope.cancelled_caught
            assert (await ch.queue_declare("second")).queue == "second"
            assert not ch.is_closed
        nursery.cancel_scope.cancel()


async def _no_flush() -> None:
    await trio.lowlevel.checkpoint()


async def test_a_reply_handed_over_before_a_cancel_is_returned() -> None:
    # The router set the reply, then the caller's scope was cancelled before the caller ran:
    # the caller was rescheduled with its reply and returns it (the cancel applies at its next
    # checkpoint); the reply is not lost to the cancel.
    waiter = Waiter()
    got: list[object] = []
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as scope:

            async def call() -> None:
                got.append(await waiter.wait(_no_flush))

            nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            waiter.set_result(None)
            nursery.cancel_scope.cancel()  # no checkpoint since the hand-off
        assert not scope.cancelled_caught
    assert got == [None]
    assert waiter.done()


async def test_a_caller_cancelled_while_parked_abandons_its_waiter() -> None:
    waiter = Waiter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter.wait, _no_flush)
        await trio.testing.wait_all_tasks_blocked()
        assert not waiter.done()
        nursery.cancel_scope.cancel()
    assert waiter.done()  # the router drops the late reply


async def test_an_error_set_before_the_caller_parks_is_raised() -> None:
    # The connection failed while the request waited to be written: the caller raises it.
    waiter = Waiter()
    error = ConnectionLostError("gone")

    async def flush() -> None:
        waiter.set_exception(error)
        await trio.lowlevel.checkpoint()

    with pytest.raises(ConnectionLostError) as info:
        await waiter.wait(flush)
    assert info.value is error
