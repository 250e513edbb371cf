"""AMQP 0-10 over Trio: :func:`connect_0_10`, :class:`Connection010`, :class:`Session010` and
:class:`Subscription010`, thin over :mod:`amqp_sansio.v0_10.client`.

A reader task feeds what arrives to the core and routes its events (and runs the heartbeat
timer); a writer task writes whatever the core queued, woken by every call. A call queues its
command and registers its :class:`~amqp_sansio.v0_10.client.Pending` in one synchronous step,
then waits on a Trio event.
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, final

import trio

from amqp_sansio.client import (
    DEFAULT_URL,
    AMQPError,
    Connect,
    ConnectionLostError,
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
from ._wire import HIGH_WATER, YIELD_EVERY, plain_socket, send_buffers

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterator, Awaitable, Callable

    from amqp_sansio.v0_10 import Command, Map, Struct

__all__ = ["Connection010", "Session010", "Subscription010", "connect_0_10"]

logger: Final = logging.getLogger("amqp_trio")

_NO_PROPERTIES: Final = Properties()
#: As the 0-9-1 reader's: a 64 KiB read left most 64 KiB transfers in two reads, with the
#: partial frame copied forward each time (amqp_trio consuming 64 KiB: 146 -> 110 us of client
#: CPU per message, medians of 3, with 256 KiB reads).
_READ: Final = 256 * 1024
_WRITE_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def _pending() -> tuple[Pending, trio.Event]:
    event = trio.Event()
    return Pending(event.set), event


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
        stream: trio.abc.Stream,
        recovery: RecoveryPolicy | None = None,
        reopen: Callable[[ConnectionParameters], Awaitable[trio.abc.Stream]] | None = None,
    ) -> None:
        self.params: Final = params
        self._stream = stream
        # A transfer is three segments: written with one sendmsg, not a send_all each.
        self._socket = plain_socket(stream)
        self._wake = trio.Event()
        # The writer and a publisher over HIGH_WATER write in turn (one send_all at a time).
        self._send_lock = trio.Lock()
        # Unsynced transfers queued since the last yield to the scheduler.
        self._unyielded = 0
        self._policy = recovery
        self._reopen = reopen
        self._subscribers: set[RecoveryEvents] = set()
        self._supervisor: RecoverySupervisor[ClientCore, ClientSession] = RecoverySupervisor(
            params, recovery, emit=self._emit, logger=logger
        )
        self._core = self._new_core(params)
        self._sessions: dict[int, Session010] = {}
        self._closing = False
        #: While recovering: set when the connection is back (or recovery ended).
        self._recovered: trio.Event | None = None
        self._recovery_scope: trio.CancelScope | None = None
        self._restored = trio.Event()
        self._attempt_error: BaseException | None = None
        self._resumed = False
        self._finished = trio.Event()

    def __repr__(self) -> str:
        return f"<amqp_trio.Connection010 {self.params.address} closed={self.is_closed}>"

    def _new_core(self, params: ConnectionParameters) -> ClientCore:
        core = ClientCore(params, wake=self._wake_writer)
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

    def _wake_writer(self) -> None:
        self._wake.set()

    async def _wait(self, pending: Pending, event: trio.Event) -> Struct | None:
        self._wake.set()
        await event.wait()
        return pending.outcome()

    async def _wait_recovered(self) -> None:
        """While recovering: wait for the connection to come back (see
        :func:`~amqp_trio._recovery.wait_for_recovery`)."""
        if self._recovered is not None:
            assert self._policy is not None
            await wait_for_recovery(self._supervisor, self._policy.publish_wait, self._recovered)

    async def _run_reader(self) -> None:
        core = self._core
        conn = core.conn
        while core.error is None:
            deadline = conn.next_deadline()
            with trio.move_on_at(math.inf if deadline is None else deadline):
                try:
                    data = await self._stream.receive_some(_READ)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                core.receive_data(data, trio.current_time())
                self._process()
                if not data:
                    core.closed.finish()
                    return
                continue
            conn.handle_timer(trio.current_time())
            self._process()

    def _process(self) -> None:
        core = self._core
        core.process()
        supervisor = self._supervisor
        if supervisor.restoring:
            # The restore's steps answer through the core's pendings: look where it stands.
            try:
                supervisor.handle(None)
            except AMQPError as exc:
                self._attempt_error = exc
                self._restored.set()
            else:
                if not supervisor.restoring:
                    self._restored.set()
        self._wake.set()

    async def _run_writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self._write()
            except _WRITE_ERRORS:  # sendmsg raises the socket's OSError itself
                return

    async def _write(self) -> None:
        """Write what the core holds (the gathered accepts first), one writer at a time."""
        async with self._send_lock:
            core = self._core
            core.flush_settlements()
            buffers = core.conn.buffers_to_send()
            if buffers:
                await send_buffers(self._stream, self._socket, buffers)

    async def _output_turn(self) -> None:
        """An unsynced transfer's turn: yield to the scheduler every YIELD_EVERY transfers (a
        scheduling round per transfer costs more than the transfer), and write here while the
        core holds HIGH_WATER octets or more (backpressure). Never raises ``Cancelled``: the
        transfer is queued already."""
        self._unyielded += 1
        if self._core.conn.outbound_size >= HIGH_WATER:
            self._unyielded = 0
            # A broken stream: the reader sees its end and fails what is pending.
            with (
                trio.CancelScope(shield=True),
                contextlib.suppress(*_WRITE_ERRORS),
            ):
                await self._write()
        elif self._unyielded >= YIELD_EVERY:
            self._unyielded = 0
            await trio.lowlevel.cancel_shielded_checkpoint()

    # --- recovery: the supervisor decides, these tasks carry its actions out -------------------

    async def _serve(self, attempt: Connect | None) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run_writer)
            if attempt is not None:
                nursery.start_soon(self._run_attempt, attempt)
            await self._run_reader()
            nursery.cancel_scope.cancel()

    async def _supervise(self) -> None:
        """The connection's tasks under a recovery policy: serve, and recover after a loss."""
        try:
            await self._serve(None)
            while self._core.suspended and not self._closing:
                core = self._core
                assert core.error is not None
                self._recovered = trio.Event()
                self._supervisor.lost(LostSessions(core), core.error, trio.current_time())
                with trio.CancelScope() as scope:
                    self._recovery_scope = scope
                    if not await self._recover():
                        return
                if scope.cancelled_caught:
                    return
        finally:
            self._recovery_scope = None
            self._set_closed()
            self._finished.set()

    async def _recover(self) -> bool:
        assert self._reopen is not None
        return await carry_out(
            self._supervisor, self._reopen, self._attempt, lambda _cause: self._give_up()
        )

    async def _attempt(self, action: Connect, stream: trio.abc.Stream) -> BaseException | None:
        self._stream = stream
        self._socket = plain_socket(stream)
        self._core = self._new_core(action.params)
        self._wake = trio.Event()
        self._restored = trio.Event()
        self._attempt_error = None
        self._resumed = False
        await self._serve(action)
        return None if self._resumed else self._attempt_failure()

    def _attempt_failure(self) -> BaseException:
        error = self._attempt_error or self._core.error
        return error or ConnectionLostError("the connection was lost during recovery")

    async def _run_attempt(self, action: Connect) -> None:
        supervisor = self._supervisor
        core = self._core
        core.opened, opened = _pending()
        self._wake.set()  # the protocol header
        try:
            with trio.fail_at(action.deadline):
                await opened.wait()
                if core.opened.error is not None:
                    self._attempt_error = core.opened.error
                else:
                    supervisor.connected(core)
                    self._wake.set()
                    if supervisor.restoring:
                        await self._restored.wait()
        except trio.TooSlowError:
            self._attempt_error = supervisor.timeout_error()
        if self._attempt_error is not None:
            await trio.aclose_forcefully(self._stream)
            return
        resume = supervisor.next_action(trio.current_time())
        assert isinstance(resume, Resume)
        lost, self._sessions = self._sessions, {}
        for old, new in resume.channels.items():
            session = lost.get(old)
            if session is not None:
                session._core = new
                self._sessions[new.channel] = session
        supervisor.resume()
        self._resumed = True
        recovered, self._recovered = self._recovered, None
        if recovered is not None:
            recovered.set()
        self._wake.set()

    def _give_up(self) -> None:
        recovered, self._recovered = self._recovered, None
        if recovered is not None:
            recovered.set()
        self._set_closed()

    # --- API ----------------------------------------------------------------------------------

    async def open_session(self, name: str | None = None) -> Session010:
        """Attach a session (named *name*, default a random one)."""
        await self._wait_recovered()
        core = self._core.attach(name or f"amqp_trio.{uuid.uuid4()}")
        core.attached, event = _pending()
        await self._wait(core.attached, event)
        session = self._sessions[core.channel] = Session010(self, core)
        return session

    @asynccontextmanager
    async def session(self, name: str | None = None) -> AsyncIterator[Session010]:
        """A session for the duration of an ``async with`` block (closed at its end)."""
        session = await self.open_session(name)
        try:
            yield session
        finally:
            with trio.CancelScope(shield=True):
                await session.close()

    async def aclose(self) -> None:
        """Close the connection (``connection.close``) and wait for ``close-ok``. Closing while
        recovering stops recovery."""
        self._closing = True
        if self._supervisor.close():
            if self._recovery_scope is not None:
                self._recovery_scope.cancel()
            self._give_up()
            await trio.aclose_forcefully(self._stream)
            return
        core = self._core
        if core.error is None:
            core.closed, event = _pending()
            core.close()
            self._wake.set()
            with trio.move_on_after(self.params.connection_timeout):
                await event.wait()


@final
class Session010(SessionMethods):
    """An attached 0-10 session: declare, bind, query and delete (results are return values;
    an ``execution.exception`` raises its typed :class:`~amqp_sansio.v0_10.client.ExecutionError`
    and ends the session), transfer, subscribe, transactions, :meth:`sync` and :meth:`close`."""

    def __init__(self, conn: Connection010, core: ClientSession) -> None:
        self._conn = conn
        self._core = core

    def __repr__(self) -> str:
        return f"<amqp_trio.Session010 {self.name!r}>"

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
        pending, event = _pending()
        self._core.execute(command, pending, headers=headers, body=body)
        return await self._conn._wait(pending, event)

    async def sync(self) -> None:
        """``execution.sync``: returns once every earlier command is complete."""
        await self._conn._wait_recovered()
        pending, event = _pending()
        self._core.sync(pending)
        await self._conn._wait(pending, event)

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
        conn = self._conn
        if conn._recovered is not None:
            await conn._wait_recovered()
        headers = properties.header_segment(routing_key, len(body))
        if not sync:
            # Checked before anything is queued: a cancelled transfer is not sent.
            await trio.lowlevel.checkpoint_if_cancelled()
            self._core.transfer(destination, body, headers, None)
            conn._wake.set()
            await conn._output_turn()
            return
        pending, event = _pending()
        self._core.transfer(destination, body, headers, pending)
        await self._conn._wait(pending, event)

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
        pending, event = _pending()
        sub = self._core.subscribe(
            queue,
            destination or f"amqp_trio.{uuid.uuid4().hex[:12]}",
            pending,
            accept=accept,
            acquire=acquire,
            exclusive=exclusive,
            arguments=arguments,
            prefetch=prefetch,
            flow_mode=flow_mode,
        )
        result = Subscription010(self, sub)
        await self._conn._wait(pending, event)
        return result

    async def close(self) -> None:
        """Detach the session (after syncing, when it is usable)."""
        self._conn._sessions.pop(self._core.channel, None)
        core = self._core
        if core.error is None and self._conn._core.error is None:
            with contextlib.suppress(Exception):
                await self.sync()
        core.detached, event = _pending()
        self._conn._core.detach(core)
        self._conn._wake.set()
        with trio.move_on_after(self._conn.params.connection_timeout):
            await event.wait()


@final
class Subscription010:
    """A subscription's messages: ``async for message in subscription`` (ends after
    :meth:`cancel`; raises why the session ended), or :meth:`get`."""

    def __init__(self, session: Session010, core: SubscriptionCore) -> None:
        self._session = session
        self._core = core
        self._event = trio.Event()
        # Messages handed out since the last yield to the scheduler.
        self._unyielded = 0
        core.notify = self._notify

    def _notify(self) -> None:
        self._event.set()

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
        with trio.move_on_after(math.inf if timeout is None else timeout):
            return await self._next()
        return None

    async def _next(self) -> Message | None:
        core = self._core
        # Checked before anything is taken, so no message is lost to a cancellation. A
        # buffered message is handed out without a scheduling round (the reader buffered a
        # whole read's); the iterator still yields every YIELD_EVERY messages. The credit
        # take() grants back and the accepts wake the writer themselves.
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            message = core.take()
            if message is not None:
                self._unyielded += 1
                if self._unyielded >= YIELD_EVERY:
                    self._unyielded = 0
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return message
            if core.error is not None:
                raise core.error
            if core.cancelled:
                return None
            self._unyielded = 0
            self._event = trio.Event()
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
        pending, event = _pending()
        self._session._core.cancel(self._core, pending)
        await self._session._conn._wait(pending, event)


async def _open_stream(
    params: ConnectionParameters, context: ssl.SSLContext | None
) -> trio.abc.Stream:
    try:
        with trio.fail_after(params.connection_timeout):
            if context is not None:
                return await trio.open_ssl_over_tcp_stream(
                    params.host,
                    params.port,
                    ssl_context=context,
                    https_compatible=False,
                )
            try:
                return await trio.open_tcp_stream(params.host, params.port)
            except OSError as exc:
                raise connect_failed(params.address, exc) from exc
    except trio.TooSlowError:
        raise ConnectionTimeoutError(
            f"could not connect to {params.address} within {params.connection_timeout} s"
        ) from None


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
    context = ssl_context
    if context is None and params.tls:
        context = params.ssl_context()

    async def reopen(again: ConnectionParameters) -> trio.abc.Stream:
        return await _open_stream(again, context if again.tls or ssl_context else None)

    stream = await _open_stream(params, context)
    conn = Connection010(params, stream, recovery, reopen)
    failure: BaseException | None = None
    async with stream, trio.open_nursery() as nursery:
        if recovery is not None:
            nursery.start_soon(conn._supervise)
        else:
            nursery.start_soon(conn._run_writer)
            nursery.start_soon(conn._run_reader)
        try:
            conn._core.opened, opened = _pending()
            conn._wake.set()
            with trio.move_on_after(params.connection_timeout) as scope:
                await opened.wait()
            if scope.cancelled_caught:
                raise ConnectionTimeoutError(
                    f"could not connect to {params.address} within {params.connection_timeout} s"
                )
            conn._core.opened.outcome()
            conn._supervisor.opened()
            yield conn
        except BaseException as exc:
            # re-raised outside the nursery: the caller sees the body's own exception, not
            # an ExceptionGroup around it
            failure = exc
        finally:
            with trio.CancelScope(shield=True):
                await conn.aclose()
                if conn._stream is not stream:  # a recovered connection's
                    await trio.aclose_forcefully(conn._stream)
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
