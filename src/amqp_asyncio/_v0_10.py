"""AMQP 0-10 over asyncio: :func:`connect_0_10`, :class:`Connection010`, :class:`Session010`
and :class:`Subscription010`, thin over :mod:`amqp_sansio.v0_10.client`.

Everything runs on the loop's thread: a call queues its command in the core and registers its
future in the same synchronous step, then writes; the protocol feeds what arrives to the core
and routes its events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, final

from amqp_sansio.client import (
    DEFAULT_URL,
    ConnectionParameters,
    ConnectionTimeoutError,
    connection_parameters,
)
from amqp_sansio.v0_10.client import (
    DEFAULT_PREFETCH,
    ClientCore,
    ClientSession,
    FlowModeName,
    Message,
    Pending,
    Properties,
    SubscriptionCore,
)

from ._generated_session import SessionMethods

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator

    from amqp_sansio.v0_10 import Command, Map, Struct

__all__ = ["Connection010", "Session010", "Subscription010", "connect_0_10"]

logger: Final = logging.getLogger("amqp_asyncio")

_NO_PROPERTIES: Final = Properties()


@final
class _Protocol(asyncio.Protocol):
    def __init__(self, conn: Connection010) -> None:
        self._conn = conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._conn._transport = transport
        self._conn._flush()

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        conn._core.receive_data(data)
        conn._core.process()
        conn._flush()
        conn._arm_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self._conn
        conn._transport = None
        conn._core.receive_data(b"")
        conn._core.process()
        conn._core.closed.finish()


def _future_pending(loop: asyncio.AbstractEventLoop) -> tuple[Pending, asyncio.Future[None]]:
    future: asyncio.Future[None] = loop.create_future()

    def notify() -> None:
        if not future.done():
            future.set_result(None)

    return Pending(notify), future


@final
class Connection010:
    """An AMQP 0-10 connection (from :func:`connect_0_10`): open sessions with
    :meth:`session`."""

    def __init__(self, params: ConnectionParameters, loop: asyncio.AbstractEventLoop) -> None:
        self.params: Final = params
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._core = ClientCore(params, wake=self._flush_soon)
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<amqp_asyncio.Connection010 {self.params.address} closed={self.is_closed}>"

    @property
    def is_closed(self) -> bool:
        return self._core.error is not None

    @property
    def heartbeat(self) -> int:
        """The negotiated heartbeat interval (0: none)."""
        return self._core.conn.heartbeat

    @property
    def max_frame_size(self) -> int:
        return self._core.conn.max_frame_size

    @property
    def server_properties(self) -> Map:
        info = self._core.open_info
        return {} if info is None else dict(info.server_properties)

    async def _wait(self, pending: Pending, future: asyncio.Future[None]) -> Struct | None:
        self._flush()
        await future
        return pending.outcome()

    async def open_session(self, name: str | None = None) -> Session010:
        """Attach a session (named *name*, default a random one)."""
        core = self._core.attach(name or f"amqp_asyncio.{uuid.uuid4()}")
        pending, future = _future_pending(self._loop)
        core.attached = pending
        await self._wait(pending, future)
        return Session010(self, core)

    @asynccontextmanager
    async def session(self, name: str | None = None) -> AsyncIterator[Session010]:
        """A session for the duration of an ``async with`` block (closed at its end)."""
        session = await self.open_session(name)
        try:
            yield session
        finally:
            await session.close()

    async def aclose(self) -> None:
        """Close the connection (``connection.close``) and wait for ``close-ok``."""
        core = self._core
        if core.error is None:
            pending, future = _future_pending(self._loop)
            core.closed = pending
            core.close()
            self._flush()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(future, self.params.connection_timeout)
        self._finish()

    def _finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def _flush(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._core.flush_settlements()
        for buffer in self._core.conn.buffers_to_send():
            transport.write(buffer)

    def _flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _arm_timer(self) -> None:
        deadline = self._core.conn.next_deadline()
        if deadline is None or self._timer is not None:
            return
        self._timer = self._loop.call_at(max(deadline, self._loop.time()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._core.conn.handle_timer(self._loop.time())
        self._core.process()
        self._flush()
        if self._core.error is not None:
            self._finish()
            return
        self._arm_timer()


@final
class Session010(SessionMethods):
    """An attached 0-10 session: declare, bind, query and delete (results are return values;
    an ``execution.exception`` raises its typed :class:`~amqp_sansio.v0_10.client.ExecutionError`
    and ends the session), transfer, subscribe, transactions, :meth:`sync` and :meth:`close`."""

    def __init__(self, conn: Connection010, core: ClientSession) -> None:
        self._conn = conn
        self._core = core

    def __repr__(self) -> str:
        return f"<amqp_asyncio.Session010 {self.name!r}>"

    @property
    def name(self) -> bytes:
        return self._core.name

    @property
    def connection(self) -> Connection010:
        return self._conn

    async def execute(
        self,
        command: Command,
        *,
        headers: tuple[Struct, ...] | None = None,
        body: bytes | None = None,
    ) -> Struct | None:
        """Send any command with the sync bit; return its result (None without one)."""
        pending, future = _future_pending(self._conn._loop)
        self._core.execute(command, pending, headers=headers, body=body)
        return await self._conn._wait(pending, future)

    async def sync(self) -> None:
        """``execution.sync``: returns once every earlier command is complete."""
        pending, future = _future_pending(self._conn._loop)
        self._core.sync(pending)
        await self._conn._wait(pending, future)

    async def transfer(
        self,
        destination: str,
        body: bytes,
        *,
        routing_key: str = "",
        properties: Properties = _NO_PROPERTIES,
        sync: bool = True,
    ) -> None:
        """``message.transfer`` to exchange *destination* (``""``: the default exchange).

        With *sync* (the default) it returns once the broker completed it (it was routed and
        enqueued: 0-10's publisher confirm); else it returns at once.
        """
        headers = properties.header_segment(routing_key, len(body))
        if not sync:
            self._core.transfer(destination, body, headers, None)
            self._conn._flush_soon()
            return
        pending, future = _future_pending(self._conn._loop)
        self._core.transfer(destination, body, headers, pending)
        await self._conn._wait(pending, future)

    async def subscribe(
        self,
        queue: str,
        *,
        destination: str | None = None,
        accept: bool = True,
        acquire: bool = True,
        exclusive: bool = False,
        arguments: Map | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        flow_mode: FlowModeName = "credit",
    ) -> Subscription010:
        """``message.subscribe`` to *queue* with *prefetch* messages of credit (granted back
        as they are taken); iterate the returned :class:`Subscription010`. *accept* False:
        accept mode none (no settling); *acquire* False: browse (acquire mode not-acquired)."""
        pending, future = _future_pending(self._conn._loop)
        sub = self._core.subscribe(
            queue,
            destination or f"amqp_asyncio.{uuid.uuid4().hex[:12]}",
            pending,
            accept=accept,
            acquire=acquire,
            exclusive=exclusive,
            arguments=arguments,
            prefetch=prefetch,
            flow_mode=flow_mode,
        )
        result = Subscription010(self, sub)
        await self._conn._wait(pending, future)
        return result

    async def close(self) -> None:
        """Detach the session (after syncing, when it is usable)."""
        core = self._core
        if core.error is None and self._conn._core.error is None:
            with contextlib.suppress(Exception):
                await self.sync()
        pending, future = _future_pending(self._conn._loop)
        core.detached = pending
        self._conn._core.detach(core)
        self._conn._flush()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(future, self._conn.params.connection_timeout)


@final
class Subscription010:
    """A subscription's messages: ``async for message in subscription`` (ends after
    :meth:`cancel`; raises why the session ended), or :meth:`get`."""

    def __init__(self, session: Session010, core: SubscriptionCore) -> None:
        self._session = session
        self._core = core
        self._event = asyncio.Event()
        core.notify = self._event.set

    @property
    def destination(self) -> str:
        return self._core.destination

    @property
    def queue(self) -> str:
        return self._core.queue

    async def get(self) -> Message | None:
        """The next message; None once the subscription was cancelled."""
        core = self._core
        while True:
            message = core.take()
            if message is not None:
                self._session._conn._flush_soon()
                return message
            if core.error is not None:
                raise core.error
            if core.cancelled:
                return None
            self._event.clear()
            await self._event.wait()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while (message := await self.get()) is not None:
            yield message

    async def cancel(self) -> None:
        """``message.cancel``; messages already buffered are still handed out."""
        if self._core.finished:
            return
        pending, future = _future_pending(self._session._conn._loop)
        self._session._core.cancel(self._core, pending)
        await self._session._conn._wait(pending, future)


@asynccontextmanager
async def connect_0_10(
    url_or_params: str | ConnectionParameters = DEFAULT_URL,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connection_name: str | None = None,
) -> AsyncIterator[Connection010]:
    """Open an AMQP 0-10 connection for the duration of an ``async with`` block (as
    :func:`connect` does for 0-9-1: the same URLs and parameters)."""
    params = connection_parameters(url_or_params, connection_name)
    loop = asyncio.get_running_loop()
    conn = Connection010(params, loop)
    context = ssl_context
    if context is None and params.tls:
        context = params.ssl_context()
    pending, future = _future_pending(loop)
    conn._core.opened = pending
    try:
        async with asyncio.timeout(params.connection_timeout):
            await loop.create_connection(
                lambda: _Protocol(conn),
                params.host,
                params.port,
                ssl=context,
                server_hostname=params.tls_server_hostname if context is not None else None,
            )
            await future
        pending.outcome()
    except TimeoutError:
        conn._finish()
        raise ConnectionTimeoutError(
            f"could not connect to {params.address} within {params.connection_timeout} s"
        ) from None
    except BaseException:
        conn._finish()
        raise
    conn._arm_timer()
    try:
        yield conn
    finally:
        await conn.aclose()
