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
import ssl as ssl_module
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, final

from amqp_sansio.client import (
    DEFAULT_URL,
    AMQPError,
    Connect,
    ConnectionParameters,
    ConnectionTimeoutError,
    RecoveryPolicy,
    RecoverySupervisor,
    Resume,
    connect_failed,
    connection_parameters,
)
from amqp_sansio.v0_10.client import (
    DEFAULT_PREFETCH,
    ClientCore,
    ClientSession,
    FlowModeName,
    LostSessions,
    Message,
    Pending,
    Properties,
    SubscriptionCore,
)

from ._generated_session import SessionMethods
from ._recovery import RecoveryEvents, RecoveryObservable, carry_out, wait_for_recovery

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
        # A recovered connection gets a new transport: the old one's late callbacks are
        # ignored.
        self._generation = conn._generation

    def _current(self) -> bool:
        return self._generation == self._conn._generation

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self._current():
            transport.abort()
            return
        self._conn._transport = transport
        self._conn._flush()

    def data_received(self, data: bytes) -> None:
        if not self._current():
            return
        conn = self._conn
        conn._core.receive_data(data, conn._loop.time())
        conn._process()
        conn._flush()
        conn._arm_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._current():
            return
        conn = self._conn
        conn._transport = None
        conn._core.receive_data(b"")
        conn._process()
        conn._core.closed.finish()


def _future_pending(loop: asyncio.AbstractEventLoop) -> tuple[Pending, asyncio.Future[None]]:
    future: asyncio.Future[None] = loop.create_future()

    def notify() -> None:
        if not future.done():
            future.set_result(None)

    return Pending(notify), future


@final
class Connection010(RecoveryObservable[ClientCore, ClientSession]):
    """An AMQP 0-10 connection (from :func:`connect_0_10`): open sessions with
    :meth:`session`.

    With a :class:`~amqp_sansio.client.RecoveryPolicy` (``connect_0_10(..., recovery=...)``)
    a lost connection is recovered by the client layer's supervisor, as a 0-9-1 one is (see
    :doc:`/recovery`): new sessions replace the lost ones, what the client declared is declared
    again, subscriptions subscribe again into the same iterators.
    """

    def __init__(
        self,
        params: ConnectionParameters,
        loop: asyncio.AbstractEventLoop,
        recovery: RecoveryPolicy | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.params: Final = params
        self._loop = loop
        self._policy = recovery
        self._ssl_context = ssl_context
        self._generation = 0
        self._transport: asyncio.Transport | None = None
        self._subscribers: set[RecoveryEvents] = set()
        self._supervisor: RecoverySupervisor[ClientCore, ClientSession] = RecoverySupervisor(
            params, recovery, emit=self._emit, logger=logger
        )
        self._core = self._new_core(params)
        self._sessions: dict[int, Session010] = {}
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        #: While recovering: resolved when the connection is back (or recovery ended).
        self._recovered: asyncio.Future[None] | None = None
        self._recovery_task: asyncio.Task[None] | None = None
        # The current attempt: its handshake and its restore.
        self._attempt_futures: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        return f"<amqp_asyncio.Connection010 {self.params.address} closed={self.is_closed}>"

    def _new_core(self, params: ConnectionParameters) -> ClientCore:
        core = ClientCore(params, wake=self._flush_soon)
        supervisor = self._supervisor
        core.epochs = supervisor.epoch
        if self._policy is not None:
            core.recover_on = supervisor.recover_on
        return core

    @property
    def is_closed(self) -> bool:
        return self._core.error is not None and self._recovered is None

    @property
    def close_error(self) -> AMQPError | None:
        """Why the connection ended (as a 0-9-1 connection's ``close_error``); None while open
        or recovering."""
        return self._core.error if self.is_closed else None

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

    async def _wait_recovered(self) -> None:
        """While recovering: wait for the connection to come back (see
        :func:`~amqp_asyncio._recovery.wait_for_recovery`)."""
        if self._recovered is not None:
            assert self._policy is not None
            await wait_for_recovery(self._supervisor, self._policy.publish_wait, self._recovered)

    def _process(self) -> None:
        """Route the core's events; then look where a restore stands, and whether the
        connection was lost for recovery."""
        core = self._core
        core.process()
        supervisor = self._supervisor
        if supervisor.restoring:
            try:
                supervisor.handle(None)
            except AMQPError as exc:
                self._end_attempt(exc)
            else:
                if not supervisor.restoring:
                    self._resolve_attempt()
        if core.error is None:
            return
        if supervisor.attempting:
            self._end_attempt(core.error)
        elif core.suspended and not supervisor.recovering and not self._closing:
            self._lost()

    # --- recovery: the supervisor decides, this carries its actions out -----------------------

    def _lost(self) -> None:
        core = self._core
        assert core.error is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.close()
        self._recovered = self._loop.create_future()
        self._supervisor.lost(LostSessions(core), core.error, self._loop.time())
        self._recovery_task = self._loop.create_task(self._recover())

    async def _recover(self) -> None:
        await carry_out(
            self._supervisor,
            self._loop,
            self._attempt,
            self._drop_transport,
            lambda _cause: self._give_up(),
        )

    async def _attempt(self, action: Connect) -> None:
        supervisor = self._supervisor
        loop = self._loop
        params = action.params
        self._generation += 1
        self._transport = None
        core = self._core = self._new_core(params)
        opened, restored = loop.create_future(), loop.create_future()
        self._attempt_futures = [opened, restored]
        core.opened = Pending(lambda: self._resolve(opened))
        context = self._ssl_context if params.tls or self._ssl_context else None
        if context is None and params.tls:
            context = params.ssl_context()
        async with asyncio.timeout_at(action.deadline):
            try:
                await loop.create_connection(
                    lambda: _Protocol(self),
                    params.host,
                    params.port,
                    ssl=context,
                    server_hostname=params.tls_server_hostname if context is not None else None,
                )
            except OSError as exc:
                if isinstance(exc, TimeoutError | ssl_module.SSLError):
                    raise
                raise connect_failed(params.address, exc) from exc
            await opened
            core.opened.outcome()
            supervisor.connected(core)
            self._flush()
            self._arm_timer()
            if supervisor.restoring:
                await restored
        resume = supervisor.next_action(loop.time())
        assert isinstance(resume, Resume)
        lost, self._sessions = self._sessions, {}
        for old, new in resume.channels.items():
            session = lost.get(old)
            if session is not None:
                session._core = new
                self._sessions[new.channel] = session
        supervisor.resume()
        self._flush()
        recovered, self._recovered = self._recovered, None
        if recovered is not None and not recovered.done():
            recovered.set_result(None)

    @staticmethod
    def _resolve(future: asyncio.Future[None]) -> None:
        if not future.done():
            future.set_result(None)

    def _resolve_attempt(self) -> None:
        for future in self._attempt_futures[1:]:
            self._resolve(future)

    def _end_attempt(self, error: BaseException) -> None:
        for future in self._attempt_futures:
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: the attempt may be gone already

    def _drop_transport(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.abort()
            self._transport = None

    def _give_up(self) -> None:
        recovered, self._recovered = self._recovered, None
        if recovered is not None and not recovered.done():
            recovered.set_result(None)
        self._set_closed()

    # --- API ----------------------------------------------------------------------------------

    async def open_session(self, name: str | None = None) -> Session010:
        """Attach a session (named *name*, default a random one)."""
        await self._wait_recovered()
        core = self._core.attach(name or f"amqp_asyncio.{uuid.uuid4()}")
        pending, future = _future_pending(self._loop)
        core.attached = pending
        await self._wait(pending, future)
        session = self._sessions[core.channel] = Session010(self, core)
        return session

    @asynccontextmanager
    async def session(self, name: str | None = None) -> AsyncIterator[Session010]:
        """A session for the duration of an ``async with`` block (closed at its end)."""
        session = await self.open_session(name)
        try:
            yield session
        finally:
            await session.close()

    async def aclose(self) -> None:
        """Close the connection (``connection.close``) and wait for ``close-ok``. Closing
        while recovering stops recovery."""
        self._closing = True
        task = self._recovery_task
        if self._supervisor.close():
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._drop_transport()
            self._give_up()
            return
        core = self._core
        if core.error is None:
            pending, future = _future_pending(self._loop)
            core.closed = pending
            core.close()
            self._flush()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(future, self.params.connection_timeout)
        self._finish()
        self._set_closed()

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
        self._process()
        self._flush()
        if self._core.error is not None:
            if self._recovered is None and not self._supervisor.attempting:
                self._finish()
            elif self._transport is not None:
                self._transport.abort()  # the heartbeat timeout: connection_lost follows
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
        await self._conn._wait_recovered()
        pending, future = _future_pending(self._conn._loop)
        self._core.execute(command, pending, headers=headers, body=body)
        return await self._conn._wait(pending, future)

    async def sync(self) -> None:
        """``execution.sync``: returns once every earlier command is complete."""
        await self._conn._wait_recovered()
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
        await self._conn._wait_recovered()
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
        await self._conn._wait_recovered()
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
        self._conn._sessions.pop(self._core.channel, None)
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

    async def get(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after *timeout* seconds without one (None: no limit), or
        once the subscription was cancelled and its buffer is empty. A timeout takes nothing
        from the buffer, so no message is lost to it (as 0-9-1's ``Consumer.get``).

        :raises ~amqp_sansio.v0_10.client.ExecutionError: why the session ended (after the
            buffer was handed out)."""
        try:
            async with asyncio.timeout(timeout):
                return await self._next()
        except TimeoutError:
            return None

    async def _next(self) -> Message | None:
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
        while (message := await self._next()) is not None:
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
    recovery: RecoveryPolicy | None = None,
) -> AsyncIterator[Connection010]:
    """Open an AMQP 0-10 connection for the duration of an ``async with`` block (as
    :func:`connect` does for 0-9-1: the same URLs and parameters, and *recovery*, see
    :doc:`/recovery`)."""
    params = connection_parameters(url_or_params, connection_name)
    loop = asyncio.get_running_loop()
    conn = Connection010(params, loop, recovery, ssl_context)
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
        conn._supervisor.opened()
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
